//! The input gradient through a frozen weight matrix kept in its stored ggml type:
//! `dX (N, K) (+)= dY (N, M) W` for W (M, K), as LoRA and QLoRA need for the base's matrices
//! (Hu et al. 2021; Dettmers et al. 2023 dequantize the 4-bit base block by block in the
//! backward the same way). W is never dequantized whole: each task dequantizes panels of
//! `PANEL` rows of W into a per-thread scratch and hands them to the `gemm` crate.
//!
//! Tasks own fixed chunks of `CHUNK` rows of dY / dX and walk W's panels in order, so each
//! element of dX is summed in an order that depends on the shapes only, never on the thread
//! count. Each task dequantizes all of W once; with 256-row chunks that is 1/256 of the
//! multiply-adds per row of dY.

use super::QMat;
use crate::layers::matmul::{gemm_strided, Parallelism};
use rayon::prelude::*;
use std::cell::RefCell;

/// Rows of W dequantized at a time.
const PANEL: usize = 128;
/// Rows of dY one task takes.
const CHUNK: usize = 256;

thread_local! {
    static PANEL_BUF: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// `dx (N, K) (+)= dy (N, M) w` for w (M, K) in any type QMat takes; adds into dx when `acc`.
pub fn matmul_t(w: &QMat, dy: &[f32], n: usize, dx: &mut [f32], acc: bool) {
    let (m, k) = (w.rows, w.cols);
    assert!(dy.len() >= n * m, "matmul_t: dy is (N, M)");
    assert!(dx.len() >= n * k, "matmul_t: dx is (N, K)");
    let dx = &mut dx[..n * k];
    let run = |c: usize, dxc: &mut [f32]| {
        let r0 = c * CHUNK;
        let rows = dxc.len() / k;
        crate::kernels::with_scratch(&PANEL_BUF, PANEL.min(m) * k, |buf| {
            for p0 in (0..m).step_by(PANEL) {
                let pr = PANEL.min(m - p0);
                for r in 0..pr {
                    w.dequantize_row(p0 + r, &mut buf[r * k..(r + 1) * k]);
                }
                let first = p0 == 0;
                // SAFETY: dst is dxc (rows, K) row-major; lhs(i, j) = dy[(r0 + i) * M + p0 + j]
                // for i < rows, j < pr, inside dy; rhs(j, kk) = buf[j * K + kk], inside buf.
                unsafe {
                    gemm_strided(
                        rows,
                        k,
                        pr,
                        dxc.as_mut_ptr(),
                        k as isize,
                        acc || !first,
                        dy.as_ptr().add(r0 * m + p0),
                        1,
                        m as isize,
                        buf.as_ptr(),
                        1,
                        k as isize,
                        1.0,
                        Parallelism::None,
                    )
                }
            }
        })
    };
    if n <= CHUNK || crate::layers::in_serial() {
        dx.chunks_mut(CHUNK * k)
            .enumerate()
            .for_each(|(c, d)| run(c, d));
    } else {
        dx.par_chunks_mut(CHUNK * k)
            .enumerate()
            .for_each(|(c, d)| run(c, d));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::{test_data, test_matrix};
    use crate::quant::GgmlType;

    /// dY W with W dequantized whole, in f64.
    fn reference(w: &QMat, dy: &[f32], n: usize) -> Vec<f32> {
        let (m, k) = (w.rows, w.cols);
        let mut wf = vec![0f32; m * k];
        for r in 0..m {
            w.dequantize_row(r, &mut wf[r * k..(r + 1) * k]);
        }
        let mut out = vec![0f32; n * k];
        for i in 0..n {
            for kk in 0..k {
                out[i * k + kk] = (0..m)
                    .map(|j| dy[i * m + j] as f64 * wf[j * k + kk] as f64)
                    .sum::<f64>() as f32;
            }
        }
        out
    }

    #[test]
    fn transposed_product_matches_the_dequantized_matrix() {
        for (ty, m, k, n) in [
            (GgmlType::Q4_1, 300, 64, 5),
            (GgmlType::Q8_0, 129, 96, 300),
            (GgmlType::Q4_K, 40, 256, 17),
            (GgmlType::F16, 7, 32, 513),
            (GgmlType::F32, 3, 5, 2),
        ] {
            let bytes = test_matrix(ty, m, k, 7);
            let w = QMat::new(ty, m, k, &bytes).expect("matrix");
            let dy = test_data(n * m, 3);
            let want = reference(&w, &dy, n);
            let mut got = vec![0.5f32; n * k];
            matmul_t(&w, &dy, n, &mut got, false);
            let tol = 1e-4 * (m as f32).sqrt();
            for (i, (g, r)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (g - r).abs() <= tol,
                    "{ty} {m}x{k} n={n} at {i}: {g} vs {r}"
                );
            }
            // accumulating adds onto what is there
            let mut acc = vec![1.0f32; n * k];
            matmul_t(&w, &dy, n, &mut acc, true);
            assert!(acc
                .iter()
                .zip(&got)
                .all(|(a, g)| (a - 1.0 - g).abs() <= 1e-5));
        }
    }

    #[test]
    fn transposed_product_has_the_same_bits_on_any_thread_count() {
        let (m, k, n) = (200, 64, 700);
        let bytes = test_matrix(GgmlType::Q4_0, m, k, 9);
        let w = QMat::new(GgmlType::Q4_0, m, k, &bytes).expect("matrix");
        let dy = test_data(n * m, 4);
        let mut a = vec![0f32; n * k];
        matmul_t(&w, &dy, n, &mut a, false);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .expect("pool");
        let mut b = vec![0f32; n * k];
        pool.install(|| matmul_t(&w, &dy, n, &mut b, false));
        assert_eq!(a, b);
    }
}
