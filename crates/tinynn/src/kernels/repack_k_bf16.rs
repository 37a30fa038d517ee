//! Repacked Q4_K groups (`repack_k`'s 16 interleaved rows) straight into `bf16gemm`'s B
//! panels for prefill on AMX (`qmatmul_amx`): the 16 lanes of a vector are the group's 16
//! rows, which are 16 adjacent columns of a panel, so each 64-byte run of nibbles becomes
//! four rows of pairs of the panel without a transpose. Each value is
//! `dequantize_block_q4_k`'s `d * scale * q - dmin * min` (a product, then a difference, as
//! `PackedK::dequantize_row` computes it), rounded to bf16 to nearest even.

use super::bf16gemm::NR;
use super::repack_k::{group_block_bytes, PackedK, G, MINS, QS, SCALES};
use crate::quant::{GgmlType, QK_K};

impl PackedK {
    /// Group `g`'s rows as columns `c0..c0 + 16` of a B panel of `cols / 2` rows of NR pairs
    /// (`bf16gemm`'s layout, k = this matrix's width): `panel[p * NR + c0 + lane]` =
    /// (W(16 g + lane, 2p), W(16 g + lane, 2p + 1)) in bf16.
    ///
    /// # Safety
    /// Only where AVX-512F, -BW and AVX512-BF16 are present; `self.ty` must be Q4_K.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
    pub(crate) unsafe fn bf16_columns(&self, g: usize, panel: &mut [u32], c0: usize) {
        use std::arch::x86_64::*;
        assert_eq!(
            self.ty,
            GgmlType::Q4_K,
            "bf16_columns reads the Q4_K layout"
        );
        assert!(g < self.groups() && c0 + G <= NR);
        assert!(panel.len() >= self.cols / 2 * NR);
        let (nb, gb) = (self.cols / QK_K, group_block_bytes(self.ty));
        let data = self.view().data;
        let out = panel.as_mut_ptr().add(c0);
        let lanes = |at: usize| {
            _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(
                data.as_ptr().add(at).cast(),
            )))
        };
        let nib = _mm512_set1_epi32(0x0f);
        // pair (e0, e1) of each lane as one u32: bf16(e0) low, bf16(e1) high
        let pair = |e0: __m512, e1: __m512| {
            let lo = _mm512_cvtepu16_epi32(std::mem::transmute::<__m256bh, __m256i>(
                _mm512_cvtneps_pbh(e0),
            ));
            let hi = _mm512_cvtepu16_epi32(std::mem::transmute::<__m256bh, __m256i>(
                _mm512_cvtneps_pbh(e1),
            ));
            _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16))
        };
        for b in 0..nb {
            let at = (g * nb + b) * gb;
            let d = _mm512_cvtph_ps(_mm256_loadu_si256(data.as_ptr().add(at).cast()));
            let dmin = _mm512_cvtph_ps(_mm256_loadu_si256(data.as_ptr().add(at + 32).cast()));
            for j in 0..4 {
                let (s1, s2) = (2 * j, 2 * j + 1);
                let d1 = _mm512_mul_ps(d, lanes(at + SCALES + G * s1));
                let m1 = _mm512_mul_ps(dmin, lanes(at + MINS + G * s1));
                let d2 = _mm512_mul_ps(d, lanes(at + SCALES + G * s2));
                let m2 = _mm512_mul_ps(dmin, lanes(at + MINS + G * s2));
                for c in 0..8 {
                    let v =
                        _mm512_loadu_si512(data.as_ptr().add(at + QS + (8 * j + c) * 64).cast());
                    // byte i of each lane: element 64j + 4c + i (low nibble), + 32 (high)
                    let q = |shift: u32| {
                        let x = _mm512_and_si512(
                            _mm512_srl_epi32(v, _mm_cvtsi32_si128(shift as i32)),
                            nib,
                        );
                        _mm512_cvtepi32_ps(x)
                    };
                    let lo = |i: u32| _mm512_sub_ps(_mm512_mul_ps(d1, q(8 * i)), m1);
                    let hi = |i: u32| _mm512_sub_ps(_mm512_mul_ps(d2, q(8 * i + 4)), m2);
                    let p = b * QK_K / 2 + 32 * j + 2 * c;
                    let store =
                        |p: usize, x: __m512i| _mm512_storeu_si512(out.add(p * NR).cast(), x);
                    store(p, pair(lo(0), lo(1)));
                    store(p + 1, pair(lo(2), lo(3)));
                    store(p + 16, pair(hi(0), hi(1)));
                    store(p + 17, pair(hi(2), hi(3)));
                }
            }
        }
    }
}
