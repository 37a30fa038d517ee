//! Tests of the k-quant integer row dots (`qdot_k`): the Q8_K quantizer against the block
//! quantizer checked against llama.cpp, each AVX2 kernel against its scalar reference (bit
//! for bit: same lanes, same f32 order), and each against plain f32 products.

use super::qdot_k::*;
use super::test_data as data;
use crate::quant::kquants::get_scale_min_k4;
use crate::quant::kquants_quantize::quantize_block_q8_k;
use crate::quant::{dequantize, quantize, GgmlType, QK_K};

type Dot = fn(&[u8], &Q8KRow) -> f32;

const KERNELS: [(GgmlType, Dot, Dot); 3] = [
    (GgmlType::Q4_K, dot_q4_k, dot_q4_k_ref),
    (GgmlType::Q5_K, dot_q5_k, dot_q5_k_ref),
    (GgmlType::Q6_K, dot_q6_k, dot_q6_k_ref),
];

fn quantized_row(ty: GgmlType, w: &[f32]) -> Vec<u8> {
    let mut row = vec![0u8; ty.row_bytes(w.len() as u64).unwrap() as usize];
    quantize(ty, w, &mut row).unwrap();
    row
}

/// Bytes from xorshift, with each block's f16 scales set to small normal values (random
/// bits would give inf / NaN), so every bit pattern of quants and sub-block scales is hit.
fn random_row(ty: GgmlType, k: usize, seed: u64) -> Vec<u8> {
    let size = ty.type_size();
    let vals = data(k / QK_K * size, seed);
    let mut row: Vec<u8> = vals.iter().map(|v| ((v + 1.0) * 128.0) as u8).collect();
    let scale_at: &[usize] = if ty == GgmlType::Q6_K {
        &[208]
    } else {
        &[0, 2]
    };
    for blk in row.chunks_exact_mut(size) {
        for (n, &at) in scale_at.iter().enumerate() {
            let v = half::f16::from_f32(0.01 * (n + 1) as f32 + blk[at + 1] as f32 * 1e-4);
            blk[at..at + 2].copy_from_slice(&v.to_le_bytes());
        }
    }
    row
}

#[test]
fn q8k_act_equals_block_quantizer() {
    let mut x = data(3 * QK_K, 9);
    x[300] = -3.0; // the extreme is negative in block 1
    x[512..768].fill(0.0); // block 2 is all zero
    let mut a = Q8KAct::default();
    a.quantize(&x);
    for (b, blk) in x.chunks_exact(QK_K).enumerate() {
        let mut y = [0u8; 292];
        quantize_block_q8_k(blk.try_into().unwrap(), &mut y);
        assert_eq!(a.d[b].to_le_bytes(), y[0..4], "block {b}: d");
        let qs: Vec<u8> = a.qs[b * QK_K..(b + 1) * QK_K]
            .iter()
            .map(|&q| q as u8)
            .collect();
        assert_eq!(qs, y[4..260], "block {b}: qs");
        let bs: Vec<u8> = a.bsums[b * 16..(b + 1) * 16]
            .iter()
            .flat_map(|s| s.to_le_bytes())
            .collect();
        assert_eq!(bs, y[260..292], "block {b}: bsums");
    }
    assert_eq!(a.qs[300], -127); // the extreme maps to -127 (not -128)
}

#[test]
fn packed_scales_and_mins_unpack_as_get_scale_min_k4() {
    for seed in 0..20 {
        let s: Vec<u8> = data(12, seed)
            .iter()
            .map(|v| ((v + 1.0) * 128.0) as u8)
            .collect();
        let sm = scales_mins_k4(&s);
        for j in 0..8 {
            assert_eq!(
                (sm[j], sm[8 + j]),
                get_scale_min_k4(j, &s),
                "seed {seed} j {j}"
            );
        }
    }
}

#[test]
fn fast_k_quant_dots_equal_their_references_bit_for_bit() {
    for (ty, fast, slow) in KERNELS {
        for k in [256, 512, 1536] {
            let x = data(k, 3 + k as u64);
            let mut a = Q8KAct::default();
            a.quantize(&x);
            for row in [
                quantized_row(ty, &data(k, k as u64)),
                random_row(ty, k, 7 + k as u64),
            ] {
                let (f, s) = (fast(&row, &a.row()), slow(&row, &a.row()));
                assert_eq!(f.to_bits(), s.to_bits(), "{ty} k={k}: {f} vs {s}");
            }
        }
    }
}

#[test]
fn k_quant_dots_equal_the_product_of_dequantized_values() {
    for (ty, fast, _) in KERNELS {
        for k in [256, 512, 1536] {
            let x = data(k, 11 + k as u64);
            let mut a = Q8KAct::default();
            a.quantize(&x);
            for row in [
                quantized_row(ty, &data(k, k as u64)),
                random_row(ty, k, 5 + k as u64),
            ] {
                let mut wf = vec![0f32; k];
                dequantize(ty, &row, &mut wf).unwrap();
                let got = fast(&row, &a.row()) as f64;
                // against the activations as quantized: equal up to f32 rounding
                let xq = (0..k).map(|i| a.d[i / QK_K] as f64 * a.qs[i] as f64);
                let terms: Vec<f64> = wf.iter().zip(xq).map(|(w, x)| *w as f64 * x).collect();
                let want: f64 = terms.iter().sum();
                let size: f64 = terms.iter().map(|t| t.abs()).sum();
                assert!(
                    (got - want).abs() <= 1e-5 * size,
                    "{ty} k={k}: {got} vs {want}"
                );
                // against the original activations: off by Q8_K's rounding only
                let exact: f64 = wf.iter().zip(&x).map(|(w, x)| *w as f64 * *x as f64).sum();
                assert!(
                    (got - exact).abs() < 0.02 * size,
                    "{ty} k={k}: {got} vs {exact}"
                );
            }
        }
    }
}
