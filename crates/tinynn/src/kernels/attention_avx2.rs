//! `attention::online_portable` in AVX2 registers, for CPUs without AVX-512: the query and
//! the accumulator of one head stay in 8-lane registers (D a multiple of 8, at most 128), each
//! cached f16 row is widened with F16C, scores and value updates are FMAs. With `ROUND` the
//! accumulator is rounded to f16 after every update, as ggml's one-chunk kernel does over an
//! f16 cache (see `attention`). Same recurrence as the portable kernel, so it is tested
//! against it and against a plain softmax.

use half::f16;
use std::arch::x86_64::*;

/// Most 8-lane vectors of a head (D = 128).
const MAX_V: usize = 16;

/// 8 cached f16 values at `p`, widened.
#[inline(always)]
unsafe fn load8(p: *const f16) -> __m256 {
    _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i))
}

#[inline(always)]
unsafe fn hsum(v: __m256) -> f32 {
    let h = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)))
}

#[inline(always)]
unsafe fn r16<const ROUND: bool>(x: __m256) -> __m256 {
    if ROUND {
        _mm256_cvtph_ps(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(x))
    } else {
        x
    }
}

/// Whether this CPU and head size take `online_avx2`.
pub fn supports(d: usize) -> bool {
    d.is_multiple_of(8)
        && d / 8 <= MAX_V
        && super::dot::simd_level() == super::dot::SimdLevel::Avx2
        && is_x86_feature_detected!("f16c")
}

/// One query `q` (D) over the n cached rows of `k` and `v` (n, D) -> `o` (D).
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C (`supports`); D = `o.len()` must be a multiple of 8
/// and at most 128.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn online_avx2<const ROUND: bool>(
    q: &[f32],
    k: &[f16],
    v: &[f16],
    scale: f32,
    o: &mut [f32],
) {
    let d = o.len();
    let nv = d / 8;
    let n = k.len() / d;
    assert!(q.len() >= d && v.len() >= n * d && nv <= MAX_V && d.is_multiple_of(8));
    let mut qv = [_mm256_setzero_ps(); MAX_V];
    let mut acc = [_mm256_setzero_ps(); MAX_V];
    for i in 0..nv {
        qv[i] = _mm256_loadu_ps(q.as_ptr().add(8 * i));
    }
    let (mut m, mut sum) = (f32::NEG_INFINITY, 0f32);
    for p in 0..n {
        let (kp, vp) = (k.as_ptr().add(p * d), v.as_ptr().add(p * d));
        // two chains over the head's vectors, then one horizontal sum
        let (mut s0, mut s1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        for i in (0..nv).step_by(2) {
            s0 = _mm256_fmadd_ps(qv[i], load8(kp.add(8 * i)), s0);
            if i + 1 < nv {
                s1 = _mm256_fmadd_ps(qv[i + 1], load8(kp.add(8 * i + 8)), s1);
            }
        }
        let sc = hsum(_mm256_add_ps(s0, s1)) * scale;
        let (mut ms, mut vs) = (1f32, 1f32);
        if sc > m {
            ms = (m - sc).exp();
            m = sc;
            let msv = _mm256_set1_ps(ms);
            for a in acc.iter_mut().take(nv) {
                *a = r16::<ROUND>(_mm256_mul_ps(*a, msv));
            }
        } else {
            vs = (sc - m).exp();
        }
        let vsv = _mm256_set1_ps(vs);
        for i in 0..nv {
            acc[i] = r16::<ROUND>(_mm256_fmadd_ps(load8(vp.add(8 * i)), vsv, acc[i]));
        }
        sum = sum.mul_add(ms, vs);
    }
    let inv = _mm256_set1_ps(1.0 / sum);
    for i in 0..nv {
        _mm256_storeu_ps(o.as_mut_ptr().add(8 * i), _mm256_mul_ps(acc[i], inv));
    }
}
