//! Decode's row dots of the legacy types against both activation planes (`act_split`) in one
//! pass over the weight row: each block's weights are loaded and unpacked once, multiplied by
//! the coarse and the fine plane, and the two meet in the integers (`(Σw·hi << 7) + Σw·lo`,
//! as the VNNI kernels of `repack_vnni`), so a block costs one conversion and one FMA. Several tokens share each unpacked block (tiles of four: a short batch takes these
//! row dots on CPUs without VNNI, to keep decode's bits). Q5_0 and Q5_1 take their one-plane
//! kernels twice.

use super::qdot::{dot_q4_0, dot_q4_1, dot_q8_0, has_fast_q4_1, Q8_1Row};
use super::qdot_q5::{dot_q5_0, dot_q5_1};
use crate::quant::GgmlType;

/// A weight row against the two planes of each of T tokens (`h[j]`, `l[j]`) -> `out[j]`.
pub type SplitDots = fn(&[u8], &[Q8_1Row], &[Q8_1Row], &mut [f32]);

/// The two-plane row dot for weights of type `ty` (the legacy types), for one token or several.
pub fn split_dots(ty: GgmlType) -> Option<SplitDots> {
    use GgmlType::*;
    Some(match ty {
        Q4_0 => many::<Q40>,
        Q4_1 => many::<Q41>,
        Q8_0 => many::<Q80>,
        Q5_0 => |r, h, l, out| {
            for ((o, h), l) in out.iter_mut().zip(h).zip(l) {
                *o = dot_q5_0(r, h) + dot_q5_0(r, l);
            }
        },
        Q5_1 => |r, h, l, out| {
            for ((o, h), l) in out.iter_mut().zip(h).zip(l) {
                *o = dot_q5_1(r, h) + dot_q5_1(r, l);
            }
        },
        _ => return None,
    })
}

/// A weight row against one token's coarse plane alone (ggml's one 8-bit plane).
pub type CoarseDot = fn(&[u8], &Q8_1Row) -> f32;

/// The one-plane row dot for weights of type `ty` (the legacy types): half the integer work
/// of [`split_dots`], for a draft model's proposals, whose rounding only moves how many the
/// target keeps, never what it outputs.
pub fn coarse_dot(ty: GgmlType) -> Option<CoarseDot> {
    use GgmlType::*;
    Some(match ty {
        Q4_0 => dot_q4_0,
        Q4_1 => dot_q4_1,
        Q8_0 => dot_q8_0,
        Q5_0 => dot_q5_0,
        Q5_1 => dot_q5_1,
        _ => return None,
    })
}

const Q40: u8 = 0;
const Q41: u8 = 1;
const Q80: u8 = 2;

