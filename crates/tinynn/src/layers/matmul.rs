//! The three matrix products of a linear layer, through the `gemm` crate (runtime-dispatched
//! AVX-512 / AVX2 microkernels): forward `Y = X W^T`, backward `dX = dY W` and `dW += dY^T X`.
//! Accumulation happens inside gemm (`dst = alpha dst + beta A B` with alpha 1), so gradients
//! are never zeroed into a scratch and added afterwards.
//!
//! Shapes: X (N, K), W (M, K) row-major as GGUF stores a (out, in) matrix, Y (N, M).
//!
//! [`set_precision`]`(Precision::Bf16)` sends the three products to the bf16 kernel
//! (`kernels::bf16gemm`: operands rounded to bf16, sums in f32), as PyTorch's autocast does for
//! a training step; like `torch.set_float32_matmul_precision` it is process-wide.

use crate::kernels::bf16gemm::{gemm_with, Kernel, View};
pub(crate) use gemm::Parallelism;
use std::sync::atomic::{AtomicU8, Ordering};

/// What the linear layers' products compute in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    F32,
    /// bf16 operands, f32 sums (AVX512-BF16).
    Bf16,
}

static PRECISION: AtomicU8 = AtomicU8::new(0);

/// Sets the products' precision for the whole process; returns the one in effect (bf16 falls
/// back to f32 on a CPU without AVX512-BF16).
pub fn set_precision(p: Precision) -> Precision {
    let p = match p {
        Precision::Bf16 if crate::kernels::bf16gemm::available() => Precision::Bf16,
        _ => Precision::F32,
    };
    PRECISION.store(p as u8, Ordering::Relaxed);
    p
}

/// The products' precision now.
pub fn precision() -> Precision {
    match PRECISION.load(Ordering::Relaxed) {
        1 => Precision::Bf16,
        _ => Precision::F32,
    }
}

/// Products smaller than this many multiply-adds run on one thread: below it, rayon's
/// fork/join costs more than it saves.
const PAR_MIN_FLOPS: usize = 1 << 23;

/// Products smaller than this many multiply-adds stay f32 under [`Precision::Bf16`].
const BF16_MIN_FLOPS: usize = 1 << 22;

fn parallelism(m: usize, n: usize, k: usize) -> Parallelism {
    if m * n * k >= PAR_MIN_FLOPS && rayon::current_num_threads() > 1 && !super::in_serial() {
        Parallelism::Rayon(0)
    } else {
        Parallelism::None
    }
}

/// `dst (m, n) = acc * dst + lhs (m, k) * rhs (k, n)` with element strides (column, row).
///
/// # Safety
/// Every pointer must be valid for the elements its strides and sizes reach.
#[allow(clippy::too_many_arguments)]
unsafe fn raw(
    m: usize,
    n: usize,
    k: usize,
    dst: *mut f32,
    dst_rs: isize,
    acc: bool,
    lhs: *const f32,
    lhs_cs: isize,
    lhs_rs: isize,
    rhs: *const f32,
    rhs_cs: isize,
    rhs_rs: isize,
) {
    let _prof = crate::profile::timer(crate::profile::Kind::Products);
    // small products stay f32: packing them to bf16 costs more than the bf16 sums save
    let bf16 = precision() == Precision::Bf16 && m * n * k >= BF16_MIN_FLOPS;
    product(
        bf16.then(Kernel::best).flatten(),
        m,
        n,
        k,
        dst,
        dst_rs,
        acc,
        lhs,
        lhs_cs,
        lhs_rs,
        rhs,
        rhs_cs,
        rhs_rs,
        1.0,
        parallelism(m, n, k),
    )
}

/// One product of attention's tiles (S = Q K^T, P V and their gradients) on one thread, as
/// [`gemm_strided`] with `Parallelism::None`: under [`Precision::Bf16`] on bf16 operands with
/// f32 sums (the softmax around it stays f32) where the CPU has AMX; else in f32. On
/// recipes/small (64-query tiles against up to 256 keys of 48) the bf16 step was 10% shorter
/// with AMX tiles than with f32 ones, and 2-4% longer with AVX512-BF16's.
///
/// # Safety
/// As [`gemm_strided`].
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn tile_product(
    m: usize,
    n: usize,
    k: usize,
    dst: *mut f32,
    dst_rs: isize,
    acc: bool,
    lhs: *const f32,
    lhs_cs: isize,
    lhs_rs: isize,
    rhs: *const f32,
    rhs_cs: isize,
    rhs_rs: isize,
    beta: f32,
) {
    let amx = precision() == Precision::Bf16 && Kernel::best() == Some(Kernel::Amx);
    product(
        amx.then_some(Kernel::Amx),
        m,
        n,
        k,
        dst,
        dst_rs,
        acc,
        lhs,
        lhs_cs,
        lhs_rs,
        rhs,
        rhs_cs,
        rhs_rs,
        beta,
        Parallelism::None,
    )
}

