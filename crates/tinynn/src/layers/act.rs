//! Activations with their backward passes: SwiGLU (Shazeer 2020, "GLU Variants Improve
//! Transformer"), `silu(gate) * up`, and GELU with the tanh approximation (Hendrycks & Gimpel
//! 2016) as ggml and GPT-2 use it. Both run on a vectorisable exp (`exp_approx`).
//! Shapes: gate/up interleaved per row as gu (N, 2F) = [gate (F) | up (F)], activations (N, F).

use super::{in_serial, multiversion, rows_per_task};
use rayon::prelude::*;

/// exp(x) for x clamped to [-87, 88] (0 below -87): Cody-Waite reduction x = n ln2 + b, a degree-5
/// polynomial for e^b and 2^n put straight into the exponent bits (the coefficients of ARM's
/// optimized-routines expf that ggml's `ggml_v_expf` uses; max error ~1.5 ulp). Branch-free
/// so loops over it vectorise.
#[inline(always)]
pub fn exp_approx(x_in: f32) -> f32 {
    const SHIFT: f32 = 12_582_912.0; // 1.5 * 2^23: adding it rounds to an integer in the low bits
    let x = x_in.clamp(-87.0, 88.0);
    let z = x * f32::from_bits(0x3FB8_AA3B) + SHIFT; // x / ln 2
    let n = z - SHIFT;
    let b = x - n * f32::from_bits(0x3F31_7200) - n * f32::from_bits(0x35BF_BE8E);
    let u = b * b;
    let c = f32::from_bits;
    let p = ((c(0x3C07_2010) * b + c(0x3D2B_9F17)) * u + (c(0x3E2A_AF33) * b + c(0x3EFF_FEDB))) * u
        + (c(0x3F7F_FFF6) * b + 1.0);
    let ni = (z.to_bits() as i32).wrapping_sub(SHIFT.to_bits() as i32);
    let r = p * f32::from_bits(((ni + 127) << 23) as u32);
    // exactly 0 below the range (so masked scores at -inf drop out); NaN stays NaN
    if x_in < -87.0 {
        0.0
    } else {
        r
    }
}

/// The sum of 16 lanes in a fixed tree (the order every 16-lane reduction here adds in).
#[inline(always)]
pub(crate) fn tree16(mut acc: [f32; 16]) -> f32 {
    for i in 0..8 {
        acc[i] += acc[i + 8];
    }
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]))
}

/// Largest element (NEG_INFINITY for none), over 16 independent lanes so that it vectorises.
#[inline(always)]
pub(crate) fn max16(x: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; 16];
    let c = x.chunks_exact(16);
    let mut m = c
        .remainder()
        .iter()
        .fold(f32::NEG_INFINITY, |a, v| a.max(*v));
    for ch in c {
        for i in 0..16 {
            acc[i] = acc[i].max(ch[i]);
        }
    }
    for a in acc {
        m = m.max(a);
    }
    m
}

/// `x = exp(x - m)` in place; returns the sum, over 16 lanes in a fixed order.
#[inline(always)]
pub(crate) fn exp_sum16(x: &mut [f32], m: f32) -> f32 {
    let mut acc = [0f32; 16];
    let mut c = x.chunks_exact_mut(16);
    for ch in &mut c {
        for i in 0..16 {
            let e = exp_approx(ch[i] - m);
            ch[i] = e;
            acc[i] += e;
        }
    }
    let mut s = 0f32;
    for v in c.into_remainder() {
        *v = exp_approx(*v - m);
        s += *v;
    }
    s + tree16(acc)
}

const SQRT_2_OVER_PI: f32 = 0.797_884_6;
const GELU_C: f32 = 0.044_715;

multiversion! {
    fn swiglu_fwd(gu: &[f32], a: &mut [f32], f: usize) {
        for (row, out) in gu.chunks_exact(2 * f).zip(a.chunks_exact_mut(f)) {
            let (g, u) = row.split_at(f);
            for i in 0..f {
                out[i] = g[i] / (1.0 + exp_approx(-g[i])) * u[i];
            }
        }
    }
}

multiversion! {
    fn swiglu_bwd(da: &[f32], gu: &[f32], dgu: &mut [f32], f: usize) {
        for ((row, d), drow) in gu.chunks_exact(2 * f).zip(da.chunks_exact(f)).zip(dgu.chunks_exact_mut(2 * f)) {
            let (g, u) = row.split_at(f);
            let (dg, du) = drow.split_at_mut(f);
            for i in 0..f {
                let s = 1.0 / (1.0 + exp_approx(-g[i]));
                let silu = g[i] * s;
                du[i] = d[i] * silu;
                dg[i] = d[i] * u[i] * s * (1.0 + g[i] * (1.0 - s));
            }
        }
    }
}

