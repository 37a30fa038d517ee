//! The AVX2 kernel of `repack_k`'s 16-row Q4_K/Q5_K layout, for CPUs without AVX-512 VNNI:
//! the layout ggml-cpu's `ggml_gemv_q4_K_8x8_q8_K` / `ggml_gemm_q4_K_8x8_q8_K`
//! (arch/x86/repack.cpp) gets its speed from, rows side by side so that activations are
//! broadcast once for 8 rows and a sub-block's 6-bit scale meets 8 rows' sums in one `madd`.
//!
//! A group's 16 rows are two halves of 8, one per 256-bit vector: each 32-bit lane is a row,
//! and `maddubs` multiplies its 4 nibbles by 4 broadcast Q8_K activations into two i16 pair
//! sums. Q4_K sums a sub-block's 8 such products in i16 (at most 8 * 2 * 15 * 127 = 30480),
//! Q5_K 4 at a time (its values reach 31); `madd` with the scale duplicated in both halves of
//! each lane then gives i32. Integer sums are exact, and the f32 steps per block and row are
//! the VNNI kernel's (`repack_k::vnni::group`), so both CPUs give the same bits.

use super::qdot_k::Q8KAct;
use super::repack_k::{group_block_bytes, KGroups, AVX2_TT as TT, G, MINS, QH, QS, SCALES};
use crate::quant::{GgmlType, QK_K};
use std::arch::x86_64::*;

/// 8 bytes at `p` as i16, each twice: [b0, b0, b1, b1, ..., b7, b7].
#[inline(always)]
unsafe fn dup16(p: *const u8) -> __m256i {
    let b = _mm_loadl_epi64(p as *const __m128i);
    _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(b, b))
}

/// One group of 16 rows against TN tokens from t0. Per block, rows 8h..8h+8 of half h in
/// turn: the second half reads the block's lines from L1, where the first brought them.
///
/// # Safety
/// AVX2, FMA and F16C; `g` a group of `p`, tokens t0..t0+TN held by `act`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn group<const TN: usize, const Q5: bool>(
    p: &KGroups,
    g: usize,
    act: &Q8KAct,
    t0: usize,
    res: &mut [[f32; G]; TT],
) {
    let (nb, gb) = (p.cols / QK_K, group_block_bytes(p.ty));
    // (half, token): f32 lanes, a row each
    let mut acc = [[_mm256_setzero_ps(); TN]; 2];
    for b in 0..nb {
        let base = p.data.as_ptr().add((g * nb + b) * gb);
        if TN == 1 {
            crate::kernels::stream::prefetch_ahead(base, gb);
        }
        for (h, acc) in acc.iter_mut().enumerate() {
            let isum = block_sums::<TN, Q5>(base, h, act, t0 * p.cols + QK_K * b, p.cols);
            let dw = _mm256_cvtph_ps(_mm_loadu_si128(base.add(16 * h) as *const __m128i));
            let mw = _mm256_cvtph_ps(_mm_loadu_si128(base.add(32 + 16 * h) as *const __m128i));
            for (t, a) in acc.iter_mut().enumerate() {
                let tb = (t0 + t) * nb + b;
                let msum = min_sums(base, h, &act.bsums[16 * tb..16 * tb + 16]);
                let xd = _mm256_set1_ps(act.d[tb]);
                *a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_mul_ps(dw, xd), *a);
                *a = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_mul_ps(mw, xd), *a);
            }
        }
    }
    store_halves(&acc, res)
}

/// A group's results from its two halves' accumulators (half, token): rows 8h..8h+8 of
/// token t in res[t].
#[inline(always)]
pub(super) unsafe fn store_halves<const TN: usize>(
    acc: &[[__m256; TN]; 2],
    res: &mut [[f32; G]; TT],
) {
    for (h, acc) in acc.iter().enumerate() {
        for (t, a) in acc.iter().enumerate() {
            _mm256_storeu_ps(res[t].as_mut_ptr().add(8 * h), *a);
        }
    }
}

