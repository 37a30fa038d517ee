//! The portable path of the matrix products: dequantize weight rows to f32 (a scratch row for
//! decode, a panel of rows handed to the `gemm` crate for prefill), on activations rounded
//! as the integer kernels round them for the weight type (`act_quant`). It serves every type
//! and width the integer kernels do not.

use super::act_quant::{round_for, vec_dot_type};
use super::dot::dot;
use super::{OutPtr, QMat};
use crate::quant::GgmlType;
use rayon::prelude::*;
use std::cell::RefCell;

thread_local! {
    static SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Run `f` on this file's per-thread scratch of `len` floats.
fn with_scratch<R>(len: usize, f: impl FnOnce(&mut [f32]) -> R) -> R {
    crate::kernels::with_scratch(&SCRATCH, len, f)
}

thread_local! {
    static XQ: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Run `f` on `x` rounded as the integer kernels round activations for weights of type `ty`.
fn with_rounded<R>(ty: GgmlType, x: &[f32], k: usize, f: impl FnOnce(&[f32]) -> R) -> R {
    if vec_dot_type(ty).is_none() {
        return f(x);
    }
    XQ.with(|buf| {
        // (a fresh buffer on a thread already inside a product)
        let (mut mine, mut fresh) = (buf.try_borrow_mut().ok(), Vec::new());
        let xr = mine.as_deref_mut().unwrap_or(&mut fresh);
        xr.clear();
        xr.extend_from_slice(x);
        round_for(ty, xr, k);
        f(xr)
    })
}

/// `y = W x` through dequantized rows.
pub(super) fn matvec_f32(w: &QMat, x: &[f32], y: &mut [f32]) {
    with_rounded(w.ty, x, w.cols, |x| matvec_exact(w, x, y))
}

/// `Y = X W^T` through dequantized panels and the `gemm` crate.
pub(super) fn matmul_f32(w: &QMat, x: &[f32], t: usize, y: &mut [f32]) {
    with_rounded(w.ty, x, w.cols, |x| matmul_exact(w, x, t, y))
}

/// `y = W x` on `x` as given.
fn matvec_exact(w: &QMat, x: &[f32], y: &mut [f32]) {
    let chunk = (w.rows / (rayon::current_num_threads() * 4)).clamp(8, 256);
    y.par_chunks_mut(chunk).enumerate().for_each(|(c, ys)| {
        with_scratch(w.cols, |row| {
            for (i, yi) in ys.iter_mut().enumerate() {
                w.dequantize_row(c * chunk + i, row);
                *yi = dot(row, x);
            }
        })
    });
}

/// `Y = X W^T` on `X` as given.
fn matmul_exact(w: &QMat, x: &[f32], t: usize, y: &mut [f32]) {
    let (n, k) = (w.rows, w.cols);
    // The panel depends on N only, so results do not change with the thread count.
    let panel = (n / 8).clamp(16, 128);
    let out = OutPtr(y.as_mut_ptr());
    (0..n.div_ceil(panel)).into_par_iter().for_each(|p| {
        let r0 = p * panel;
        let rows = panel.min(n - r0);
        with_scratch(rows * k, |buf| {
            for r in 0..rows {
                w.dequantize_row(r0 + r, &mut buf[r * k..(r + 1) * k]);
            }
            // SAFETY: dst covers Y[0..t, r0..r0+rows] (row stride n), which lies inside y and is
            // written by this task only; lhs is X (T, K) row-major; rhs(kk, j) = buf[j*k + kk].
            unsafe { gemm_panel(out.at(r0), n, x, buf, t, rows, k, false) };
        })
    });
}

/// dst (T, rows; row stride `ldd`) (+)= lhs (T, K) * rhs^T, rhs (rows, K) row-major, on
/// this thread (the callers split the work).
///
/// # Safety
/// `dst` must be valid for writes at `i * ldd + j` for i < t, j < rows, and no other thread
/// may touch those elements during the call.
#[allow(clippy::too_many_arguments)]
unsafe fn gemm_panel(
    dst: *mut f32,
    ldd: usize,
    lhs: &[f32],
    rhs: &[f32],
    t: usize,
    rows: usize,
    k: usize,
    accumulate: bool,
) {
    use crate::layers::matmul::{gemm_strided, Parallelism};
    gemm_strided(
        t,
        rows,
        k,
        dst,
        ldd as isize,
        accumulate,
        lhs.as_ptr(),
        1,
        k as isize,
        rhs.as_ptr(),
        k as isize,
        1,
        1.0,
        Parallelism::None,
    )
}
