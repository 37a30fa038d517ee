//! A low-rank adapter beside a frozen linear layer (LoRA, Hu et al. 2021, arXiv 2106.09685):
//! `y += s · (x Aᵀ) Bᵀ` with A (r, K), B (M, r) and s = alpha / r (rsLoRA, Kalajdzievski 2023,
//! arXiv 2312.03732: alpha / sqrt(r); the caller picks s). Forward and backward, used by the
//! trainer and by inference with unmerged adapters alike. y may be a column range of a wider
//! output (a fused q|k|v product): it is addressed with its own row stride.
//! Shapes: x (N, K), u = x Aᵀ (N, r), y / dy (N, M) inside rows of `ld` floats.

use super::matmul::{gemm_strided, Parallelism};

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Lora {
    /// K.
    pub n_in: usize,
    /// M.
    pub n_out: usize,
    /// r.
    pub rank: usize,
    /// s.
    pub scale: f32,
}

fn par(m: usize, n: usize, k: usize) -> Parallelism {
    if m * n * k >= 1 << 22 && rayon::current_num_threads() > 1 && !super::in_serial() {
        Parallelism::Rayon(0)
    } else {
        Parallelism::None
    }
}

impl Lora {
    /// `u (N, r) = x Aᵀ`, then `y (N, M; row stride ld) += s · u Bᵀ`. u is kept for the backward.
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &self,
        x: &[f32],
        a: &[f32],
        b: &[f32],
        u: &mut [f32],
        y: &mut [f32],
        ld: usize,
        n: usize,
    ) {
        let (k, m, r) = (self.n_in, self.n_out, self.rank);
        assert!(x.len() >= n * k && a.len() >= r * k && b.len() >= m * r && u.len() >= n * r);
        assert!(
            n == 0 || (ld >= m && y.len() >= (n - 1) * ld + m),
            "lora output shape"
        );
        // SAFETY: every operand's extent was checked above; lhs(i, p) = x[i*K + p],
        // rhs(p, j) = a[j*K + p]; then lhs(i, p) = u[i*r + p], rhs(p, j) = b[j*r + p].
        unsafe {
            gemm_strided(
                n,
                r,
                k,
                u.as_mut_ptr(),
                r as isize,
                false,
                x.as_ptr(),
                1,
                k as isize,
                a.as_ptr(),
                k as isize,
                1,
                1.0,
                par(n, r, k),
            );
            gemm_strided(
                n,
                m,
                r,
                y.as_mut_ptr(),
                ld as isize,
                true,
                u.as_ptr(),
                1,
                r as isize,
                b.as_ptr(),
                r as isize,
                1,
                self.scale,
                par(n, m, r),
            );
        }
    }

    /// From dy (N, M; row stride ld): `dB += s · dyᵀ u`, `du = s · dy B`, `dA += duᵀ x`, and
    /// `dx (N, K) += du A` when dx is given. `du` is scratch (N, r).
    #[allow(clippy::too_many_arguments)]
    pub fn backward(
        &self,
        dy: &[f32],
        ld: usize,
        x: &[f32],
        a: &[f32],
        b: &[f32],
        u: &[f32],
        du: &mut [f32],
        da: &mut [f32],
        db: &mut [f32],
        dx: Option<&mut [f32]>,
        n: usize,
    ) {
        let (k, m, r, s) = (self.n_in, self.n_out, self.rank, self.scale);
        assert!(x.len() >= n * k && u.len() >= n * r && du.len() >= n * r);
        assert!(da.len() >= r * k && db.len() >= m * r && a.len() >= r * k && b.len() >= m * r);
        assert!(
            n == 0 || (ld >= m && dy.len() >= (n - 1) * ld + m),
            "lora gradient shape"
        );
        // SAFETY: extents checked above. dB: lhs(i, p) = dy[p*ld + i], rhs(p, j) = u[p*r + j].
        // du: lhs(i, p) = dy[i*ld + p], rhs(p, j) = b[p*r + j]. dA: lhs(i, p) = du[p*r + i],
        // rhs(p, j) = x[p*K + j]. dx: lhs(i, p) = du[i*r + p], rhs(p, j) = a[p*K + j].
        unsafe {
            gemm_strided(
                m,
                r,
                n,
                db.as_mut_ptr(),
                r as isize,
                true,
                dy.as_ptr(),
                ld as isize,
                1,
                u.as_ptr(),
                1,
                r as isize,
                s,
                par(m, r, n),
            );
            gemm_strided(
                n,
                r,
                m,
                du.as_mut_ptr(),
                r as isize,
                false,
                dy.as_ptr(),
                1,
                ld as isize,
                b.as_ptr(),
                1,
                r as isize,
                s,
                par(n, r, m),
            );
            gemm_strided(
                r,
                k,
                n,
                da.as_mut_ptr(),
                k as isize,
                true,
                du.as_ptr(),
                r as isize,
                1,
                x.as_ptr(),
                1,
                k as isize,
                1.0,
                par(r, k, n),
            );
            if let Some(dx) = dx {
                assert!(dx.len() >= n * k, "lora dx shape");
                gemm_strided(
                    n,
                    k,
                    r,
                    dx.as_mut_ptr(),
                    k as isize,
                    true,
                    du.as_ptr(),
                    1,
                    r as isize,
                    a.as_ptr(),
                    1,
                    k as isize,
                    1.0,
                    par(n, k, r),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_data;
    use crate::layers::gradcheck::{check, weighted_sum};

    #[test]
    fn lora_backward_matches_finite_differences() {
        // y is the middle 4 columns of rows of 9, as the k part of a fused q|k|v output
        let (n, k, m, r, ld, off) = (6, 7, 4, 3, 9, 2);
        let lora = Lora {
            n_in: k,
            n_out: m,
            rank: r,
            scale: 0.7,
        };
        let (x, a, b) = (
            test_data(n * k, 1),
            test_data(r * k, 2),
            test_data(m * r, 3),
        );
        let dy = test_data(n * ld, 4);
        let run = |x: &[f32], a: &[f32], b: &[f32]| {
            let mut y = vec![0.25; n * ld];
            let mut u = vec![0.0; n * r];
            lora.forward(x, a, b, &mut u, &mut y[off..], ld, n);
            weighted_sum(&dy, &y)
        };
        let mut u = vec![0.0; n * r];
        let mut y = vec![0.25; n * ld];
        lora.forward(&x, &a, &b, &mut u, &mut y[off..], ld, n);
        // columns outside the adapter's range are untouched
        for i in 0..n {
            assert!(y[i * ld..i * ld + off].iter().all(|v| *v == 0.25));
            assert!(y[i * ld + off + m..(i + 1) * ld].iter().all(|v| *v == 0.25));
        }
        let (mut da, mut db, mut du) = (vec![0.0; r * k], vec![0.0; m * r], vec![0.0; n * r]);
        let mut dx = vec![0.0; n * k];
        lora.backward(
            &dy[off..],
            ld,
            &x,
            &a,
            &b,
            &u,
            &mut du,
            &mut da,
            &mut db,
            Some(&mut dx),
            n,
        );
        check("lora dx", &x, &dx, 1e-2, 1e-3, |p| run(p, &a, &b));
        check("lora dA", &a, &da, 1e-2, 1e-3, |p| run(&x, p, &b));
        check("lora dB", &b, &db, 1e-2, 1e-3, |p| run(&x, &a, p));
    }

    #[test]
    fn a_zero_b_adds_nothing_and_still_trains_b() {
        let (n, k, m, r) = (3, 5, 4, 2);
        let lora = Lora {
            n_in: k,
            n_out: m,
            rank: r,
            scale: 2.0,
        };
        let (x, a, b) = (test_data(n * k, 5), test_data(r * k, 6), vec![0.0; m * r]);
        let base = test_data(n * m, 7);
        let mut y = base.clone();
        let mut u = vec![0.0; n * r];
        lora.forward(&x, &a, &b, &mut u, &mut y, m, n);
        assert_eq!(
            y, base,
            "B = 0: the first step's output is the base's, bit for bit"
        );
        let dy = test_data(n * m, 8);
        let (mut da, mut db, mut du) = (vec![0.0; r * k], vec![0.0; m * r], vec![0.0; n * r]);
        lora.backward(&dy, m, &x, &a, &b, &u, &mut du, &mut da, &mut db, None, n);
        assert!(da.iter().all(|v| *v == 0.0), "dA is zero while B is zero");
        assert!(db.iter().any(|v| *v != 0.0), "B gets a gradient");
    }
}
