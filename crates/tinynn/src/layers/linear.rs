//! Linear layer `y = x W^T + b` (W as GGUF stores a (out, in) matrix), forward and backward.
//! Shapes: x (N, K), W (M, K), b (M), y (N, M).

use super::matmul::{matmul_dytx, matmul_dyw, matmul_xwt};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Linear {
    /// K.
    pub n_in: usize,
    /// M.
    pub n_out: usize,
}

impl Linear {
    pub fn new(n_in: usize, n_out: usize) -> Self {
        Self { n_in, n_out }
    }

    /// `y (N, M) = x W^T + b`, or `y += x W^T + b` when `acc` (a residual add for free).
    pub fn forward(
        &self,
        x: &[f32],
        w: &[f32],
        b: Option<&[f32]>,
        y: &mut [f32],
        n: usize,
        acc: bool,
    ) {
        let (k, m) = (self.n_in, self.n_out);
        let y = &mut y[..n * m];
        let mut acc = acc;
        if let Some(b) = b {
            for row in y.chunks_exact_mut(m) {
                if acc {
                    row.iter_mut().zip(b).for_each(|(v, bi)| *v += bi);
                } else {
                    row.copy_from_slice(&b[..m]);
                }
            }
            acc = true;
        }
        matmul_xwt(y, x, w, n, k, m, acc);
    }

    /// From dy (N, M): `dW += dy^T x`, `db += sum_rows dy`, and `dx (N, K) (+)= dy W` (added when
    /// `dx_acc`; skipped when `dx` is None, e.g. for a layer fed by the data).
    #[allow(clippy::too_many_arguments)]
    pub fn backward(
        &self,
        dy: &[f32],
        x: &[f32],
        w: &[f32],
        dx: Option<&mut [f32]>,
        dx_acc: bool,
        dw: &mut [f32],
        db: Option<&mut [f32]>,
        n: usize,
    ) {
        let (k, m) = (self.n_in, self.n_out);
        matmul_dytx(dw, dy, x, n, k, m);
        if let Some(db) = db {
            for row in dy[..n * m].chunks_exact(m) {
                db.iter_mut().zip(row).for_each(|(d, g)| *d += g);
            }
        }
        if let Some(dx) = dx {
            matmul_dyw(dx, dy, w, n, k, m, dx_acc);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_data;
    use crate::layers::gradcheck::{check, weighted_sum};

    #[test]
    fn linear_backward_matches_finite_differences() {
        let (n, k, m) = (5, 7, 6);
        let lin = Linear::new(k, m);
        let (x, w, b, dy) = (
            test_data(n * k, 1),
            test_data(m * k, 2),
            test_data(m, 3),
            test_data(n * m, 4),
        );
        let run = |x: &[f32], w: &[f32], b: &[f32]| {
            let mut y = vec![0.5; n * m];
            lin.forward(x, w, Some(b), &mut y, n, true);
            weighted_sum(&dy, &y)
        };
        let (mut dx, mut dw, mut db) = (vec![0.0; n * k], vec![0.0; m * k], vec![0.0; m]);
        lin.backward(&dy, &x, &w, Some(&mut dx), false, &mut dw, Some(&mut db), n);
        check("linear dx", &x, &dx, 1e-2, 1e-3, |p| run(p, &w, &b));
        check("linear dw", &w, &dw, 1e-2, 1e-3, |p| run(&x, p, &b));
        check("linear db", &b, &db, 1e-2, 1e-3, |p| run(&x, &w, p));
        // without bias and without accumulation the output is exactly x W^T
        let mut y = vec![9.0; n * m];
        lin.forward(&x, &w, None, &mut y, n, false);
        let want: f32 = (0..k).map(|p| x[p] * w[p]).sum();
        assert!((y[0] - want).abs() < 1e-5);
    }
}
