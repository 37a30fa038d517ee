//! RMSNorm (Zhang & Sennrich 2019), as ggml's `rms_norm` times a weight, with an extra
//! constant output `scale` (the depth scaling, see [`super::depth_scale`]):
//! `y = x * r * w * scale`, `r = 1 / sqrt(mean(x^2) + eps)`, per row of C.
//! The forward saves r (N) for the backward.

use super::{multiversion, rows_per_task};
use rayon::prelude::*;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RmsNorm {
    pub dim: usize,
    pub eps: f32,
}

multiversion! {
    fn forward_rows(x: &[f32], w: &[f32], scale: f32, eps: f32, out: &mut [f32], rstd: &mut [f32]) {
        let c = w.len();
        for ((xr, or), r) in x.chunks_exact(c).zip(out.chunks_exact_mut(c)).zip(rstd.iter_mut()) {
            let ss: f32 = sum_sq(xr);
            let rs = 1.0 / (ss / c as f32 + eps).sqrt();
            *r = rs;
            let k = rs * scale;
            for ((o, xi), wi) in or.iter_mut().zip(xr).zip(w) {
                *o = xi * k * wi;
            }
        }
    }
}

/// Sum of squares with 16 independent lanes (vectorises under the multiversioned callers).
#[inline(always)]
pub(crate) fn sum_sq(x: &[f32]) -> f32 {
    dot16(x, x)
}

/// Dot product with 16 independent lanes, summed in a fixed tree.
#[inline(always)]
pub(crate) fn dot16(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    let (ca, cb) = (a.chunks_exact(16), b.chunks_exact(16));
    let (ta, tb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..16 {
            acc[i] += x[i] * y[i];
        }
    }
    let mut s = 0f32;
    for (x, y) in ta.iter().zip(tb) {
        s += x * y;
    }
    s + super::act::tree16(acc)
}

multiversion! {
    fn backward_rows(dy: &[f32], x: &[f32], w: &[f32], scale: f32, rstd: &[f32], dx: &mut [f32]) {
        let c = w.len();
        for (((g, xr), r), d) in dy.chunks_exact(c).zip(x.chunks_exact(c)).zip(rstd).zip(dx.chunks_exact_mut(c)) {
            // with u = dy * w * scale: dx = r u - r^3 x mean(u x)
            let mut ux = 0f32;
            for i in 0..c {
                ux += g[i] * w[i] * xr[i];
            }
            let ux = ux * scale;
            let k = r * r * r * ux / c as f32;
            let rs = r * scale;
            for i in 0..c {
                d[i] += rs * g[i] * w[i] - k * xr[i];
            }
        }
    }
}

multiversion! {
    fn weight_grad(dy: &[f32], x: &[f32], rstd: &[f32], scale: f32, dw: &mut [f32]) {
        let c = dw.len();
        for ((g, xr), r) in dy.chunks_exact(c).zip(x.chunks_exact(c)).zip(rstd) {
            let k = r * scale;
            for i in 0..c {
                dw[i] += g[i] * xr[i] * k;
            }
        }
    }
}

impl RmsNorm {
    pub fn new(dim: usize, eps: f32) -> Self {
        Self { dim, eps }
    }

    /// x (N, C) -> out (N, C), saving rstd (N).
    pub fn forward(
        &self,
        x: &[f32],
        w: &[f32],
        scale: f32,
        out: &mut [f32],
        rstd: &mut [f32],
        n: usize,
    ) {
        let _prof = crate::profile::timer(crate::profile::Kind::Norms);
        let c = self.dim;
        let rows = rows_per_task(c);
        let (x, out, rstd) = (&x[..n * c], &mut out[..n * c], &mut rstd[..n]);
        if n <= rows {
            return forward_rows(x, w, scale, self.eps, out, rstd);
        }
        out.par_chunks_mut(rows * c)
            .zip(rstd.par_chunks_mut(rows))
            .zip(x.par_chunks(rows * c))
            .for_each(|((o, r), x)| forward_rows(x, w, scale, self.eps, o, r));
    }

