//! Integer dot products of Q5_0 and Q5_1 weight rows with 8-bit activations, as ggml's
//! x86 `ggml_vec_dot_q5_0_q8_0` and `ggml_vec_dot_q5_1_q8_1` (ggml-cpu/arch/x86/quants.c).
//! A Q5 weight is a 4-bit nibble plus a fifth bit from the block's u32 `qh`; element e of a
//! block is byte e's low nibble (e < 16) or byte e-16's high nibble, with bit e of `qh`.
//!
//! Per block, lane l of the 8-lane integer product holds elements 4l..4l+4, and the block adds
//! fma(d_w * d_x, lane, acc) per lane; a row ends with `hsum_float_8` (+ Q5_1's min terms
//! m_w * s_x summed block by block). The scalar references keep that order, so they equal
//! the AVX2 kernels bit for bit, and so do prefill's VNNI tiles (`qgemm`).
//!
//! Q5_0 values are v - 16 in [-16, 15] (signed, as Q8_0's), multiplied with ggml's sign trick
//! (|w| as u8 times x with w's sign); Q5_1 values are v in [0, 31] (unsigned, as Q4_1's).

use super::qdot::{has_fast_q4_1, Q8_1Row};
use half::f16;

const Q5_0_BYTES: usize = 22;
const Q5_1_BYTES: usize = 24;

/// A block's 32 unsigned 5-bit values from its 16 nibble bytes `qs` and fifth bits `qh`.
#[inline(always)]
pub(crate) fn q5_values(qs: &[u8], qh: u32) -> [u8; 32] {
    // two straight loops over fixed arrays (the compiler vectorises them; prefill packs every
    // block of every matrix through here)
    let qs: &[u8; 16] = qs[..16].try_into().expect("16 bytes of nibbles");
    let mut v = [0u8; 32];
    for e in 0..16 {
        v[e] = (qs[e] & 0x0F) | ((((qh >> e) & 1) as u8) << 4);
        v[e + 16] = (qs[e] >> 4) | ((((qh >> (e + 16)) & 1) as u8) << 4);
    }
    v
}

fn f16_at(p: &[u8], i: usize) -> f32 {
    f16::from_le_bytes([p[i], p[i + 1]]).to_f32()
}

fn qh_at(p: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([p[i], p[i + 1], p[i + 2], p[i + 3]])
}

/// One block's integer products per 256-bit lane: lane l sums elements 4l..4l+4.
#[inline(always)]
fn lane_sums(w: impl Fn(usize) -> i32, x: &[i8]) -> [i32; 8] {
    let mut lanes = [0i32; 8];
    for (e, &xv) in x.iter().enumerate().take(32) {
        lanes[e / 4] += w(e) * xv as i32;
    }
    lanes
}

/// Scalar reference: a Q5_0 row (K/32 blocks of 22 bytes: d, qh, qs) against 8-bit
/// activations (Q8_1's values and scales serve as Q8_0's).
pub fn dot_q5_0_ref(row: &[u8], a: &Q8_1Row) -> f32 {
    let mut acc = [0f32; 8];
    for (b, blk) in row.chunks_exact(Q5_0_BYTES).enumerate() {
        let d = f16_at(blk, 0) * a.d[b];
        let v = q5_values(&blk[6..22], qh_at(blk, 2));
        let lanes = lane_sums(|e| v[e] as i32 - 16, &a.qs[b * 32..(b + 1) * 32]);
        for (acc, lane) in acc.iter_mut().zip(lanes) {
            *acc = d.mul_add(lane as f32, *acc);
        }
    }
    super::qdot_k::hsum8_ref(&acc)
}

/// Scalar reference: a Q5_1 row (K/32 blocks of 24 bytes: d, m, qh, qs) against Q8_1
/// activations.
pub fn dot_q5_1_ref(row: &[u8], a: &Q8_1Row) -> f32 {
    let (mut acc, mut msum) = ([0f32; 8], 0f32);
    for (b, blk) in row.chunks_exact(Q5_1_BYTES).enumerate() {
        let d = f16_at(blk, 0) * a.d[b];
        let v = q5_values(&blk[8..24], qh_at(blk, 4));
        let lanes = lane_sums(|e| v[e] as i32, &a.qs[b * 32..(b + 1) * 32]);
        for (acc, lane) in acc.iter_mut().zip(lanes) {
            *acc = d.mul_add(lane as f32, *acc);
        }
        msum += f16_at(blk, 2) * a.s[b];
    }
    super::qdot_k::hsum8_ref(&acc) + msum
}

/// A Q5_0 row against 8-bit activations, on the best kernel this CPU has.
pub fn dot_q5_0(row: &[u8], a: &Q8_1Row) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if has_fast_q4_1() {
        // SAFETY: the features were detected on this CPU; lengths are checked inside.
        return unsafe { avx2::dot_q5_0(row, a) };
    }
    dot_q5_0_ref(row, a)
}