/// tanh(v) = 1 - 2 / (e^(2v) + 1), on the vectorisable exp.
#[inline(always)]
fn tanh_approx(v: f32) -> f32 {
    1.0 - 2.0 / (exp_approx(2.0 * v) + 1.0)
}

multiversion! {
    fn gelu_fwd(x: &[f32], y: &mut [f32]) {
        for (o, &v) in y.iter_mut().zip(x) {
            let t = tanh_approx(SQRT_2_OVER_PI * v * (1.0 + GELU_C * v * v));
            *o = 0.5 * v * (1.0 + t);
        }
    }
}

multiversion! {
    fn gelu_bwd(dy: &[f32], x: &[f32], dx: &mut [f32]) {
        for ((d, &g), &v) in dx.iter_mut().zip(dy).zip(x) {
            let t = tanh_approx(SQRT_2_OVER_PI * v * (1.0 + GELU_C * v * v));
            let dinner = SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_C * v * v);
            *d = g * (0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * dinner);
        }
    }
}

/// `a (N, F) = silu(gate) * up` from gu (N, 2F).
pub fn swiglu_forward(gu: &[f32], a: &mut [f32], n: usize, f: usize) {
    let rows = rows_per_task(2 * f);
    let (gu, a) = (&gu[..n * 2 * f], &mut a[..n * f]);
    if n <= rows {
        return swiglu_fwd(gu, a, f);
    }
    a.par_chunks_mut(rows * f)
        .zip(gu.par_chunks(rows * 2 * f))
        .for_each(|(a, gu)| swiglu_fwd(gu, a, f));
}

/// dgu (N, 2F) from da (N, F), overwriting dgu.
pub fn swiglu_backward(da: &[f32], gu: &[f32], dgu: &mut [f32], n: usize, f: usize) {
    let rows = rows_per_task(2 * f);
    let (da, gu, dgu) = (&da[..n * f], &gu[..n * 2 * f], &mut dgu[..n * 2 * f]);
    if n <= rows {
        return swiglu_bwd(da, gu, dgu, f);
    }
    dgu.par_chunks_mut(rows * 2 * f)
        .zip(gu.par_chunks(rows * 2 * f))
        .zip(da.par_chunks(rows * f))
        .for_each(|((dgu, gu), da)| swiglu_bwd(da, gu, dgu, f));
}

multiversion! {
    fn geglu_fwd(gu: &[f32], a: &mut [f32], f: usize) {
        for (row, out) in gu.chunks_exact(2 * f).zip(a.chunks_exact_mut(f)) {
            let (g, u) = row.split_at(f);
            for i in 0..f {
                let v = g[i];
                let t = tanh_approx(SQRT_2_OVER_PI * v * (1.0 + GELU_C * v * v));
                out[i] = 0.5 * v * (1.0 + t) * u[i];
            }
        }
    }
}

multiversion! {
    fn geglu_bwd(da: &[f32], gu: &[f32], dgu: &mut [f32], f: usize) {
        for ((row, d), drow) in gu.chunks_exact(2 * f).zip(da.chunks_exact(f)).zip(dgu.chunks_exact_mut(2 * f)) {
            let (g, u) = row.split_at(f);
            let (dg, du) = drow.split_at_mut(f);
            for i in 0..f {
                let v = g[i];
                let t = tanh_approx(SQRT_2_OVER_PI * v * (1.0 + GELU_C * v * v));
                let dinner = SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_C * v * v);
                du[i] = d[i] * 0.5 * v * (1.0 + t);
                dg[i] = d[i] * u[i] * (0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * dinner);
            }
        }
    }
}

/// GeGLU (Shazeer 2020; Gemma's MLP): gu (N, 2F) = [gate | up] per row -> a (N, F) =
/// gelu(gate) * up, GELU in its tanh form.
pub fn geglu_forward(gu: &[f32], a: &mut [f32], n: usize, f: usize) {
    let rows = rows_per_task(2 * f);
    let (gu, a) = (&gu[..n * 2 * f], &mut a[..n * f]);
    if n <= rows || in_serial() {
        return geglu_fwd(gu, a, f);
    }
    a.par_chunks_mut(rows * f)
        .zip(gu.par_chunks(rows * 2 * f))
        .for_each(|(a, gu)| geglu_fwd(gu, a, f));
}

/// dgu (N, 2F) from da (N, F), overwriting dgu.
pub fn geglu_backward(da: &[f32], gu: &[f32], dgu: &mut [f32], n: usize, f: usize) {
    let rows = rows_per_task(2 * f);
    let (da, gu, dgu) = (&da[..n * f], &gu[..n * 2 * f], &mut dgu[..n * 2 * f]);
    if n <= rows || in_serial() {
        return geglu_bwd(da, gu, dgu, f);
    }
    dgu.par_chunks_mut(rows * 2 * f)
        .zip(gu.par_chunks(rows * 2 * f))
        .zip(da.par_chunks(rows * f))
        .for_each(|((dgu, gu), da)| geglu_bwd(da, gu, dgu, f));
}

