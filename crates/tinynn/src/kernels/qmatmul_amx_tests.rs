//! `qmatmul_amx` against the product it stands for: X and the dequantized W each rounded to
//! bf16, summed in f64; through `qmatmul::matmul` and `matmul_many`, plain and repacked.

use super::*;
use crate::kernels::bf16gemm::round_bf16;
use crate::kernels::qmatmul::{matmul, matmul_many};
use crate::kernels::repack::Packed;
use crate::kernels::{test_data as data, test_matrix};

/// Y (T, N) = bf16(X) bf16(W)^T in f64, and per output the sum of |terms| (the scale the
/// f32 sums' rounding is measured against).
fn reference(w: &QMat, x: &[f32], t: usize) -> (Vec<f64>, Vec<f64>) {
    let (n, k) = (w.rows, w.cols);
    let mut row = vec![0f32; k];
    let (mut y, mut scale) = (vec![0f64; t * n], vec![0f64; t * n]);
    for j in 0..n {
        dequantize_row(w, j, &mut row);
        for i in 0..t {
            for kk in 0..k {
                let p = round_bf16(x[i * k + kk]) as f64 * round_bf16(row[kk]) as f64;
                y[i * n + j] += p;
                scale[i * n + j] += p.abs();
            }
        }
    }
    (y, scale)
}

fn assert_close(got: &[f32], w: &QMat, x: &[f32], t: usize, what: &str) {
    let (want, scale) = reference(w, x, t);
    for (i, ((&g, &r), &s)) in got.iter().zip(&want).zip(&scale).enumerate() {
        assert!(
            (g as f64 - r).abs() <= 1e-5 * (1.0 + s),
            "{what} i={i}: {g} vs {r} (terms {s})"
        );
    }
}

#[test]
fn prefill_batches_on_amx_are_the_bf16_product_of_the_dequantized_weights() {
    let types = [
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::Q3_K,
    ];
    let probe = test_matrix(GgmlType::Q4_K, 1, 256, 1);
    let probe = QMat::new(GgmlType::Q4_K, 1, 256, &probe).unwrap();
    if !applies(&[probe], AMX_BATCH) {
        // no AMX here (or TOY_NO_AMX): prefill keeps the integer kernels, checked elsewhere
        assert_ne!(
            Kernel::best(),
            Some(Kernel::Amx),
            "AMX is here but prefill skips it"
        );
        eprintln!("no AMX-BF16 on this CPU: qmatmul_amx is not used, nothing to compare");
        return;
    }
    assert!(
        !applies(&[probe], AMX_BATCH - 1),
        "smaller batches keep decode's kernels"
    );
    for ty in types {
        for (n, k, t) in [(100, 512, AMX_BATCH), (33, 256, AMX_BATCH + 7)] {
            let bytes = test_matrix(ty, n, k, 3);
            let w = QMat::new(ty, n, k, &bytes).unwrap();
            let x = data(t * k, 5);
            let mut y = vec![0f32; t * n];
            matmul(&w, &x, t, &mut y);
            assert_close(&y, &w, &x, t, &format!("{ty} n={n} k={k} t={t}"));
            // repacked, with the original bytes gone: the repacked copy is what is read
            let Some(p) = Packed::new(&w) else { continue };
            let zeros = vec![0u8; bytes.len()];
            let released = QMat {
                packed: Some(&p),
                ..QMat::new(ty, n, k, &zeros).unwrap()
            };
            let mut yp = vec![0f32; t * n];
            matmul(&released, &x, t, &mut yp);
            assert_eq!(yp, y, "{ty} repacked");
        }
    }
}

#[test]
fn matmul_many_on_amx_equals_separate_products() {
    let (k, t) = (512, AMX_BATCH + 1);
    let mats: Vec<Vec<u8>> = [(GgmlType::Q4_K, 96usize), (GgmlType::Q6_K, 200)]
        .iter()
        .map(|&(ty, n)| test_matrix(ty, n, k, n as u64))
        .collect();
    let ws = [
        QMat::new(GgmlType::Q4_K, 96, k, &mats[0]).unwrap(),
        QMat::new(GgmlType::Q6_K, 200, k, &mats[1]).unwrap(),
    ];
    let x = data(t * k, 9);
    let (mut a, mut b) = (vec![0f32; t * 96], vec![0f32; t * 200]);
    matmul_many(&ws, &x, t, &mut [&mut a, &mut b]);
    let (mut a1, mut b1) = (vec![0f32; t * 96], vec![0f32; t * 200]);
    matmul(&ws[0], &x, t, &mut a1);
    matmul(&ws[1], &x, t, &mut b1);
    assert_eq!((a, b), (a1, b1));
}
