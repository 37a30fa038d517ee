//! Activations and softmax: SiLU-gated linear unit (Shazeer 2020, "GLU Variants"), GELU with
//! ggml's tanh approximation (Hendrycks & Gimpel 2016), softmax and log-softmax.

/// `gate = silu(gate) * up`, elementwise. On AVX-512 the exponential is the polynomial
/// ggml's `ggml_v_expf` uses (ARM optimized-routines' expf, max error ~1.5 ulp), so SiLU gives
/// llama.cpp's bits; the tail and other CPUs use the C library's expf, as ggml does.
pub fn swiglu(gate: &mut [f32], up: &[f32]) {
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if super::dot::simd_level() == super::dot::SimdLevel::Avx512
        && is_x86_feature_detected!("avx512dq")
    {
        // SAFETY: AVX-512F/DQ were detected.
        done = unsafe { swiglu_avx512(gate, up) };
    }
    for (g, u) in gate[done..].iter_mut().zip(&up[done..]) {
        *g = *g / (1.0 + (-*g).exp()) * u;
    }
}

/// SiLU-gate whole 16-lane chunks; returns how many elements it did.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq,fma")]
unsafe fn swiglu_avx512(gate: &mut [f32], up: &[f32]) -> usize {
    use std::arch::x86_64::*;
    let n = gate.len().min(up.len()) / 16 * 16;
    for i in (0..n).step_by(16) {
        let x = _mm512_loadu_ps(gate.as_ptr().add(i));
        let e = expf16(_mm512_sub_ps(_mm512_setzero_ps(), x));
        let silu = _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0), e));
        _mm512_storeu_ps(
            gate.as_mut_ptr().add(i),
            _mm512_mul_ps(silu, _mm512_loadu_ps(up.as_ptr().add(i))),
        );
    }
    n
}

/// exp of 16 lanes: n = round(x / ln 2), b = x - n ln 2 (in two parts), a degree-5
/// polynomial in b, scaled by 2^n; |n| > 192 saturates to 0 or infinity.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq,fma")]
pub(crate) unsafe fn expf16(x: std::arch::x86_64::__m512) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::*;
    let shift = _mm512_set1_ps(f32::from_bits(0x4B40_0000)); // 1.5 * 2^23
    let z = _mm512_fmadd_ps(x, _mm512_set1_ps(f32::from_bits(0x3FB8_AA3B)), shift); // 1/ln 2
    let n = _mm512_sub_ps(z, shift);
    let ln2_hi = _mm512_set1_ps(f32::from_bits(0x3F31_7200));
    let ln2_lo = _mm512_set1_ps(f32::from_bits(0x35BF_BE8E));
    let b = _mm512_fnmadd_ps(n, ln2_lo, _mm512_fnmadd_ps(n, ln2_hi, x));
    let big = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(_mm512_abs_ps(n), _mm512_set1_ps(192.0));
    let u = _mm512_mul_ps(b, b);
    let c = |bits: u32| _mm512_set1_ps(f32::from_bits(bits));
    let p = _mm512_fmadd_ps(
        _mm512_fmadd_ps(
            _mm512_fmadd_ps(c(0x3C07_2010), b, c(0x3D2B_9F17)),
            u,
            _mm512_fmadd_ps(c(0x3E2A_AF33), b, c(0x3EFF_FEDB)),
        ),
        u,
        _mm512_fmadd_ps(c(0x3F7F_FFF6), b, _mm512_set1_ps(1.0)),
    );
    let res = _mm512_scalef_ps(p, n);
    if big == 0 {
        return res;
    }
    let le0 = _mm512_cmp_ps_mask::<_CMP_LE_OQ>(n, _mm512_setzero_ps());
    let alt = _mm512_mask_blend_ps(le0, _mm512_set1_ps(f32::INFINITY), _mm512_setzero_ps());
    _mm512_mask_blend_ps(big, res, alt)
}

/// GELU, tanh approximation (GPT-2), as ggml's CPU backend computes it (`ggml_vec_gelu_f32`
/// with `GGML_GELU_FP16`): the input rounded to f16 and looked up in a table of f16 results,
/// 0 below -10 and the identity above 10. Following its roundings keeps GPT-2 logits within
/// 1e-4 of llama.cpp's instead of 1e-3. The table (one f16 per f16 input, 128 KiB) is built on
/// first use; rows go to the pool's threads above 64 Ki values.
pub fn gelu(x: &mut [f32]) {
    let table = gelu_table();
    let run = |x: &mut [f32]| {
        for v in x.iter_mut() {
            let u = *v;
            *v = if u <= -10.0 {
                0.0
            } else if u >= 10.0 {
                u
            } else {
                let i = half::f16::from_f32(u).to_bits() as usize;
                half::f16::from_bits(table[i]).to_f32()
            };
        }
    };
    const CHUNK: usize = 1 << 16;
    if x.len() <= CHUNK {
        return run(x);
    }
    use rayon::prelude::*;
    x.par_chunks_mut(CHUNK).for_each(run);
}

