//! Activations and softmax: SiLU-gated linear unit (Shazeer 2020, "GLU Variants"), GELU with
//! ggml's tanh approximation (Hendrycks & Gimpel 2016), softmax and log-softmax.

/// `gate = silu(gate) * up`, elementwise.
pub fn swiglu(gate: &mut [f32], up: &[f32]) {
    for (g, u) in gate.iter_mut().zip(up) {
        *g = *g / (1.0 + (-*g).exp()) * u;
    }
}

/// GELU, tanh approximation as in ggml and GPT-2.
pub fn gelu(x: &mut [f32]) {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    for v in x.iter_mut() {
        let u = *v;
        *v = 0.5 * u * (1.0 + (SQRT_2_OVER_PI * u * (1.0 + 0.044715 * u * u)).tanh());
    }
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
    fn activations_known_values() {
        let mut g = [0.0f32, 1.0];
        swiglu(&mut g, &[3.0, 2.0]);
        assert_eq!(g[0], 0.0);
        assert!((g[1] - 2.0 * 0.731_058_6).abs() < 1e-6);
        let mut x = [0.0f32, 1.0, -1.0];
        gelu(&mut x);
        assert!(x[0] == 0.0 && (x[1] - 0.841_192).abs() < 1e-5 && (x[2] + 0.158_808).abs() < 1e-5);
        let mut s = [1.0f32, 1.0, 1.0, 1.0];
        softmax(&mut s);
        assert!(s.iter().all(|v| (v - 0.25).abs() < 1e-7));
        assert!((log_sum_exp(&[0.0, 0.0]) - 2f64.ln()).abs() < 1e-12);
    }
}
