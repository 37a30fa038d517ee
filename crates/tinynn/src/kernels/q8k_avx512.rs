//! Q8_K quantization of activations (ggml's `quantize_row_q8_K_ref`, as `Q8KAct::quantize`)
//! on AVX-512, with the scalar loop's bits: the block's value of largest magnitude (the first
//! such, as the loop keeps it), iscale = -127 / max in f32, each q = min(127, round half to
//! even of iscale x) and the 16-element sums. It runs before every k-quant product, on one
//! thread while the other waits: the scalar loop took 1.2% of a decode step and 3.5% of a
//! 4-token verify pass on the 1.5B Coder.

use crate::quant::QK_K;
use std::arch::x86_64::*;

/// Whether this CPU has the instructions (and `TOY_FORCE_SCALAR` is unset).
pub fn available() -> bool {
    static OK: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OK.get_or_init(|| {
        super::dot::simd_level() == super::dot::SimdLevel::Avx512
            && is_x86_feature_detected!("avx512bw")
    })
}

/// One block of 256: its quants into `qs`, its 16 sums into `bsums`; returns d (0 for a
/// block of zeros, whose quants and sums are zero).
///
/// # Safety
/// [`available`] must hold; `x` and `qs` hold 256 elements, `bsums` 16.
#[target_feature(enable = "avx512f,avx512bw")]
pub unsafe fn block(x: &[f32], qs: &mut [i8], bsums: &mut [i16]) -> f32 {
    debug_assert!(x.len() >= QK_K && qs.len() >= QK_K && bsums.len() >= QK_K / 16);
    let p = x.as_ptr();
    let (mut m, mut nan) = (_mm512_setzero_ps(), 0u16);
    for i in 0..16 {
        let v = _mm512_loadu_ps(p.add(16 * i));
        nan |= _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v, v);
        m = _mm512_max_ps(m, _mm512_abs_ps(v));
    }
    let amax = _mm512_reduce_max_ps(m);
    if nan != 0 || !(amax.is_finite() && amax > 0.0) {
        return scalar(x, qs, bsums);
    }
    // the first element of that magnitude, with its sign
    let target = _mm512_set1_ps(amax);
    let mut max = 0f32;
    for i in 0..16 {
        let v = _mm512_abs_ps(_mm512_loadu_ps(p.add(16 * i)));
        let hit = _mm512_cmpeq_ps_mask(v, target);
        if hit != 0 {
            max = *p.add(16 * i + hit.trailing_zeros() as usize);
            break;
        }
    }
    let iscale = -127.0 / max;
    let s = _mm512_set1_ps(iscale);
    let top = _mm512_set1_epi32(127);
    for (i, sum) in bsums[..QK_K / 16].iter_mut().enumerate() {
        let v = _mm512_mul_ps(s, _mm512_loadu_ps(p.add(16 * i)));
        let r = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(v);
        let q = _mm512_min_epi32(_mm512_cvtps_epi32(r), top);
        _mm_storeu_si128(
            qs.as_mut_ptr().add(16 * i) as *mut __m128i,
            _mm512_cvtepi32_epi8(q),
        );
        *sum = _mm512_reduce_add_epi32(q) as i16;
    }
    1.0 / iscale
}

/// The scalar loop, for blocks of zeros or with a NaN or an infinity.
fn scalar(x: &[f32], qs: &mut [i8], bsums: &mut [i16]) -> f32 {
    let (mut max, mut amax) = (0f32, 0f32);
    for &v in &x[..QK_K] {
        if v.abs() > amax {
            (amax, max) = (v.abs(), v);
        }
    }
    if amax == 0.0 {
        // as `Q8KAct::quantize`: zero quants and sums
        qs[..QK_K].fill(0);
        bsums[..QK_K / 16].fill(0);
        return 0.0;
    }
    let iscale = -127.0 / max;
    for (q, &v) in qs[..QK_K].iter_mut().zip(x) {
        *q = ((iscale * v + 12582912.0) - 12582912.0).min(127.0) as i8;
    }
    for (s, g) in bsums.iter_mut().zip(qs[..QK_K].chunks_exact(16)) {
        *s = g.iter().map(|&q| q as i16).sum();
    }
    1.0 / iscale
}

#[cfg(test)]
mod tests {
    use crate::kernels::qdot_k::Q8KAct;

    /// Bit for bit the scalar loop's result, on ordinary blocks and on the edge cases: a
    /// block of zeros, +a and -a both present (the first wins), values that round to a
    /// half, a NaN and an infinity.
    #[test]
    fn the_vector_quantizer_gives_the_scalar_loops_bits() {
        if !super::available() {
            eprintln!("no AVX-512 here: Q8_K quantization stays scalar");
            return;
        }
        let mut x = crate::kernels::test_data(12 * 256, 9);
        x[256..512].fill(0.0);
        x[512 + 3] = -7.5;
        x[512 + 200] = 7.5;
        x[768 + 10] = 4.0;
        for (i, v) in x[1024..1280].iter_mut().enumerate() {
            // max -127, so iscale is 1 and every other iscale * v is a half: ties to even
            *v = if i == 0 {
                -127.0
            } else {
                (i % 254) as f32 - 126.5
            };
        }
        x[1280 + 17] = f32::NAN;
        x[1536 + 40] = f32::INFINITY;
        x[1792..2048].iter_mut().for_each(|v| *v *= 1e-30);
        let (mut a, mut b) = (Q8KAct::default(), Q8KAct::default());
        a.quantize(&x);
        b.quantize_scalar(&x);
        let bits = |d: &[f32]| d.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&a.d), bits(&b.d));
        assert_eq!(a.qs, b.qs);
        // ggml leaves a zero block's sums unset; both write zeros
        assert_eq!(a.bsums, b.bsums);
    }
}