    /// From dy (N, C): `dx += ...` (the residual stream's gradient is accumulated) and `dw += ...`.
    #[allow(clippy::too_many_arguments)]
    pub fn backward(
        &self,
        dy: &[f32],
        x: &[f32],
        w: &[f32],
        scale: f32,
        rstd: &[f32],
        dx: &mut [f32],
        dw: &mut [f32],
        n: usize,
    ) {
        let _prof = crate::profile::timer(crate::profile::Kind::Norms);
        let c = self.dim;
        let rows = rows_per_task(c);
        let (dy, x, rstd, dx) = (&dy[..n * c], &x[..n * c], &rstd[..n], &mut dx[..n * c]);
        if n <= rows {
            backward_rows(dy, x, w, scale, rstd, dx);
        } else {
            dx.par_chunks_mut(rows * c)
                .zip(dy.par_chunks(rows * c))
                .zip(x.par_chunks(rows * c))
                .zip(rstd.par_chunks(rows))
                .for_each(|(((d, g), x), r)| backward_rows(g, x, w, scale, r, d));
        }
        weight_grad(dy, x, rstd, scale, dw);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_data;
    use crate::layers::gradcheck::{check, weighted_sum};

    #[test]
    fn rmsnorm_backward_matches_finite_differences() {
        let (n, c, s) = (4, 24, 0.7);
        let norm = RmsNorm::new(c, 1e-5);
        let (x, dy) = (test_data(n * c, 1), test_data(n * c, 2));
        let w: Vec<f32> = test_data(c, 3).iter().map(|v| 1.0 + v).collect();
        let run = |x: &[f32], w: &[f32]| {
            let (mut y, mut r) = (vec![0.0; n * c], vec![0.0; n]);
            norm.forward(x, w, s, &mut y, &mut r, n);
            weighted_sum(&dy, &y)
        };
        let (mut y, mut r) = (vec![0.0; n * c], vec![0.0; n]);
        norm.forward(&x, &w, s, &mut y, &mut r, n);
        let (mut dx, mut dw) = (vec![0.0; n * c], vec![0.0; c]);
        norm.backward(&dy, &x, &w, s, &r, &mut dx, &mut dw, n);
        check("rmsnorm dx", &x, &dx, 1e-2, 2e-3, |p| run(p, &w));
        check("rmsnorm dw", &w, &dw, 1e-2, 2e-3, |p| run(&x, p));
        // the output has rms |w| * scale when w is constant
        let ones = vec![1.0; c];
        norm.forward(&x, &ones, s, &mut y, &mut r, n);
        let ms: f32 = y[..c].iter().map(|v| v * v).sum::<f32>() / c as f32;
        assert!((ms.sqrt() - s).abs() < 1e-3);
    }

    #[test]
    fn rmsnorm_parallel_rows_match_one_task() {
        let (n, c) = (3000, 16);
        let norm = RmsNorm::new(c, 1e-5);
        let (x, w, dy) = (test_data(n * c, 4), test_data(c, 5), test_data(n * c, 6));
        let (mut y, mut r) = (vec![0.0; n * c], vec![0.0; n]);
        norm.forward(&x, &w, 1.0, &mut y, &mut r, n);
        let (mut y1, mut r1) = (vec![0.0; n * c], vec![0.0; n]);
        forward_rows(&x, &w, 1.0, 1e-5, &mut y1, &mut r1);
        assert_eq!(y, y1);
        let (mut dx, mut dw) = (vec![0.0; n * c], vec![0.0; c]);
        norm.backward(&dy, &x, &w, 1.0, &r, &mut dx, &mut dw, n);
        let mut dx1 = vec![0.0; n * c];
        backward_rows(&dy, &x, &w, 1.0, &r, &mut dx1);
        assert_eq!(dx, dx1);
    }
}