/// Each token's `one(row, h) + one(row, l)`, for the kernels of `qdot` with AVX2 in tiles of
/// four tokens that load and unpack each weight block once.
fn many<const KIND: u8>(row: &[u8], h: &[Q8_1Row], l: &[Q8_1Row], out: &mut [f32]) {
    assert!(h.len() >= out.len() && l.len() >= out.len());
    #[cfg(target_arch = "x86_64")]
    if has_fast_q4_1() {
        let mut j = 0;
        while j < out.len() {
            // SAFETY: the features were detected on this CPU; lengths are checked inside.
            unsafe {
                if out.len() - j >= 4 {
                    let r = avx2::tile::<4, KIND>(row, &h[j..j + 4], &l[j..j + 4]);
                    out[j..j + 4].copy_from_slice(&r);
                    j += 4;
                } else {
                    out[j] = avx2::tile::<1, KIND>(row, &h[j..j + 1], &l[j..j + 1])[0];
                    j += 1;
                }
            }
        }
        return;
    }
    let one = match KIND {
        Q40 => dot_q4_0,
        Q41 => dot_q4_1,
        _ => dot_q8_0,
    };
    for ((o, h), l) in out.iter_mut().zip(h).zip(l) {
        *o = one(row, h) + one(row, l);
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::super::qdot::{hsum8, Q8_1Row};
    use super::{Q40, Q41};
    use std::arch::x86_64::*;

    fn check(nb: usize, a: &Q8_1Row) {
        assert!(a.qs.len() >= nb * 32 && a.d.len() >= nb && a.s.len() >= nb);
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

    /// The 32 activations of block b of plane `a`.
    #[inline(always)]
    unsafe fn xs(a: &Q8_1Row, b: usize) -> __m256i {
        _mm256_loadu_si256(a.qs.as_ptr().add(b * 32) as *const __m256i)
    }

    /// TN tokens against one row of KIND (Q4_0, Q4_1, Q8_0), each token's sums in the same
    /// order whatever TN: per block, the weights as `maddubs`'s unsigned operand (|w| for the
    /// signed types, with x taking w's sign), both planes' pair sums combined as
    /// `(Σw·hi << 7) + Σw·lo` in 8 lanes of i32 (at most 32·127·127·128 < 2^31), one FMA with
    /// the weight scale times the fine plane's unit, Q4_1's min term in a scalar sum,
    /// `hsum_float_8` at the end.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn tile<const TN: usize, const KIND: u8>(
        row: &[u8],
        h: &[Q8_1Row],
        l: &[Q8_1Row],
    ) -> [f32; TN] {
        let bytes = match KIND {
            Q40 => 18,
            Q41 => 20,
            _ => 34,
        };
        let nb = row.len() / bytes;
        let (h, l): (&[Q8_1Row; TN], &[Q8_1Row; TN]) =
            (h.try_into().unwrap(), l.try_into().unwrap());
        for j in 0..TN {
            check(nb, &h[j]);
            check(nb, &l[j]);
        }
        let (low, off) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(8));
        let mut acc = [_mm256_setzero_ps(); TN];
        let mut msum = [0f32; TN];
        for b in 0..nb {
            let p = row.as_ptr().add(b * bytes);
            let d = half(p);
            let (wa, ws, m) = match KIND {
                Q40 | Q41 => {
                    let at = if KIND == Q41 { 4 } else { 2 };
                    let raw = _mm_loadu_si128(p.add(at) as *const __m128i);
                    // elements 0..15 are the low nibbles, 16..31 the high ones
                    let w = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), low);
                    if KIND == Q41 {
                        (w, w, half(p.add(2)))
                    } else {
                        let w = _mm256_sub_epi8(w, off);
                        (_mm256_sign_epi8(w, w), w, 0.0)
                    }
                }
                _ => {
                    let w = _mm256_loadu_si256(p.add(2) as *const __m256i);
                    (_mm256_sign_epi8(w, w), w, 0.0)
                }
            };
            for j in 0..TN {
                let (mut xh, mut xl) = (xs(&h[j], b), xs(&l[j], b));
                if KIND != Q41 {
                    xh = _mm256_sign_epi8(xh, ws);
                    xl = _mm256_sign_epi8(xl, ws);
                }
                // Σw·(128 hi + lo) in the integers, then one scale: the unit of the fine plane
                let p = _mm256_add_epi32(_mm256_slli_epi32::<7>(us8(wa, xh)), us8(wa, xl));
                // (b < nb: `check` above)
                let unit = *l[j].d.get_unchecked(b);
                acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(d * unit), _mm256_cvtepi32_ps(p), acc[j]);
                if KIND == Q41 {
                    msum[j] += m * (*h[j].s.get_unchecked(b) + *l[j].s.get_unchecked(b));
                }
            }
        }
        std::array::from_fn(|j| hsum8(acc[j]) + msum[j])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::act_split::SplitAct;

    /// Tiles of several tokens give each token the bits it gets alone.
    #[test]
    fn tokens_in_tiles_equal_tokens_alone() {
        use crate::quant::quantize;
        for ty in [
            GgmlType::Q4_0,
            GgmlType::Q4_1,
            GgmlType::Q8_0,
            GgmlType::Q5_0,
            GgmlType::Q5_1,
        ] {
            let k = 576;
            let w = crate::kernels::test_data(k, 3);
            let mut row = vec![0u8; ty.row_bytes(k as u64).unwrap() as usize];
            quantize(ty, &w, &mut row).unwrap();
            for t in [1, 3, 4, 7, 9] {
                let x = crate::kernels::test_data(t * k, 11 + t as u64);
                let mut a = SplitAct::default();
                a.quantize(&x);
                let h: Vec<_> = (0..t).map(|j| a.hi.token(j, k / 32)).collect();
                let l: Vec<_> = (0..t).map(|j| a.lo.token(j, k / 32)).collect();
                let mut all = vec![0f32; t];
                split_dots(ty).unwrap()(&row, &h, &l, &mut all);
                for j in 0..t {
                    let mut one = [0f32];
                    split_dots(ty).unwrap()(&row, &h[j..j + 1], &l[j..j + 1], &mut one);
                    assert_eq!(all[j].to_bits(), one[0].to_bits(), "{ty} t={t} token {j}");
                }
            }
        }
    }

    /// The one-pass kernels give one pass per plane up to f32 rounding, and the two planes
    /// together come within 2^-15 of each block's amax of the unrounded product.
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
                let mut got = [0f32];
                split_dots(ty).unwrap()(&row, &[h], &[l], &mut got);
                let got = got[0];
                let two = one(&row, &h) + one(&row, &l);
                assert!(
                    (got - two).abs() <= 1e-5 * (1.0 + two.abs()),
                    "{ty} k={k}: {got} against one pass per plane {two}"
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
