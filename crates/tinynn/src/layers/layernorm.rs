//! LayerNorm (Ba et al. 2016), as ggml's `norm` times a weight plus a bias, with an extra
//! constant output `scale` (the depth scaling, see [`super::depth_scale`]):
//! `y = scale * ((x - mean) * r * w + b)`, `r = 1 / sqrt(var + eps)`, per row of C.
//! The forward saves mean and r (N each) for the backward.

use super::act::tree16;
use super::{multiversion, rows_per_task};
use rayon::prelude::*;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LayerNorm {
    pub dim: usize,
    pub eps: f32,
}

/// The sum of `f(x_i)` over 16 independent lanes, added in a fixed tree (a vector loop where
/// one running sum would wait on every add).
#[inline(always)]
fn sum16(x: &[f32], f: impl Fn(f32) -> f32) -> f32 {
    let mut acc = [0f32; 16];
    let ch = x.chunks_exact(16);
    let mut s = 0f32;
    for v in ch.remainder() {
        s += f(*v);
    }
    for xs in ch {
        for i in 0..16 {
            acc[i] += f(xs[i]);
        }
    }
    s + tree16(acc)
}

/// `(sum u_i, sum u_i (x_i - mu))` with `u = g w`, over 16 lanes as [`sum16`].
#[inline(always)]
fn sums16(g: &[f32], w: &[f32], x: &[f32], mu: f32) -> (f32, f32) {
    let (mut a, mut b) = ([0f32; 16], [0f32; 16]);
    let (cg, cw, cx) = (g.chunks_exact(16), w.chunks_exact(16), x.chunks_exact(16));
    let (mut sa, mut sb) = (0f32, 0f32);
    for ((gi, wi), xi) in cg
        .remainder()
        .iter()
        .zip(cw.remainder())
        .zip(cx.remainder())
    {
        sa += gi * wi;
        sb += gi * wi * (xi - mu);
    }
    for ((gs, ws), xs) in cg.zip(cw).zip(cx) {
        for i in 0..16 {
            let u = gs[i] * ws[i];
            a[i] += u;
            b[i] += u * (xs[i] - mu);
        }
    }
    (sa + tree16(a), sb + tree16(b))
}

multiversion! {
    fn forward_rows(x: &[f32], w: &[f32], b: &[f32], scale: f32, eps: f32, out: &mut [f32], mean: &mut [f32], rstd: &mut [f32]) {
        let c = w.len();
        for (((xr, or), m), r) in x.chunks_exact(c).zip(out.chunks_exact_mut(c)).zip(mean.iter_mut()).zip(rstd.iter_mut()) {
            let mu = sum16(xr, |v| v) / c as f32;
            let var = sum16(xr, |v| (v - mu) * (v - mu));
            let rs = 1.0 / (var / c as f32 + eps).sqrt();
            (*m, *r) = (mu, rs);
            for i in 0..c {
                or[i] = scale * ((xr[i] - mu) * rs * w[i] + b[i]);
            }
        }
    }
}

multiversion! {
    fn backward_rows(dy: &[f32], x: &[f32], w: &[f32], scale: f32, mean: &[f32], rstd: &[f32], dx: &mut [f32]) {
        let c = w.len();
        let rows = dy.chunks_exact(c).zip(x.chunks_exact(c)).zip(mean.iter().zip(rstd)).zip(dx.chunks_exact_mut(c));
        for (((g, xr), (mu, r)), d) in rows {
            // with u = dy * w * scale and xhat = (x - mean) r: dx = r (u - mean(u) - xhat mean(u xhat))
            let (su, sux) = sums16(g, w, xr, *mu);
            let mu_u = su * scale / c as f32;
            let mu_ux = sux * scale * r / c as f32;
            for i in 0..c {
                let xhat = (xr[i] - mu) * r;
                d[i] += r * (g[i] * w[i] * scale - mu_u - xhat * mu_ux);
            }
        }
    }
}

multiversion! {
    fn param_grads(dy: &[f32], x: &[f32], mean: &[f32], rstd: &[f32], scale: f32, dw: &mut [f32], db: &mut [f32]) {
        let c = dw.len();
        for ((g, xr), (mu, r)) in dy.chunks_exact(c).zip(x.chunks_exact(c)).zip(mean.iter().zip(rstd)) {
            for i in 0..c {
                let gs = g[i] * scale;
                dw[i] += gs * (xr[i] - mu) * r;
                db[i] += gs;
            }
        }
    }
}