/// [`gemm_strided`], or with a bf16 kernel the same product on bf16 operands
/// (`kernels::bf16gemm`, rayon-parallel where `par` is).
///
/// # Safety
/// As [`gemm_strided`]; the kernel must be available.
#[allow(clippy::too_many_arguments)]
unsafe fn product(
    bf16: Option<Kernel>,
    m: usize,
    n: usize,
    k: usize,
    dst: *mut f32,
    dst_rs: isize,
    acc: bool,
    lhs: *const f32,
    lhs_cs: isize,
    lhs_rs: isize,
    rhs: *const f32,
    rhs_cs: isize,
    rhs_rs: isize,
    beta: f32,
    par: Parallelism,
) {
    match bf16 {
        Some(kernel) if k > 0 => {
            let a = View {
                ptr: lhs,
                rs: lhs_rs,
                cs: lhs_cs,
            };
            let b = View {
                ptr: rhs,
                rs: rhs_rs,
                cs: rhs_cs,
            };
            let par = matches!(par, Parallelism::Rayon(_));
            gemm_with(kernel, m, n, k, dst, dst_rs, acc, a, b, beta, par)
        }
        _ => gemm_strided(
            m, n, k, dst, dst_rs, acc, lhs, lhs_cs, lhs_rs, rhs, rhs_cs, rhs_rs, beta, par,
        ),
    }
}

/// `dst (m, n) = acc * dst + beta * lhs (m, k) * rhs (k, n)`, all with element strides
/// (column, row), dst with unit column stride; `par` as the `gemm` crate takes it.
///
/// # Safety
/// Every pointer must be valid for the elements its strides and sizes reach, and dst must
/// not overlap the inputs.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm_strided(
    m: usize,
    n: usize,
    k: usize,
    dst: *mut f32,
    dst_rs: isize,
    acc: bool,
    lhs: *const f32,
    lhs_cs: isize,
    lhs_rs: isize,
    rhs: *const f32,
    rhs_cs: isize,
    rhs_rs: isize,
    beta: f32,
    par: Parallelism,
) {
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        // gemm leaves dst alone when k = 0; an overwrite must still clear it
        if !acc {
            for i in 0..m {
                std::slice::from_raw_parts_mut(dst.offset(i as isize * dst_rs), n).fill(0.0);
            }
        }
        return;
    }
    gemm::gemm(
        m,
        n,
        k,
        dst,
        1,
        dst_rs,
        acc,
        lhs,
        lhs_cs,
        lhs_rs,
        rhs,
        rhs_cs,
        rhs_rs,
        if acc { 1.0 } else { 0.0 },
        beta,
        false,
        false,
        false,
        par,
    )
}

/// `y (N, M) (+)= x (N, K) w^T` for w (M, K); adds into y when `acc`.
pub fn matmul_xwt(y: &mut [f32], x: &[f32], w: &[f32], n: usize, k: usize, m: usize, acc: bool) {
    assert!(
        x.len() >= n * k && w.len() >= m * k && y.len() >= n * m,
        "matmul_xwt shapes"
    );
    // SAFETY: the lengths were checked above; rhs(kk, j) = w[j*K + kk].
    unsafe {
        raw(
            n,
            m,
            k,
            y.as_mut_ptr(),
            m as isize,
            acc,
            x.as_ptr(),
            1,
            k as isize,
            w.as_ptr(),
            k as isize,
            1,
        )
    }
}

