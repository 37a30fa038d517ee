//! Decode's row dots of the legacy types against both activation planes (`act_split`) in one
//! pass over the weight row: each block's weights are loaded and unpacked once and multiplied
//! by the coarse and the fine plane into two accumulators, which end as
//! `dot(row, hi) + dot(row, lo)` would (`qdot`'s AVX2 kernels, ggml's `hsum_float_8` order), to
//! the bit. Q5_0 and Q5_1 take their one-plane kernels twice.

use super::qdot::{dot_q4_0, dot_q4_1, dot_q8_0, has_fast_q4_1, Q8_1Row};
use super::qdot_q5::{dot_q5_0, dot_q5_1};
use crate::quant::GgmlType;

/// A weight row against the two planes of one token.
pub type SplitDot = fn(&[u8], &Q8_1Row, &Q8_1Row) -> f32;

/// The two-plane row dot for weights of type `ty` (the legacy types).
pub fn split_dot(ty: GgmlType) -> Option<SplitDot> {
    use GgmlType::*;
    Some(match ty {
        Q4_0 => dot_q4_0_x2,
        Q4_1 => dot_q4_1_x2,
        Q8_0 => dot_q8_0_x2,
        Q5_0 => |r, h, l| dot_q5_0(r, h) + dot_q5_0(r, l),
        Q5_1 => |r, h, l| dot_q5_1(r, h) + dot_q5_1(r, l),
        _ => return None,
    })
}

/// `dot_q4_0(row, h) + dot_q4_0(row, l)`.
pub fn dot_q4_0_x2(row: &[u8], h: &Q8_1Row, l: &Q8_1Row) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if has_fast_q4_1() {
        // SAFETY: the features were detected on this CPU; lengths are checked inside.
        return unsafe { avx2::q4_0(row, h, l) };
    }
    dot_q4_0(row, h) + dot_q4_0(row, l)
}

/// `dot_q4_1(row, h) + dot_q4_1(row, l)`.
pub fn dot_q4_1_x2(row: &[u8], h: &Q8_1Row, l: &Q8_1Row) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if has_fast_q4_1() {
        // SAFETY: as above.
        return unsafe { avx2::q4_1(row, h, l) };
    }
    dot_q4_1(row, h) + dot_q4_1(row, l)
}

