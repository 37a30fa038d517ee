//! Small dense helpers of the chunked delta rule ([`super::chunk`]): products of strided
//! matrix views on the `gemm` crate (one thread each: the heads already run in parallel) and
//! the inverse of a unit lower-triangular matrix I + L by substitution (the products with it
//! then run on gemm, several times faster than substituting into each right-hand side).
//! Shapes: C rows of a chunk.

use crate::layers::matmul::{gemm_strided, Parallelism};
use crate::layers::multiversion;

/// Read-only matrix view: element (i, j) at `d[i * rs + j * cs]`, bounds-checked when made.
#[derive(Clone, Copy)]
pub(super) struct Mat<'a> {
    d: &'a [f32],
    rows: usize,
    cols: usize,
    rs: usize,
    cs: usize,
}

impl<'a> Mat<'a> {
    /// Row-major (rows, cols) at the start of `d`.
    pub(super) fn new(d: &'a [f32], rows: usize, cols: usize) -> Self {
        Self::strided(d, rows, cols, cols)
    }

    /// (rows, cols) with rows `rs` elements apart.
    pub(super) fn strided(d: &'a [f32], rows: usize, cols: usize, rs: usize) -> Self {
        if rows > 0 && cols > 0 {
            assert!(
                (rows - 1) * rs + cols <= d.len(),
                "matrix view out of bounds"
            );
        }
        Self {
            d,
            rows,
            cols,
            rs,
            cs: 1,
        }
    }

    /// The transpose (a view of the same data).
    pub(super) fn t(self) -> Self {
        Self {
            rows: self.cols,
            cols: self.rows,
            rs: self.cs,
            cs: self.rs,
            ..self
        }
    }
}

/// `out (m, n) = acc * out + alpha * a (m, k) b (k, n)`, out row-major.
pub(super) fn mm(out: &mut [f32], a: Mat, b: Mat, alpha: f32, acc: bool) {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    assert!(b.rows == k && out.len() >= m * n, "mm shapes");
    // SAFETY: both views were bounds-checked when made (a transpose reaches the same
    // elements), out holds m * n floats, and a `&mut` out cannot overlap the shared inputs.
    unsafe {
        gemm_strided(
            m,
            n,
            k,
            out.as_mut_ptr(),
            n as isize,
            acc,
            a.d.as_ptr(),
            a.cs as isize,
            a.rs as isize,
            b.d.as_ptr(),
            b.cs as isize,
            b.rs as isize,
            alpha,
            Parallelism::None,
        )
    }
}

/// `x -= a * y`, elementwise.
#[inline(always)]
pub(super) fn axpy_neg(x: &mut [f32], a: f32, y: &[f32]) {
    for (xi, yi) in x.iter_mut().zip(y) {
        *xi -= a * yi;
    }
}

multiversion! {
    /// a (C, C) = (I + L)^-1 for l (C, C) strictly lower-triangular, by forward substitution:
    /// row i of A is e_i minus L_ij times the rows j < i (each nonzero in columns <= j only).
    pub(super) fn invert_unit_lower(l: &[f32], a: &mut [f32], c: usize) {
        a.fill(0.0);
        for i in 0..c {
            a[i * c + i] = 1.0;
        }
        for i in 1..c {
            let (done, rest) = a.split_at_mut(i * c);
            let ai = &mut rest[..c];
            for j in 0..i {
                axpy_neg(&mut ai[..=j], l[i * c + j], &done[j * c..=j * c + j]);
            }
        }
    }
}
