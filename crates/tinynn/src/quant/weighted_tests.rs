//! Bit-exactness of `quantize_row` against ggml's `quantize_<type>` with and without an
//! importance matrix, and of the lattice (IQ1/IQ2/IQ3) decoders, pinned as checksums made by
//! `scripts/quant-reference.sh` (ggml-quants.c
//! of llama.cpp 0c1e570 built as ggml-base is, on the same rows and weights).

use super::reference_tests::{fnv1a, reference_row, XorShift};
use super::{quantize_row, GgmlType};
use GgmlType::*;

pub(super) const N_PER_ROW: usize = 1024;

/// Weights spread over four decades, with a zero every 97th column (an unused input).
pub(super) fn importance() -> Vec<f32> {
    let mut rng = XorShift(0x9e37_79b9);
    (0..N_PER_ROW)
        .map(|j| {
            let u = rng.next_f32();
            if j % 97 == 5 {
                0.0
            } else {
                10f32.powf(2.0 * u) * (1.0 + 0.01 * (j % 7) as f32)
            }
        })
        .collect()
}

#[test]
fn rows_match_ggml_with_and_without_an_importance_matrix() {
    let x = reference_row();
    let w = importance();
    let want = [
        (Q4_0, 0x49edef57594c5525u64, 0x221ecd998838f397u64),
        (Q4_1, 0xa587d162317915b8, 0x840ac62c65584bd2),
        (Q5_0, 0x585d35035370bc44, 0x3507e03ab18cb4c7),
        (Q5_1, 0x7043bee025131b12, 0x61b47ba3edeceb98),
        (Q8_0, 0x5a9da536297cb0a1, 0x5a9da536297cb0a1),
        (Q2_K, 0x80561b37fb0d8062, 0x10464aea2d0216c8),
        (Q3_K, 0x8d91d9eb20ed0e13, 0x49901e387f6ac354),
        (Q4_K, 0x49ba3c97bb1650fe, 0x0c2f0db56d207ea7),
        (Q5_K, 0x15079b909688081e, 0x9278cae0d650774b),
        (Q6_K, 0x807f28c7f08a89fa, 0x88db078c3d67f202),
        (IQ4_NL, 0x4472fe332101da34, 0xe34b03171d0e599e),
        (IQ4_XS, 0x74c2965ef6c641d6, 0xfab28fe1a3c10877),
    ];
    for (ty, plain, weighted) in want {
        let rb = ty.row_bytes(N_PER_ROW as u64).unwrap() as usize;
        for (qw, hash) in [(None, plain), (Some(&w[..]), weighted)] {
            let mut out = vec![0u8; rb * x.len() / N_PER_ROW];
            for (row, dst) in x.chunks_exact(N_PER_ROW).zip(out.chunks_exact_mut(rb)) {
                quantize_row(ty, row, dst, qw).unwrap();
            }
            let case = if qw.is_some() { "with" } else { "without" };
            assert_eq!(
                fnv1a(&out),
                hash,
                "{ty} {case} an importance matrix differs from ggml"
            );
        }
    }
}

#[test]
fn a_wrong_length_importance_matrix_is_an_error() {
    let x = vec![0.5f32; 256];
    let mut out = vec![0u8; 144];
    let err = quantize_row(Q4_K, &x, &mut out, Some(&[1.0; 255])).unwrap_err();
    assert!(
        err.to_string().contains("255 weights for a row of 256"),
        "{err}"
    );
}

#[test]
fn lattice_types_decode_as_ggml() {
    let want = [
        (IQ2_XXS, 0xe3be8cebca737a57u64),
        (IQ2_XS, 0xac76f1b417e7a076),
        (IQ2_S, 0xb487045f6adcb52c),
        (IQ3_XXS, 0x6c2ea2f196b077ae),
        (IQ3_S, 0xc6fc21ec54d24b7a),
        (IQ1_S, 0x82231fb33646a596),
        (IQ1_M, 0x98e7a8006db71cef),
    ];
    for (ty, hash) in want {
        // 64 blocks of random bytes, the f16 scale's exponent kept below all ones
        let mut rng = XorShift(0x51ed_0000 + ty as u32);
        let size = ty.type_size();
        let mut blocks: Vec<u8> = (0..64 * size)
            .map(|_| (rng.next_u32() >> 11) as u8)
            .collect();
        for b in blocks.chunks_mut(size) {
            match ty {
                IQ1_M => b[55] &= 0xbf,
                _ => b[1] &= 0xbb,
            }
        }
        let mut y = vec![0f32; 64 * 256];
        super::dequantize(ty, &blocks, &mut y).unwrap();
        let bytes: Vec<u8> = y.iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(
            fnv1a(&bytes),
            hash,
            "{ty} differs from ggml's dequantize_row_*"
        );
    }
}