/// Each token's scaled quant sums of one block for 8 rows (i32 lanes): sum over sub-blocks
/// s of scale_s * sum(q * x). `x0` is token t0's first activation of the block, `ld` a
/// token's stride.
#[inline(always)]
unsafe fn block_sums<const TN: usize, const Q5: bool>(
    base: *const u8,
    h: usize,
    act: &Q8KAct,
    x0: usize,
    ld: usize,
) -> [__m256i; TN] {
    let low = _mm256_set1_epi8(0x0F);
    let one = _mm256_set1_epi8(1);
    // products summed in i16 before a scale: all 8 of a run for Q4_K, 4 for Q5_K
    let flush = if Q5 { 4 } else { 8 };
    let x = act.qs.as_ptr().add(x0);
    let mut isum = [_mm256_setzero_si256(); TN];
    for j in 0..4 {
        let sl = dup16(base.add(SCALES + G * 2 * j + 8 * h));
        let sh = dup16(base.add(SCALES + G * (2 * j + 1) + 8 * h));
        let mut al = [_mm256_setzero_si256(); TN];
        let mut ah = [_mm256_setzero_si256(); TN];
        for c in 0..8 {
            let v = _mm256_loadu_si256(base.add(QS + (8 * j + c) * 64 + 32 * h) as *const _);
            let mut lo = _mm256_and_si256(v, low);
            let mut hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), low);
            if Q5 {
                // bits 2j, 2j+1 of each fifth-bit byte, moved to bit 4
                let q = _mm256_loadu_si256(base.add(QH + c * 64 + 32 * h) as *const _);
                let q = _mm256_srl_epi16(q, _mm_cvtsi32_si128(2 * j as i32));
                let hl = _mm256_slli_epi16::<4>(_mm256_and_si256(q, one));
                let hh = _mm256_slli_epi16::<4>(_mm256_and_si256(_mm256_srli_epi16::<1>(q), one));
                lo = _mm256_or_si256(lo, hl);
                hi = _mm256_or_si256(hi, hh);
            }
            for t in 0..TN {
                let xt = x.add(t * ld + 64 * j + 4 * c) as *const i32;
                let xl = _mm256_set1_epi32(std::ptr::read_unaligned(xt));
                let xh = _mm256_set1_epi32(std::ptr::read_unaligned(xt.add(8)));
                al[t] = _mm256_add_epi16(al[t], _mm256_maddubs_epi16(lo, xl));
                ah[t] = _mm256_add_epi16(ah[t], _mm256_maddubs_epi16(hi, xh));
            }
            if (c + 1) % flush == 0 {
                for t in 0..TN {
                    let s = _mm256_add_epi32(
                        _mm256_madd_epi16(al[t], sl),
                        _mm256_madd_epi16(ah[t], sh),
                    );
                    isum[t] = _mm256_add_epi32(isum[t], s);
                    al[t] = _mm256_setzero_si256();
                    ah[t] = _mm256_setzero_si256();
                }
            }
        }
    }
    isum
}

/// One token's min sums of one block for 8 rows: sum over sub-blocks s of min_s times the sum
/// of the sub-block's 32 activations, as i32 lanes (two sub-blocks per `madd`).
#[inline(always)]
unsafe fn min_sums(base: *const u8, h: usize, bsums: &[i16]) -> __m256i {
    let mut msum = _mm256_setzero_si256();
    for s in (0..8).step_by(2) {
        let m0 = _mm_loadl_epi64(base.add(MINS + G * s + 8 * h) as *const __m128i);
        let m1 = _mm_loadl_epi64(base.add(MINS + G * (s + 1) + 8 * h) as *const __m128i);
        let m = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m0, m1));
        let pair = |s: usize| (bsums[2 * s] as i32 + bsums[2 * s + 1] as i32) as u16 as i32;
        let x = _mm256_set1_epi32(pair(s) | (pair(s + 1) << 16));
        msum = _mm256_add_epi32(msum, _mm256_madd_epi16(m, x));
    }
    msum
}

/// Whether this CPU runs the kernel (the k-quant row dots' features).
pub(super) fn available(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::Q4_K | GgmlType::Q5_K) && super::qdot_k::has_fast_k_quants()
}
