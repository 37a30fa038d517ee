//! Q4_K and Q6_K rows against four tokens of Q8_K activations at once, for small batches (a
//! speculative verify step, several sequences decoding together) on AVX2: each weight block is
//! unpacked once and multiplied into four tokens, where four calls of decode's row dot
//! (`qdot_k`) unpack it four times. Per token the operations are decode's, in its order
//! (exact integer sums, then one fma per block and lane, then `hsum8`), so every token gets
//! the bits of `qdot_k::dot_q4_k` / `dot_q6_k` alone (ggml-cpu/arch/x86/quants.c's
//! `ggml_vec_dot_q4_K_q8_K` / `ggml_vec_dot_q6_K_q8_K`).

use super::qdot_k::{scales_mins_k4, Q8KRow, Q4_K_BYTES, Q6_K_BYTES};
use crate::quant::float::f16_at;
use crate::quant::QK_K;

/// Tokens per call.
pub const X4: usize = 4;

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::*;
    use crate::kernels::qdot::hsum8;
    use crate::kernels::qdot_k::avx2::{check, f16x2, load, mins_and_scales};
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_q4_k_x4(row: &[u8], a: [&Q8KRow; X4]) -> [f32; X4] {
        let nb = row.len() / Q4_K_BYTES;
        a.iter().for_each(|x| check(x, nb));
        let m4 = _mm256_set1_epi8(0x0F);
        let mut acc = [_mm256_setzero_ps(); X4];
        let mut acc_m = [_mm_setzero_ps(); X4];
        for i in 0..nb {
            let p = row.as_ptr().add(i * Q4_K_BYTES);
            let (xd, xmin) = f16x2(p);
            let sm = scales_mins_k4(&row[i * Q4_K_BYTES + 4..i * Q4_K_BYTES + 16]);
            // the block's nibbles, low and high halves of each 64, once for all tokens
            let q4: [[__m256i; 2]; 4] = std::array::from_fn(|j| {
                let bits = load(p.add(16 + 32 * j));
                [
                    _mm256_and_si256(bits, m4),
                    _mm256_and_si256(_mm256_srli_epi16::<4>(bits), m4),
                ]
            });
            for (u, x) in a.iter().enumerate() {
                let (d, dmin) = (x.d[i] * xd, -x.d[i] * xmin);
                let (_, prod) = mins_and_scales(&sm, x.bsums.as_ptr().add(16 * i));
                acc_m[u] = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(prod), acc_m[u]);
                let q8 = x.qs.as_ptr().add(QK_K * i) as *const u8;
                let mut sumi = _mm256_setzero_si256();
                for (j, q4) in q4.iter().enumerate() {
                    let scale_l = _mm256_set1_epi16(sm[2 * j] as i16);
                    let scale_h = _mm256_set1_epi16(sm[2 * j + 1] as i16);
                    let p16l = _mm256_madd_epi16(
                        scale_l,
                        _mm256_maddubs_epi16(q4[0], load(q8.add(64 * j))),
                    );
                    let p16h = _mm256_madd_epi16(
                        scale_h,
                        _mm256_maddubs_epi16(q4[1], load(q8.add(64 * j + 32))),
                    );
                    sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p16l, p16h));
                }
                acc[u] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc[u]);
            }
        }
        std::array::from_fn(|u| {
            let mut m = acc_m[u];
            m = _mm_add_ps(m, _mm_movehl_ps(m, m));
            m = _mm_add_ss(m, _mm_movehdup_ps(m));
            hsum8(acc[u]) + _mm_cvtss_f32(m)
        })
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_q6_k_x4(row: &[u8], a: [&Q8KRow; X4]) -> [f32; X4] {
        let nb = row.len() / Q6_K_BYTES;
        a.iter().for_each(|x| check(x, nb));
        let (m4, m2, m32s) = (
            _mm256_set1_epi8(0x0F),
            _mm256_set1_epi8(3),
            _mm256_set1_epi8(32),
        );
        let mut acc = [_mm256_setzero_ps(); X4];
        for i in 0..nb {
            let p = row.as_ptr().add(i * Q6_K_BYTES);
            let dw = f16_at(&row[i * Q6_K_BYTES..], 208);
            let scales = _mm_loadu_si128(p.add(192) as *const __m128i);
            let mut sumi = [_mm256_setzero_si256(); X4];
            for j in 0..2 {
                let bits1 = load(p.add(64 * j));
                let bits2 = load(p.add(64 * j + 32));
                let hb = load(p.add(128 + 32 * j));
                let high = |s: i32| {
                    let h = _mm256_srl_epi16(hb, _mm_cvtsi32_si128(s));
                    _mm256_slli_epi16::<4>(_mm256_and_si256(h, m2))
                };
                let q6 = [
                    _mm256_or_si256(_mm256_and_si256(bits1, m4), high(0)),
                    _mm256_or_si256(_mm256_and_si256(bits2, m4), high(2)),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(bits1), m4), high(4)),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(bits2), m4), high(6)),
                ];
                let scale: [__m256i; 4] = std::array::from_fn(|k| {
                    let is = (4 * j + k) as i64;
                    let ctl = _mm_set_epi64x(
                        0x0101010101010101 * (2 * is + 1),
                        0x0101010101010101 * (2 * is),
                    );
                    _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, ctl))
                });
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

