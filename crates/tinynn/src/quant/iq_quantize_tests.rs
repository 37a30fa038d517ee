//! Bit-exactness of the lattice quantizers (`iq2_quantize`: IQ2_XXS, IQ2_XS, IQ2_S;
//! `iq_quantize`: IQ3_XXS, IQ3_S) against ggml's `quantize_iq2_xxs` / `quantize_iq2_xs` /
//! `quantize_iq2_s` / `quantize_iq3_xxs` / `quantize_iq3_s`, pinned as checksums made by
//! `scripts/iq-quant-reference.sh` (ggml-quants.c of llama.cpp 0c1e570 built as ggml-base
//! is, on the same rows and weights), and a check that the output decodes close to the input.

use super::iq2_quantize::{quantize_iq2_s, quantize_iq2_xs, quantize_iq2_xxs};
use super::iq_quantize::{quantize_iq3_s, quantize_iq3_xxs};
use super::reference_tests::{fnv1a, reference_row};
use super::weighted_tests::{importance, N_PER_ROW};
use super::GgmlType::{self, *};

type Quantizer = fn(&[f32], &mut [u8], Option<&[f32]>);

/// 4 rows from the first 4096 values of `reference_row` with the quantizers' zero cases:
/// super-block 3 all zero; of the other sub-blocks of 32, every 7th from the 2nd loses its
/// first 16 values, every 5th from the 2nd is zero, and every 5th from the 4th is scaled by
/// 1e-7. Same as scripts/iq-quant-reference.c.
fn edge_rows() -> Vec<f32> {
    let x = reference_row();
    (0..4 * N_PER_ROW)
        .map(|j| {
            let sub = j / 32;
            if j / 256 == 3 || sub % 5 == 1 || (sub % 7 == 2 && j % 32 < 16) {
                0.0
            } else if sub % 5 == 3 {
                x[j] * 1e-7
            } else {
                x[j]
            }
        })
        .collect()
}

/// Each row of `x` quantized on its own, the bytes concatenated.
fn quantize_rows(ty: GgmlType, f: Quantizer, x: &[f32], qw: Option<&[f32]>) -> Vec<u8> {
    let rb = N_PER_ROW / 256 * ty.type_size();
    let mut out = vec![0u8; x.len() / N_PER_ROW * rb];
    for (row, dst) in x.chunks_exact(N_PER_ROW).zip(out.chunks_exact_mut(rb)) {
        f(row, dst, qw);
    }
    out
}

/// The quantizers, and ggml's checksums of (reference rows, edge rows) x (without, with an
/// importance matrix); IQ2_XXS and IQ2_XS only with one (ggml asserts it).
#[allow(clippy::type_complexity)]
fn cases() -> [(GgmlType, Quantizer, [(Option<u64>, u64); 2]); 5] {
    [
        (
            IQ2_XXS,
            quantize_iq2_xxs,
            [(None, 0xa93de7ae72ff4147), (None, 0xac1d2e0232e5d505)],
        ),
        (
            IQ2_XS,
            quantize_iq2_xs,
            [(None, 0x6c5298aed832dbda), (None, 0x21e27d87b2340cab)],
        ),
        (
            IQ2_S,
            quantize_iq2_s,
            [
                (Some(0x8c65b21e56b82619), 0xb6efc437a33f59c9),
                (Some(0xba9b853bfee09256), 0x3b37bd05b5c8b475),
            ],
        ),
        (
            IQ3_XXS,
            quantize_iq3_xxs,
            [
                (Some(0xbb63fbf389be326f), 0xc081ca7cf5ce1930),
                (Some(0x50756bca70596758), 0x7ada71ccb905dc14),
            ],
        ),
        (
            IQ3_S,
            quantize_iq3_s,
            [
                (Some(0x88d8cad7101c5a66), 0x9ac41e90376e89d1),
                (Some(0x9f5fe89a9fdbcade), 0xe517fb185c4f73f9),
            ],
        ),
    ]
}

#[test]
fn lattice_quantizers_match_ggml_checksums() {
    let w = importance();
    let inputs = [("reference", reference_row()), ("edge", edge_rows())];
    for (ty, f, sums) in cases() {
        for ((name, x), (plain, weighted)) in inputs.iter().zip(sums) {
            let mut runs = vec![(Some(&w[..]), weighted)];
            if let Some(plain) = plain {
                runs.push((None, plain));
            }
            for (qw, want) in runs {
                let got = fnv1a(&quantize_rows(ty, f, x, qw));
                let case = if qw.is_some() { "with" } else { "without" };
                assert_eq!(
                    got, want,
                    "{ty} on the {name} rows {case} an importance matrix differs from ggml \
                     (got {got:#018x})"
                );
            }
        }
    }
}

/// Root mean square of `v` (in f64).
fn rms(v: impl Iterator<Item = f32>) -> f64 {
    let (sum, n) = v.fold((0f64, 0usize), |(s, n), a| (s + (a as f64).powi(2), n + 1));
    (sum / n as f64).sqrt()
}

#[test]
fn lattice_quantizers_decode_close_to_their_input() {
    let x = reference_row();
    let w = importance();
    for (ty, f, _) in cases() {
        for qw in [Some(&w[..]), None] {
            if qw.is_none() && matches!(ty, IQ2_XXS | IQ2_XS) {
                continue;
            }
            let bytes = quantize_rows(ty, f, &x, qw);
            let mut y = vec![0f32; x.len()];
            super::dequantize(ty, &bytes, &mut y).unwrap();
            let rows = x.chunks_exact(N_PER_ROW).zip(y.chunks_exact(N_PER_ROW));
            for (r, (xr, yr)) in rows.enumerate() {
                let signal = rms(xr.iter().copied());
                let err = rms(xr.iter().zip(yr).map(|(a, b)| a - b));
                // 2 to 3.5 bits: most rows land at 0.1 to 0.45 of the signal; the outlier
                // rows (one value in 29 ten times the rest) near 0.8 under the imatrix
                assert!(
                    err < signal,
                    "{ty} row {r}: RMS error {err:e} against RMS {signal:e}"
                );
            }
        }
    }
}

#[test]
#[should_panic(expected = "IQ2_XS needs importance weights")]
fn iq2_xs_needs_importance_weights() {
    quantize_iq2_xs(&[1.0; 256], &mut [0u8; 74], None);
}

#[test]
#[should_panic(expected = "IQ2_XXS needs importance weights")]
fn iq2_xxs_needs_importance_weights() {
    quantize_iq2_xxs(&[1.0; 256], &mut [0u8; 66], None);
}
