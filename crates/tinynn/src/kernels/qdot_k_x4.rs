//! Q4_K and Q6_K rows against several tokens of Q8_K activations at once (eight, or four), for
//! small batches (a speculative verify step, several sequences decoding together) on AVX2: each
//! 32 weights are unpacked once and multiplied into every token's integer sum, where one call
//! of decode's row dot (`qdot_k`) per token unpacks them again each time. Per token the
//! operations are decode's, in its order (exact integer sums, then one fma per block and lane,
//! then `hsum8`), with the unpacking and the sums' ends shared with `qdot_k`, so every token gets
//! the bits of `qdot_k::dot_q4_k` / `dot_q6_k` alone (ggml-cpu/arch/x86/quants.c's
//! `ggml_vec_dot_q4_K_q8_K` / `ggml_vec_dot_q6_K_q8_K`).

use super::qdot_k::{scales_mins_k4, Q8KRow, Q4_K_BYTES, Q6_K_BYTES};
use crate::quant::float::f16_at;
use crate::quant::GgmlType;
use crate::quant::QK_K;
use std::ops::Range;

/// Tokens of the smaller group.
const X4: usize = 4;

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::*;
    use crate::kernels::qdot::hsum8;
    use crate::kernels::qdot_k::avx2::{
        check, f16x2, load, mins_and_scales, q4_k_nibbles, q4_k_total, q6_k_scale, q6_k_values,
    };
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_q4_k_n<const N: usize>(row: &[u8], a: [&Q8KRow; N]) -> [f32; N] {
        let nb = row.len() / Q4_K_BYTES;
        a.iter().for_each(|x| check(x, nb));
        let (d8, bs, qs): ([*const f32; N], [*const i16; N], [*const u8; N]) = (
            a.map(|x| x.d.as_ptr()),
            a.map(|x| x.bsums.as_ptr()),
            a.map(|x| x.qs.as_ptr() as *const u8),
        );
        let mut acc = [_mm256_setzero_ps(); N];
        let mut acc_m = [_mm_setzero_ps(); N];
        for i in 0..nb {
            let p = row.as_ptr().add(i * Q4_K_BYTES);
            let (xd, xmin) = f16x2(p);
            let sm = scales_mins_k4(&row[i * Q4_K_BYTES + 4..i * Q4_K_BYTES + 16]);
            // each 64 of the block unpacked once, then into every token's integer sum
            let mut sumi = [_mm256_setzero_si256(); N];
            for j in 0..4 {
                let scale_l = _mm256_set1_epi16(sm[2 * j] as i16);
                let scale_h = _mm256_set1_epi16(sm[2 * j + 1] as i16);
                let [q4l, q4h] = q4_k_nibbles(p, j);
                for u in 0..N {
                    let q8 = qs[u].add(QK_K * i + 64 * j);
                    let p16l = _mm256_madd_epi16(scale_l, _mm256_maddubs_epi16(q4l, load(q8)));
                    let p16h =
                        _mm256_madd_epi16(scale_h, _mm256_maddubs_epi16(q4h, load(q8.add(32))));
                    sumi[u] = _mm256_add_epi32(sumi[u], _mm256_add_epi32(p16l, p16h));
                }
            }
            for u in 0..N {
                let xdi = *d8[u].add(i);
                let (d, dmin) = (xdi * xd, -xdi * xmin);
                let (_, prod) = mins_and_scales(&sm, bs[u].add(16 * i));
                acc_m[u] = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(prod), acc_m[u]);
                acc[u] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi[u]), acc[u]);
            }
        }
        std::array::from_fn(|u| q4_k_total(acc[u], acc_m[u]))
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_q6_k_n<const N: usize>(row: &[u8], a: [&Q8KRow; N]) -> [f32; N] {
        let nb = row.len() / Q6_K_BYTES;
        a.iter().for_each(|x| check(x, nb));
        let m32s = _mm256_set1_epi8(32);
        let mut acc = [_mm256_setzero_ps(); N];
        for i in 0..nb {
            let p = row.as_ptr().add(i * Q6_K_BYTES);
            let dw = f16_at(&row[i * Q6_K_BYTES..], 208);
            let scales = _mm_loadu_si128(p.add(192) as *const __m128i);
            let mut sumi = [_mm256_setzero_si256(); N];
            for j in 0..2 {
                let q6 = q6_k_values(p, j);
                let scale: [__m256i; 4] = std::array::from_fn(|k| q6_k_scale(scales, 4 * j + k));
                for (u, x) in a.iter().enumerate() {
                    let q8 = x.qs.as_ptr().add(QK_K * i) as *const u8;
                    let p16: [__m256i; 4] = std::array::from_fn(|k| {
                        let xv = load(q8.add(128 * j + 32 * k));
                        let prod = _mm256_sub_epi16(
                            _mm256_maddubs_epi16(q6[k], xv),
                            _mm256_maddubs_epi16(m32s, xv),
                        );
                        _mm256_madd_epi16(scale[k], prod)
                    });
                    let s = _mm256_add_epi32(sumi[u], _mm256_add_epi32(p16[0], p16[1]));
                    sumi[u] = _mm256_add_epi32(s, _mm256_add_epi32(p16[2], p16[3]));
                }
            }
            for (u, x) in a.iter().enumerate() {
                let d = x.d[i] * dw;
                acc[u] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi[u]), acc[u]);
            }
        }
        std::array::from_fn(|u| hsum8(acc[u]))
    }
}