/// Four tokens' dots of one weight row, where this CPU has a kernel for its type.
pub type DotX4 = fn(&[u8], [&Q8KRow; X4]) -> [f32; X4];

/// A Q4_K row against four tokens (the fast k-quant kernels must be available).
pub fn dot_q4_k_x4(row: &[u8], a: [&Q8KRow; X4]) -> [f32; X4] {
    assert!(super::qdot_k::has_fast_k_quants(), "dot_q4_k_x4 needs AVX2");
    // SAFETY: the features were checked above; lengths are checked inside.
    #[cfg(target_arch = "x86_64")]
    return unsafe { avx2::dot_q4_k_x4(row, a) };
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!("{row:?} {}", a.len())
}

/// A Q6_K row against four tokens (the fast k-quant kernels must be available).
pub fn dot_q6_k_x4(row: &[u8], a: [&Q8KRow; X4]) -> [f32; X4] {
    assert!(super::qdot_k::has_fast_k_quants(), "dot_q6_k_x4 needs AVX2");
    // SAFETY: the features were checked above; lengths are checked inside.
    #[cfg(target_arch = "x86_64")]
    return unsafe { avx2::dot_q6_k_x4(row, a) };
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!("{row:?} {}", a.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::qdot_k::{dot_q4_k, dot_q6_k, has_fast_k_quants, Q8KAct};
    use crate::quant::GgmlType;

    /// Each of the four tokens gets exactly decode's single-token result.
    #[test]
    fn four_tokens_get_the_bits_of_four_row_dots() {
        if !has_fast_k_quants() {
            eprintln!("no AVX2 here: the four-token kernels are not used");
            return;
        }
        let k = 768;
        let x = crate::kernels::test_data(X4 * k, 9);
        let mut q = Q8KAct::default();
        q.quantize(&x);
        let nb = k / QK_K;
        let rows: Vec<Q8KRow> = (0..X4).map(|t| q.token(t, nb)).collect();
        let pick = [&rows[0], &rows[1], &rows[2], &rows[3]];
        for (ty, one, four) in [
            (
                GgmlType::Q4_K,
                dot_q4_k as fn(&[u8], &Q8KRow) -> f32,
                dot_q4_k_x4 as DotX4,
            ),
            (GgmlType::Q6_K, dot_q6_k, dot_q6_k_x4),
        ] {
            let w = crate::kernels::test_matrix(ty, 3, k, 11);
            let rb = w.len() / 3;
            for r in 0..3 {
                let row = &w[r * rb..(r + 1) * rb];
                let got = four(row, pick);
                for (u, g) in got.iter().enumerate() {
                    assert_eq!(
                        g.to_bits(),
                        one(row, pick[u]).to_bits(),
                        "{ty} row {r} token {u}"
                    );
                }
            }
        }
    }
}