impl LayerNorm {
    pub fn new(dim: usize, eps: f32) -> Self {
        Self { dim, eps }
    }

    /// x (N, C) -> out (N, C), saving mean and rstd (N each).
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &self,
        x: &[f32],
        w: &[f32],
        b: &[f32],
        scale: f32,
        out: &mut [f32],
        mean: &mut [f32],
        rstd: &mut [f32],
        n: usize,
    ) {
        let _prof = crate::profile::timer(crate::profile::Kind::Norms);
        let c = self.dim;
        let rows = rows_per_task(c);
        let (x, out, mean, rstd) = (
            &x[..n * c],
            &mut out[..n * c],
            &mut mean[..n],
            &mut rstd[..n],
        );
        if n <= rows {
            return forward_rows(x, w, b, scale, self.eps, out, mean, rstd);
        }
        out.par_chunks_mut(rows * c)
            .zip(mean.par_chunks_mut(rows))
            .zip(rstd.par_chunks_mut(rows))
            .zip(x.par_chunks(rows * c))
            .for_each(|(((o, m), r), x)| forward_rows(x, w, b, scale, self.eps, o, m, r));
    }

    /// From dy (N, C): `dx += ...` (accumulated into the residual stream's gradient), `dw += ...`, `db += ...`.
    #[allow(clippy::too_many_arguments)]
    pub fn backward(
        &self,
        dy: &[f32],
        x: &[f32],
        w: &[f32],
        scale: f32,
        mean: &[f32],
        rstd: &[f32],
        dx: &mut [f32],
        dw: &mut [f32],
        db: &mut [f32],
        n: usize,
    ) {
        let _prof = crate::profile::timer(crate::profile::Kind::Norms);
        let c = self.dim;
        let rows = rows_per_task(c);
        let (dy, x, mean, rstd, dx) = (
            &dy[..n * c],
            &x[..n * c],
            &mean[..n],
            &rstd[..n],
            &mut dx[..n * c],
        );
        if n <= rows {
            backward_rows(dy, x, w, scale, mean, rstd, dx);
        } else {
            dx.par_chunks_mut(rows * c)
                .zip(dy.par_chunks(rows * c))
                .zip(x.par_chunks(rows * c))
                .zip(mean.par_chunks(rows).zip(rstd.par_chunks(rows)))
                .for_each(|(((d, g), x), (m, r))| backward_rows(g, x, w, scale, m, r, d));
        }
        param_grads(dy, x, mean, rstd, scale, dw, db);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_data;
    use crate::layers::gradcheck::{check, weighted_sum};

    #[test]
    fn layernorm_backward_matches_finite_differences() {
        let (n, c, s) = (4, 20, 0.6);
        let norm = LayerNorm::new(c, 1e-5);
        let (x, dy, b) = (test_data(n * c, 1), test_data(n * c, 2), test_data(c, 4));
        let w: Vec<f32> = test_data(c, 3).iter().map(|v| 1.0 + v).collect();
        let run = |x: &[f32], w: &[f32], b: &[f32]| {
            let (mut y, mut m, mut r) = (vec![0.0; n * c], vec![0.0; n], vec![0.0; n]);
            norm.forward(x, w, b, s, &mut y, &mut m, &mut r, n);
            weighted_sum(&dy, &y)
        };
        let (mut y, mut m, mut r) = (vec![0.0; n * c], vec![0.0; n], vec![0.0; n]);
        norm.forward(&x, &w, &b, s, &mut y, &mut m, &mut r, n);
        let (mut dx, mut dw, mut db) = (vec![0.0; n * c], vec![0.0; c], vec![0.0; c]);
        norm.backward(&dy, &x, &w, s, &m, &r, &mut dx, &mut dw, &mut db, n);
        check("layernorm dx", &x, &dx, 1e-2, 2e-3, |p| run(p, &w, &b));
        check("layernorm dw", &w, &dw, 1e-2, 2e-3, |p| run(&x, p, &b));
        check("layernorm db", &b, &db, 1e-2, 2e-3, |p| run(&x, &w, p));
        // with w = 1, b = 0 each output row has mean 0 and variance scale^2
        norm.forward(
            &x,
            &vec![1.0; c],
            &vec![0.0; c],
            s,
            &mut y,
            &mut m,
            &mut r,
            n,
        );
        let mean: f32 = y[..c].iter().sum::<f32>() / c as f32;
        let var: f32 = y[..c].iter().map(|v| v * v).sum::<f32>() / c as f32;
        assert!(mean.abs() < 1e-5 && (var - s * s).abs() < 1e-3);
    }
}