/// A k-quant row against one token of Q8_K activations (decode's row dot).
pub type DotOne = fn(&[u8], &Q8KRow) -> f32;

/// One weight row against every token of `a` into `out`: groups of eight and of four (a last
/// three padded to four, the pad unwritten) on the many-token kernels, any rest on `one`.
pub type DotMany = fn(&[u8], &[Q8KRow], &mut [f32]);

#[cfg(target_arch = "x86_64")]
macro_rules! many {
    ($name:ident, $n:ident, $one:path) => {
        /// See [`DotMany`] (the fast k-quant kernels must be available).
        pub fn $name(row: &[u8], a: &[Q8KRow], out: &mut [f32]) {
            assert!(
                super::qdot_k::has_fast_k_quants(),
                "many-token k-quant dots need AVX2"
            );
            assert!(out.len() >= a.len(), "one output per token");
            let mut j = 0;
            while j < a.len() {
                let g = &a[j..];
                // SAFETY: the features were checked above; lengths are checked inside.
                unsafe {
                    if g.len() >= 8 {
                        let y = avx2::$n::<8>(row, std::array::from_fn(|u| &g[u]));
                        out[j..j + 8].copy_from_slice(&y);
                        j += 8;
                    } else if g.len() >= X4 - 1 {
                        let y = avx2::$n::<4>(row, std::array::from_fn(|u| &g[u.min(g.len() - 1)]));
                        let live = g.len().min(X4);
                        out[j..j + live].copy_from_slice(&y[..live]);
                        j += live;
                    } else {
                        out[j] = $one(row, &g[0]);
                        j += 1;
                    }
                }
            }
        }
    };
}

#[cfg(target_arch = "x86_64")]
many!(dot_q4_k_many, dot_q4_k_n, super::qdot_k::dot_q4_k);
#[cfg(target_arch = "x86_64")]
many!(dot_q6_k_many, dot_q6_k_n, super::qdot_k::dot_q6_k);

/// Tokens per block of [`q8k_rows`]: their Q8_K rows (K bytes each) stay in L2 while a task's
/// weight rows stay in L1.
const Q8K_TOKENS: usize = 32;

/// Weight rows `rows` (`row(r)` their bytes) against every token's Q8_K blocks `toks`, each
/// on decode's row dot `f` or the many-token `fm`, so a token's result does not depend on the
/// batch: `put(token, row, y)`.
pub(super) fn q8k_rows<'a>(
    row: impl Fn(usize) -> &'a [u8],
    rows: Range<usize>,
    toks: &[Q8KRow],
    (f, fm): (DotOne, Option<DotMany>),
    mut put: impl FnMut(usize, usize, f32),
) {
    let mut ys = [0f32; Q8K_TOKENS];
    for (c, block) in toks.chunks(Q8K_TOKENS).enumerate() {
        let j0 = c * Q8K_TOKENS;
        for r in rows.clone() {
            let w = row(r);
            match fm {
                // several tokens a call: each weight block is unpacked once for them
                Some(fm) => fm(w, block, &mut ys),
                None => ys.iter_mut().zip(block).for_each(|(y, tok)| *y = f(w, tok)),
            }
            for (u, y) in ys[..block.len()].iter().enumerate() {
                put(j0 + u, r, *y);
            }
        }
    }
}

/// The many-token kernel of a k-quant type, where this CPU has one.
pub(super) fn many_k(ty: GgmlType) -> Option<DotMany> {
    #[cfg(target_arch = "x86_64")]
    if super::qdot_k::has_fast_k_quants() {
        return match ty {
            GgmlType::Q4_K => Some(dot_q4_k_many),
            GgmlType::Q6_K => Some(dot_q6_k_many),
            _ => None,
        };
    }
    let _ = ty;
    None
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;
    use crate::kernels::qdot_k::{dot_q4_k, dot_q6_k, has_fast_k_quants, Q8KAct};
    use crate::quant::GgmlType;

    /// Every token of a batch of 1 to 13 (groups of eight, four, three padded, ones left
    /// alone) gets exactly decode's single-token result.
    #[test]
    fn many_tokens_get_the_bits_of_one_row_dot_each() {
        if !has_fast_k_quants() {
            eprintln!("no AVX2 here: the many-token kernels are not used");
            return;
        }
        let (k, tmax) = (768, 13);
        let x = crate::kernels::test_data(tmax * k, 9);
        let mut q = Q8KAct::default();
        q.quantize(&x);
        let nb = k / QK_K;
        let toks: Vec<Q8KRow> = (0..tmax).map(|t| q.token(t, nb)).collect();
        type One = fn(&[u8], &Q8KRow) -> f32;
        for (ty, one, many) in [
            (GgmlType::Q4_K, dot_q4_k as One, dot_q4_k_many as DotMany),
            (GgmlType::Q6_K, dot_q6_k, dot_q6_k_many),
        ] {
            let w = crate::kernels::test_matrix(ty, 3, k, 11);
            let rb = w.len() / 3;
            for r in 0..3 {
                let row = &w[r * rb..(r + 1) * rb];
                for t in 1..=tmax {
                    let mut out = vec![f32::NAN; t];
                    many(row, &toks[..t], &mut out);
                    for (u, g) in out.iter().enumerate() {
                        let want = one(row, &toks[u]);
                        assert_eq!(
                            g.to_bits(),
                            want.to_bits(),
                            "{ty} row {r}, {t} tokens, token {u}"
                        );
                    }
                }
            }
        }
    }
}