/// `y = gelu(x)`, elementwise.
pub fn gelu_forward(x: &[f32], y: &mut [f32]) {
    const CHUNK: usize = 16384;
    if x.len() <= CHUNK || in_serial() {
        return gelu_fwd(x, y);
    }
    y.par_chunks_mut(CHUNK)
        .zip(x.par_chunks(CHUNK))
        .for_each(|(y, x)| gelu_fwd(x, y));
}

/// `dx = dy * gelu'(x)`, overwriting dx.
pub fn gelu_backward(dy: &[f32], x: &[f32], dx: &mut [f32]) {
    const CHUNK: usize = 16384;
    if x.len() <= CHUNK || in_serial() {
        return gelu_bwd(dy, x, dx);
    }
    dx.par_chunks_mut(CHUNK)
        .zip(x.par_chunks(CHUNK).zip(dy.par_chunks(CHUNK)))
        .for_each(|(dx, (x, dy))| gelu_bwd(dy, x, dx));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_data;
    use crate::layers::gradcheck::{check, weighted_sum};

    #[test]
    fn exp_approx_is_within_a_few_ulp() {
        for i in 0..20000 {
            let x = -87.0 + i as f32 * (175.0 / 20000.0);
            let (got, want) = (exp_approx(x), x.exp());
            assert!(
                (got - want).abs() <= 4.0 * f32::EPSILON * want,
                "exp({x}) = {got}, want {want}"
            );
        }
        assert!(exp_approx(-1000.0) == 0.0 && exp_approx(f32::NEG_INFINITY) == 0.0);
        assert!(exp_approx(f32::NAN).is_nan() && exp_approx(100.0) > 1e38);
    }

    #[test]
    fn swiglu_backward_matches_finite_differences() {
        let (n, f) = (3, 8);
        let gu: Vec<f32> = test_data(n * 2 * f, 1).iter().map(|v| 3.0 * v).collect();
        let dy = test_data(n * f, 2);
        let run = |gu: &[f32]| {
            let mut a = vec![0.0; n * f];
            swiglu_forward(gu, &mut a, n, f);
            weighted_sum(&dy, &a)
        };
        let mut dgu = vec![0.0; n * 2 * f];
        swiglu_backward(&dy, &gu, &mut dgu, n, f);
        check("swiglu", &gu, &dgu, 1e-2, 1e-3, run);
        let mut a = vec![0.0; n * f];
        swiglu_forward(&gu, &mut a, n, f);
        let (g, u) = (gu[0], gu[f]);
        assert!((a[0] - g / (1.0 + (-g).exp()) * u).abs() < 1e-6);
    }

    #[test]
    fn gelu_backward_matches_finite_differences() {
        let x: Vec<f32> = test_data(40, 3).iter().map(|v| 4.0 * v).collect();
        let dy = test_data(40, 4);
        let run = |x: &[f32]| {
            let mut y = vec![0.0; 40];
            gelu_forward(x, &mut y);
            weighted_sum(&dy, &y)
        };
        let mut dx = vec![0.0; 40];
        gelu_backward(&dy, &x, &mut dx);
        check("gelu", &x, &dx, 1e-2, 1e-3, run);
        // ggml's values: gelu(1) = 0.841192, gelu(-1) = -0.158808
        let mut y = [0.0; 2];
        gelu_forward(&[1.0, -1.0], &mut y);
        assert!((y[0] - 0.841_192).abs() < 1e-5 && (y[1] + 0.158_808).abs() < 1e-5);
    }

    #[test]
    fn geglu_backward_matches_finite_differences() {
        let (n, f) = (3, 8);
        let gu: Vec<f32> = test_data(n * 2 * f, 5).iter().map(|v| 3.0 * v).collect();
        let dy = test_data(n * f, 6);
        let run = |gu: &[f32]| {
            let mut a = vec![0.0; n * f];
            geglu_forward(gu, &mut a, n, f);
            weighted_sum(&dy, &a)
        };
        let mut dgu = vec![0.0; n * 2 * f];
        geglu_backward(&dy, &gu, &mut dgu, n, f);
        check("geglu", &gu, &dgu, 1e-2, 1e-3, run);
        // gelu(gate) * up, with ggml's gelu(1) = 0.841192
        let mut a = vec![0.0; 1];
        geglu_forward(&[1.0, 2.0], &mut a, 1, 1);
        assert!((a[0] - 2.0 * 0.841_192).abs() < 1e-5, "{}", a[0]);
    }
}
