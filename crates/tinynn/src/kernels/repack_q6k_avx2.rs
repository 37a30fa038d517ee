//! The AVX2 kernel of `repack_q6k`'s 16-row Q6_K layout, for CPUs without AVX-512 VNNI (the
//! row-side-by-side idea of ggml-cpu's `ggml_gemm_q4_K_8x8_q8_K`, arch/x86/repack.cpp, on
//! `ggml_vec_dot_q6_K_q8_K`'s maths): a group's 16 rows are two halves of 8, a row per 32-bit
//! lane; `maddubs` multiplies 4 stored values (0..63, the 6-bit value + 32) of each row by 4
//! broadcast Q8_K activations. Two such products fit i16 (2 * 2 * 63 * 127 = 32004), `madd`
//! with the signed scale then gives i32, and 32 * scale * (the sub-block's activation sum)
//! comes off once per block. Integer sums are exact and the f32 step per block and row is the
//! VNNI kernel's (`repack_q6k::vnni::group`), so both CPUs give the same bits.

use super::qdot_k::Q8KAct;
use super::repack_k_avx2::store_halves;
use super::repack_q6k::{AVX2_TT as TT, G, GB, QH, QL, SCALES};
use crate::quant::QK_K;
use std::arch::x86_64::*;

/// 8 signed bytes at `p` as i16, each twice: [b0, b0, b1, b1, ..., b7, b7].
#[inline(always)]
unsafe fn dup16(p: *const u8) -> __m256i {
    let b = _mm_loadl_epi64(p as *const __m128i);
    _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(b, b))
}

/// One group of 16 rows of the packed `data` (K = `cols`) against TN tokens from t0.
///
/// # Safety
/// AVX2, FMA and F16C; `g` a group of `data`, tokens t0..t0+TN held by `act`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn group<const TN: usize>(
    data: &[u8],
    cols: usize,
    g: usize,
    act: &Q8KAct,
    t0: usize,
    res: &mut [[f32; G]; TT],
) {
    let nb = cols / QK_K;
    assert!(data.len() >= (g + 1) * nb * GB && act.d.len() >= (t0 + TN) * nb);
    // (half, token): f32 lanes, a row each
    let mut acc = [[_mm256_setzero_ps(); TN]; 2];
    for b in 0..nb {
        let base = data.as_ptr().add((g * nb + b) * GB);
        for (r8, acc) in acc.iter_mut().enumerate() {
            let mut isum = [_mm256_setzero_si256(); TN];
            let x0 = t0 * cols + QK_K * b;
            for n in 0..2 {
                for c0 in [0, 4] {
                    run::<TN, 0>(base, r8, (n, c0), act, x0, cols, &mut isum);
                    run::<TN, 1>(base, r8, (n, c0), act, x0, cols, &mut isum);
                }
            }
            let dw = _mm256_cvtph_ps(_mm_loadu_si128(base.add(16 * r8) as *const __m128i));
            for (t, a) in acc.iter_mut().enumerate() {
                let tb = (t0 + t) * nb + b;
                let off = offsets(base, r8, &act.bsums[16 * tb..16 * tb + 16]);
                let i = _mm256_sub_epi32(isum[t], _mm256_slli_epi32::<5>(off));
                let xd = _mm256_set1_ps(act.d[tb]);
                *a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i), _mm256_mul_ps(dw, xd), *a);
            }
        }
    }
    store_halves(&acc, res)
}

/// Chunks c0..c0+4 of run H of half n of a block for rows 8r8..8r8+8: sub-block
/// 8n + 2H + c0/4 from the low nibbles, 8n + 4 + 2H + c0/4 from the high ones, each token's
/// scaled sums (of the stored values, + 32) added to its `isum`.
#[inline(always)]
unsafe fn run<const TN: usize, const H: usize>(
    base: *const u8,
    r8: usize,
    (n, c0): (usize, usize),
    act: &Q8KAct,
    x0: usize,
    ld: usize,
    isum: &mut [__m256i; TN],
) {
    let (low, top) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(0x30));
    // the 2 high bits of quarter k of a half are bits 2k, 2k+1 of its byte: moved to bits
    // 4, 5 (16-bit shifts; what crosses from the neighbouring byte falls outside 0x30)
    let mut lo = [_mm256_setzero_si256(); 4];
    let mut hi = [_mm256_setzero_si256(); 4];
    for u in 0..4 {
        let c = c0 + u;
        let q4 = _mm256_loadu_si256(base.add(QL + ((2 * n + H) * 8 + c) * 64 + 32 * r8) as _);
        let q2 = _mm256_loadu_si256(base.add(QH + (n * 8 + c) * 64 + 32 * r8) as _);
        let (b_lo, b_hi) = if H == 0 {
            (_mm256_slli_epi16::<4>(q2), q2)
        } else {
            (_mm256_slli_epi16::<2>(q2), _mm256_srli_epi16::<2>(q2))
        };
        lo[u] = _mm256_or_si256(_mm256_and_si256(q4, low), _mm256_and_si256(b_lo, top));
        let q4h = _mm256_and_si256(_mm256_srli_epi16::<4>(q4), low);
        hi[u] = _mm256_or_si256(q4h, _mm256_and_si256(b_hi, top));
    }
    for (high, vals) in [(0, &lo), (1, &hi)] {
        let s = 8 * n + 4 * high + 2 * H + c0 / 4;
        let sc = dup16(base.add(SCALES + G * s + 8 * r8));
        // the sub-block's first activation, in i32 units
        let at = (128 * n + 64 * high + 32 * H + 4 * c0) / 4;
        for (t, is) in isum.iter_mut().enumerate() {
            let x = act.qs.as_ptr().add(x0 + t * ld) as *const i32;
            let p = |u: usize| {
                let xu = _mm256_set1_epi32(std::ptr::read_unaligned(x.add(at + u)));
                _mm256_maddubs_epi16(vals[u], xu)
            };
            let a0 = _mm256_add_epi16(p(0), p(1));
            let a1 = _mm256_add_epi16(p(2), p(3));
            let s = _mm256_add_epi32(_mm256_madd_epi16(a0, sc), _mm256_madd_epi16(a1, sc));
            *is = _mm256_add_epi32(*is, s);
        }
    }
}

/// Sum over the 16 sub-blocks s of scale_s * (sum of the sub-block's 16 activations), for rows
/// 8r8..8r8+8 (two sub-blocks per `madd`).
#[inline(always)]
unsafe fn offsets(base: *const u8, r8: usize, bsums: &[i16]) -> __m256i {
    let mut off = _mm256_setzero_si256();
    for s in (0..16).step_by(2) {
        let s0 = _mm_loadl_epi64(base.add(SCALES + G * s + 8 * r8) as *const __m128i);
        let s1 = _mm_loadl_epi64(base.add(SCALES + G * (s + 1) + 8 * r8) as *const __m128i);
        let sc = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(s0, s1));
        let x = _mm256_set1_epi32(bsums[s] as u16 as i32 | ((bsums[s + 1] as i32) << 16));
        off = _mm256_add_epi32(off, _mm256_madd_epi16(sc, x));
    }
    off
}