/// `dot_q8_0(row, h) + dot_q8_0(row, l)`.
pub fn dot_q8_0_x2(row: &[u8], h: &Q8_1Row, l: &Q8_1Row) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if has_fast_q4_1() {
        // SAFETY: as above.
        return unsafe { avx2::q8_0(row, h, l) };
    }
    dot_q8_0(row, h) + dot_q8_0(row, l)
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::super::qdot::{hsum8, Q8_1Row};
    use std::arch::x86_64::*;

    fn check(nb: usize, h: &Q8_1Row, l: &Q8_1Row) {
        assert!(h.qs.len() >= nb * 32 && h.d.len() >= nb && h.s.len() >= nb);
        assert!(l.qs.len() >= nb * 32 && l.d.len() >= nb && l.s.len() >= nb);
    }

    /// The f16 at `p`, widened.
    #[inline(always)]
    unsafe fn half(p: *const u8) -> f32 {
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(
            std::ptr::read_unaligned(p as *const u16) as i32,
        )))
    }

    /// Σ pairs of u8 w × i8 x into 8 lanes of i32 (ggml's `mul_sum_us8_pairs`).
    #[inline(always)]
    unsafe fn us8(w: __m256i, x: __m256i) -> __m256i {
        _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1))
    }

    /// Σ pairs of i8 w × i8 x: |w| against x with w's sign.
    #[inline(always)]
    unsafe fn s8(w: __m256i, x: __m256i) -> __m256i {
        us8(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w))
    }

    /// The 32 activations of block b of plane `a`.
    #[inline(always)]
    unsafe fn xs(a: &Q8_1Row, b: usize) -> __m256i {
        _mm256_loadu_si256(a.qs.as_ptr().add(b * 32) as *const __m256i)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn q4_0(row: &[u8], h: &Q8_1Row, l: &Q8_1Row) -> f32 {
        const BYTES: usize = 18;
        let nb = row.len() / BYTES;
        check(nb, h, l);
        let (low, off) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(8));
        let (mut ah, mut al) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        for b in 0..nb {
            let p = row.as_ptr().add(b * BYTES);
            let d = half(p);
            let raw = _mm_loadu_si128(p.add(2) as *const __m128i);
            let w = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), low);
            let w = _mm256_sub_epi8(w, off);
            let (ph, pl) = (s8(w, xs(h, b)), s8(w, xs(l, b)));
            ah = _mm256_fmadd_ps(_mm256_set1_ps(d * h.d[b]), _mm256_cvtepi32_ps(ph), ah);
            al = _mm256_fmadd_ps(_mm256_set1_ps(d * l.d[b]), _mm256_cvtepi32_ps(pl), al);
        }
        hsum8(ah) + hsum8(al)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn q4_1(row: &[u8], h: &Q8_1Row, l: &Q8_1Row) -> f32 {
        const BYTES: usize = 20;
        let nb = row.len() / BYTES;
        check(nb, h, l);
        let low = _mm256_set1_epi8(0x0F);
        let (mut ah, mut al) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let (mut mh, mut ml) = (0f32, 0f32);
        for b in 0..nb {
            let p = row.as_ptr().add(b * BYTES);
            let (d, m) = (half(p), half(p.add(2)));
            let raw = _mm_loadu_si128(p.add(4) as *const __m128i);
            // elements 0..15 are the low nibbles, 16..31 the high ones
            let w = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), low);
            let (ph, pl) = (us8(w, xs(h, b)), us8(w, xs(l, b)));
            ah = _mm256_fmadd_ps(_mm256_set1_ps(d * h.d[b]), _mm256_cvtepi32_ps(ph), ah);
            al = _mm256_fmadd_ps(_mm256_set1_ps(d * l.d[b]), _mm256_cvtepi32_ps(pl), al);
            mh += m * h.s[b];
            ml += m * l.s[b];
        }
        (hsum8(ah) + mh) + (hsum8(al) + ml)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn q8_0(row: &[u8], h: &Q8_1Row, l: &Q8_1Row) -> f32 {
        const BYTES: usize = 34;
        let nb = row.len() / BYTES;
        check(nb, h, l);
        let (mut ah, mut al) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        for b in 0..nb {
            let p = row.as_ptr().add(b * BYTES);
            let d = half(p);
            let w = _mm256_loadu_si256(p.add(2) as *const __m256i);
            let (ph, pl) = (s8(w, xs(h, b)), s8(w, xs(l, b)));
            ah = _mm256_fmadd_ps(_mm256_set1_ps(d * h.d[b]), _mm256_cvtepi32_ps(ph), ah);
            al = _mm256_fmadd_ps(_mm256_set1_ps(d * l.d[b]), _mm256_cvtepi32_ps(pl), al);
        }
        hsum8(ah) + hsum8(al)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::act_split::SplitAct;

    /// The one-pass kernels give the bits of one pass per plane, and the two planes together
    /// come within 2^-15 of each block's amax of the unrounded product.
    #[test]
    fn one_pass_equals_one_kernel_per_plane_and_the_unrounded_product() {
        use crate::quant::{dequantize, quantize};
        for ty in [
            GgmlType::Q4_0,
            GgmlType::Q4_1,
            GgmlType::Q8_0,
            GgmlType::Q5_0,
            GgmlType::Q5_1,
        ] {
            let one: fn(&[u8], &Q8_1Row) -> f32 = match ty {
                GgmlType::Q4_0 => dot_q4_0,
                GgmlType::Q4_1 => dot_q4_1,
                GgmlType::Q8_0 => dot_q8_0,
                GgmlType::Q5_0 => dot_q5_0,
                _ => dot_q5_1,
            };
            for k in [32, 576, 1536] {
                let w = crate::kernels::test_data(k, k as u64 + 1);
                let mut row = vec![0u8; ty.row_bytes(k as u64).unwrap() as usize];
                quantize(ty, &w, &mut row).unwrap();
                let mut x = crate::kernels::test_data(k, 9 + k as u64);
                x[k / 2] = 7.5; // an outlier block
                let mut a = SplitAct::default();
                a.quantize(&x);
                let (h, l) = (a.hi.row(), a.lo.row());
                let got = split_dot(ty).unwrap()(&row, &h, &l);
                assert_eq!(
                    got.to_bits(),
                    (one(&row, &h) + one(&row, &l)).to_bits(),
                    "{ty} k={k}"
                );
                let mut wf = vec![0f32; k];
                dequantize(ty, &row, &mut wf).unwrap();
                let exact: f64 = wf.iter().zip(&x).map(|(p, q)| *p as f64 * *q as f64).sum();
                let bound: f64 =
                    wf.iter().map(|p| p.abs() as f64).sum::<f64>() * 7.5 / 127.0 / 256.0;
                assert!(
                    (got as f64 - exact).abs() <= bound + 1e-4 * (1.0 + exact.abs()),
                    "{ty} k={k}: {got} vs {exact} (bound {bound})"
                );
            }
        }
    }
}