/// gelu(h) rounded to f16 for every f16 bit pattern h (ggml's `ggml_table_gelu_f16`).
fn gelu_table() -> &'static [u16] {
    static TABLE: std::sync::OnceLock<Vec<u16>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        (0..=u16::MAX)
            .map(|b| {
                let h = half::f16::from_bits(b).to_f32();
                half::f16::from_f32(gelu_exact(h)).to_bits()
            })
            .collect()
    })
}

/// The tanh approximation in f32, as `ggml_gelu_f32`.
fn gelu_exact(u: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    0.5 * u * (1.0 + (SQRT_2_OVER_PI * u * (1.0 + 0.044715 * u * u)).tanh())
}

/// In-place softmax.
pub fn softmax(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    let inv = 1.0 / sum;
    x.iter_mut().for_each(|v| *v *= inv);
}

/// The largest softmax probability of `x`, 1 / sum(exp(x - max)) (a speculative draft's
/// confidence in its top token, once a drafted token: on a 152k vocabulary most logits lie
/// within reach of the top, so the exps run 16 lanes at a time where the CPU has AVX-512).
pub fn max_prob(x: &[f32]) -> f32 {
    let m = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut done = 0;
    let mut sum = 0f32;
    #[cfg(target_arch = "x86_64")]
    if super::dot::simd_level() == super::dot::SimdLevel::Avx512
        && is_x86_feature_detected!("avx512dq")
    {
        // SAFETY: AVX-512F/DQ were detected.
        (done, sum) = unsafe { exp_sum_avx512(x, m) };
    }
    // the portable path sums in f64: one f32 sum over 152k terms drifts by ~1e-5
    let rest: f64 = x[done..].iter().map(|&v| (v - m).exp() as f64).sum();
    (1.0 / (sum as f64 + rest)) as f32
}

/// sum(exp(x - m)) over whole 16-lane chunks; returns how many elements it took, and the sum.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq,fma")]
unsafe fn exp_sum_avx512(x: &[f32], m: f32) -> (usize, f32) {
    use std::arch::x86_64::*;
    let n = x.len() / 16 * 16;
    let mv = _mm512_set1_ps(m);
    let mut acc = _mm512_setzero_ps();
    for i in (0..n).step_by(16) {
        let v = _mm512_sub_ps(_mm512_loadu_ps(x.as_ptr().add(i)), mv);
        acc = _mm512_add_ps(acc, expf16(v));
    }
    (n, _mm512_reduce_add_ps(acc))
}

/// `log(sum(exp(x)))`, computed stably in f64.
pub fn log_sum_exp(x: &[f32]) -> f64 {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let s: f64 = x.iter().map(|v| (*v as f64 - max).exp()).sum();
    max + s.ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_prob_is_the_softmax_top_probability() {
        for (n, spread) in [(7, 1.0), (1000, 3.0), (152_000, 8.0), (33, 0.0)] {
            let x: Vec<f32> = (0..n)
                .map(|i| ((i * 7919 % 1013) as f32 / 1013.0 - 0.5) * spread)
                .collect();
            let m = x.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
            let want = 1.0 / x.iter().map(|&v| (v as f64 - m).exp()).sum::<f64>();
            let got = max_prob(&x) as f64;
            assert!((got - want).abs() <= 1e-5 * want, "n {n}: {got} vs {want}");
        }
        // one sure logit
        let mut x = vec![0f32; 4096];
        x[100] = 40.0;
        assert!((max_prob(&x) - 1.0).abs() < 1e-6);
    }

    #[test]
    fn activations_known_values() {
        let mut g = [0.0f32, 1.0];
        swiglu(&mut g, &[3.0, 2.0]);
        assert_eq!(g[0], 0.0);
        assert!((g[1] - 2.0 * 0.731_058_6).abs() < 1e-6);
        // the SIMD chunks agree with libm's expf to a few ulp, over the whole useful range
        let mut x: Vec<f32> = (0..4096).map(|i| (i as f32 - 2048.0) / 20.0).collect();
        let want: Vec<f32> = x.iter().map(|v| v / (1.0 + (-v).exp())).collect();
        swiglu(&mut x, &vec![1.0; 4096]);
        for (a, b) in x.iter().zip(&want) {
            assert!(
                (a - b).abs() <= 4.0 * f32::EPSILON * b.abs().max(1e-30),
                "{a} vs {b}"
            );
        }
        let mut x = [0.0f32, 1.0, -1.0, -12.0, 11.5, 0.3];
        gelu(&mut x);
        // ggml's f16 table: gelu(1) = 0.8412 rounds to 0.84130859375 in f16
        assert!(x[0] == 0.0 && x[1] == 0.841_308_6 && (x[2] + 0.158_808).abs() < 1e-4);
        assert_eq!((x[3], x[4]), (0.0, 11.5));
        let h = half::f16::from_f32(0.3).to_f32();
        assert_eq!(x[5], half::f16::from_f32(gelu_exact(h)).to_f32());
        let mut s = [1.0f32, 1.0, 1.0, 1.0];
        softmax(&mut s);
        assert!(s.iter().all(|v| (v - 0.25).abs() < 1e-7));
        assert!((log_sum_exp(&[0.0, 0.0]) - 2f64.ln()).abs() < 1e-12);
    }
}