/// `dx (N, K) (+)= dy (N, M) w` for w (M, K); adds into dx when `acc`.
pub fn matmul_dyw(dx: &mut [f32], dy: &[f32], w: &[f32], n: usize, k: usize, m: usize, acc: bool) {
    assert!(
        dy.len() >= n * m && w.len() >= m * k && dx.len() >= n * k,
        "matmul_dyw shapes"
    );
    // SAFETY: the lengths were checked above; rhs(j, kk) = w[j*K + kk].
    unsafe {
        raw(
            n,
            k,
            m,
            dx.as_mut_ptr(),
            k as isize,
            acc,
            dy.as_ptr(),
            1,
            m as isize,
            w.as_ptr(),
            1,
            k as isize,
        )
    }
}

/// `dw (M, K) += dy^T x` for dy (N, M), x (N, K): the weight gradient, always accumulated.
pub fn matmul_dytx(dw: &mut [f32], dy: &[f32], x: &[f32], n: usize, k: usize, m: usize) {
    assert!(
        dy.len() >= n * m && x.len() >= n * k && dw.len() >= m * k,
        "matmul_dytx shapes"
    );
    // SAFETY: the lengths were checked above; lhs(j, i) = dy[i*M + j], rhs(i, kk) = x[i*K + kk].
    unsafe {
        raw(
            m,
            k,
            n,
            dw.as_mut_ptr(),
            k as isize,
            true,
            dy.as_ptr(),
            m as isize,
            1,
            x.as_ptr(),
            1,
            k as isize,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_data;

    fn naive(
        a: impl Fn(usize, usize) -> f32,
        b: impl Fn(usize, usize) -> f32,
        m: usize,
        n: usize,
        k: usize,
    ) -> Vec<f32> {
        let mut out = vec![0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                out[i * n + j] = (0..k)
                    .map(|p| (a(i, p) as f64) * (b(p, j) as f64))
                    .sum::<f64>() as f32;
            }
        }
        out
    }

    fn close(a: &[f32], b: &[f32]) {
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() < 1e-4 * (1.0 + y.abs()), "{x} vs {y}");
        }
    }

    #[test]
    fn three_products_match_naive_and_accumulate() {
        let (n, k, m) = (37, 19, 23);
        let x = test_data(n * k, 1);
        let w = test_data(m * k, 2);
        let dy = test_data(n * m, 3);
        let mut y = test_data(n * m, 4);
        matmul_xwt(&mut y, &x, &w, n, k, m, false);
        close(
            &y,
            &naive(|i, p| x[i * k + p], |p, j| w[j * k + p], n, m, k),
        );
        let mut dx = vec![1.0; n * k];
        matmul_dyw(&mut dx, &dy, &w, n, k, m, true);
        let want: Vec<f32> = naive(|i, p| dy[i * m + p], |p, j| w[p * k + j], n, k, m)
            .iter()
            .map(|v| v + 1.0)
            .collect();
        close(&dx, &want);
        let mut dw = vec![2.0; m * k];
        matmul_dytx(&mut dw, &dy, &x, n, k, m);
        let want: Vec<f32> = naive(|j, i| dy[i * m + j], |i, p| x[i * k + p], m, k, n)
            .iter()
            .map(|v| v + 2.0)
            .collect();
        close(&dw, &want);
        // an empty inner dimension clears an overwritten output
        let mut z = vec![5.0; 4];
        matmul_xwt(&mut z, &[], &[], 2, 0, 2, false);
        assert_eq!(z, vec![0.0; 4]);
    }

    #[test]
    fn products_are_the_same_bits_on_any_thread_count() {
        // big enough to be split among threads; gemm must not split the sums
        let (n, k, m) = (512, 300, 600);
        let (x, w, dy) = (
            test_data(n * k, 5),
            test_data(m * k, 6),
            test_data(n * m, 7),
        );
        let run = || {
            let (mut y, mut dx, mut dw) = (vec![0f32; n * m], vec![0f32; n * k], vec![0f32; m * k]);
            matmul_xwt(&mut y, &x, &w, n, k, m, false);
            matmul_dyw(&mut dx, &dy, &w, n, k, m, false);
            matmul_dytx(&mut dw, &dy, &x, n, k, m);
            (y, dx, dw)
        };
        let pool = |t| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(t)
                .build()
                .unwrap()
        };
        let one = pool(1).install(run);
        assert!(pool(2).install(run) == one && pool(3).install(run) == one);
        assert!(pool(2).install(|| super::super::serial(run)) == one);
    }
}