/// A Q5_1 row against Q8_1 activations, on the best kernel this CPU has.
pub fn dot_q5_1(row: &[u8], a: &Q8_1Row) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if has_fast_q4_1() {
        // SAFETY: the features were detected on this CPU; lengths are checked inside.
        return unsafe { avx2::dot_q5_1(row, a) };
    }
    dot_q5_1_ref(row, a)
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::*;
    use crate::kernels::qdot::hsum8;
    use std::arch::x86_64::*;

    /// 0xFF in byte e where bit e of `qh` is set, else 0 (ggml's `bytes_from_bits_32`).
    #[inline(always)]
    unsafe fn bits_to_bytes(qh: u32) -> __m256i {
        // byte e takes qh's byte e / 8, then keeps bit e % 8
        let spread = _mm256_shuffle_epi8(
            _mm256_set1_epi32(qh as i32),
            _mm256_set_epi64x(
                0x0303030303030303,
                0x0202020202020202,
                0x0101010101010101,
                0,
            ),
        );
        let bit = _mm256_set1_epi64x(0x8040201008040201u64 as i64);
        _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit)
    }

    /// A block's 32 nibbles as bytes, elements 0..15 the low halves (`bytes_from_nibbles_32`).
    #[inline(always)]
    unsafe fn nibbles(p: *const u8) -> __m256i {
        let raw = _mm_loadu_si128(p as *const __m128i);
        _mm256_and_si256(
            _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw),
            _mm256_set1_epi8(0x0F),
        )
    }

    #[inline(always)]
    unsafe fn f16_scale(p: *const u8) -> f32 {
        let bits = std::ptr::read_unaligned(p as *const u16) as i32;
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits)))
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_q5_0(row: &[u8], a: &Q8_1Row) -> f32 {
        let nb = row.len() / Q5_0_BYTES;
        assert!(a.qs.len() >= nb * 32 && a.d.len() >= nb);
        let ones = _mm256_set1_epi16(1);
        let mut acc = _mm256_setzero_ps();
        for b in 0..nb {
            let p = row.as_ptr().add(b * Q5_0_BYTES);
            let d = f16_scale(p);
            let hi = bits_to_bytes(std::ptr::read_unaligned(p.add(2) as *const u32));
            // a clear fifth bit means v - 16 < 0: set the top four bits (two's complement)
            let w = _mm256_or_si256(
                nibbles(p.add(6)),
                _mm256_andnot_si256(hi, _mm256_set1_epi8(0xF0u8 as i8)),
            );
            let x = _mm256_loadu_si256(a.qs.as_ptr().add(b * 32) as *const __m256i);
            // mul_sum_i8_pairs_float: |w| times x with w's sign, so maddubs sees u8 x i8
            let prod = _mm256_madd_epi16(
                _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w)),
                ones,
            );
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d * a.d[b]), _mm256_cvtepi32_ps(prod), acc);
        }
        hsum8(acc)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_q5_1(row: &[u8], a: &Q8_1Row) -> f32 {
        let nb = row.len() / Q5_1_BYTES;
        assert!(a.qs.len() >= nb * 32 && a.d.len() >= nb && a.s.len() >= nb);
        let ones = _mm256_set1_epi16(1);
        let mut acc = _mm256_setzero_ps();
        let mut msum = 0f32;
        for b in 0..nb {
            let p = row.as_ptr().add(b * Q5_1_BYTES);
            let (d, m) = (f16_scale(p), f16_scale(p.add(2)));
            let hi = bits_to_bytes(std::ptr::read_unaligned(p.add(4) as *const u32));
            let w = _mm256_or_si256(
                nibbles(p.add(8)),
                _mm256_and_si256(hi, _mm256_set1_epi8(0x10)),
            );
            let x = _mm256_loadu_si256(a.qs.as_ptr().add(b * 32) as *const __m256i);
            // mul_sum_us8_pairs_float: u8 weights x i8 activations
            let prod = _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), ones);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d * a.d[b]), _mm256_cvtepi32_ps(prod), acc);
            msum += m * a.s[b];
        }
        hsum8(acc) + msum
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::qdot::Q8_1Act;
    use crate::kernels::test_data as data;
    use crate::quant::{dequantize, quantize, GgmlType};

    fn check(ty: GgmlType, fast: fn(&[u8], &Q8_1Row) -> f32, slow: fn(&[u8], &Q8_1Row) -> f32) {
        for k in [32, 96, 256, 576, 1536] {
            let mut w = data(k, k as u64 + 13);
            w[7] = -1.0; // a block whose extreme is negative
            w[k - 3] = 1.0; // and one whose extreme is positive
            let rb = ty.row_bytes(k as u64).unwrap() as usize;
            let mut row = vec![0u8; rb];
            quantize(ty, &w, &mut row).unwrap();
            let x = data(k, 17 + k as u64);
            let mut a = Q8_1Act::default();
            a.quantize(&x);
            let (f, s) = (fast(&row, &a.row()), slow(&row, &a.row()));
            // the reference keeps the AVX2 lanes and order
            assert_eq!(f.to_bits(), s.to_bits(), "{ty} k={k}: {f} vs {s}");
            let mut wf = vec![0f32; k];
            dequantize(ty, &row, &mut wf).unwrap();
            let exact: f32 = wf.iter().zip(&x).map(|(p, q)| p * q).sum();
            assert!(
                (s - exact).abs() < 0.03 * (1.0 + exact.abs()),
                "{ty} k={k}: {s} vs {exact}"
            );
        }
    }

    #[test]
    fn fast_q5_0_matches_reference_and_f32() {
        check(GgmlType::Q5_0, dot_q5_0, dot_q5_0_ref);
    }

    #[test]
    fn fast_q5_1_matches_reference_and_f32() {
        check(GgmlType::Q5_1, dot_q5_1, dot_q5_1_ref);
    }

    #[test]
    fn q5_values_match_dequantize() {
        let w = data(64, 3);
        let mut row = vec![0u8; 44];
        quantize(GgmlType::Q5_0, &w, &mut row).unwrap();
        let mut wf = vec![0f32; 64];
        dequantize(GgmlType::Q5_0, &row, &mut wf).unwrap();
        for (b, blk) in row.chunks_exact(Q5_0_BYTES).enumerate() {
            let v = q5_values(&blk[6..22], qh_at(blk, 2));
            for e in 0..32 {
                assert_eq!((v[e] as f32 - 16.0) * f16_at(blk, 0), wf[b * 32 + e]);
            }
        }
    }
}
