//! Quantizing a row as llama-quantize does, with or without an importance matrix: ggml's
//! `quantize_<type>(src, dst, nrow, n_per_row, imatrix)` and the `quantize_row_<type>_impl`
//! behind it (ggml-quants.c, llama.cpp 0c1e570), bit for bit.
//!
//! An importance matrix gives each input column a weight (its mean squared activation over
//! some text, `toy imatrix`); the scale searches then minimise the error that reaches the
//! model's outputs rather than the error in the weights. Every element's weight is
//! `qw[j] * sqrt(sigma2 + x[j]^2)`, `sigma2` the row's (legacy types) or the super-block's
//! (k-quants) mean square. Without an importance matrix ggml uses the reference quantizers
//! (`quantize`), except for IQ4_NL and IQ4_XS, which have only the searched one.

use super::convert::{check_lengths, quantize, QuantError};
use super::float::{f16_at, f16_bytes};
use super::kquants_quantize::{
    finish_q3_k, finish_scales_mins_k, pack_2bit, pack_q4_k, pack_q5_k,
    quantize_block_q6_k_weighted,
};
use super::scale_search::{make_qkx2_quants, make_qp_quants, make_qx_quants, nearest_int};
use super::{iq2_quantize as iq2q, iq4, iq_quantize as iqq, GgmlType, QK_K};

/// Whether `quantize_row` searches `ty`'s scales under an importance matrix (the others
/// ignore one, as ggml does: Q8_0 and the float types).
pub fn uses_imatrix(ty: GgmlType) -> bool {
    use GgmlType::*;
    matches!(
        ty,
        Q4_0 | Q4_1
            | Q5_0
            | Q5_1
            | Q2_K
            | Q3_K
            | Q4_K
            | Q5_K
            | Q6_K
            | IQ4_NL
            | IQ4_XS
            | IQ2_XXS
            | IQ2_XS
            | IQ2_S
            | IQ3_XXS
            | IQ3_S
    )
}

/// One row `x` into `dst` (`ty.row_bytes(x.len())` bytes), as llama-quantize writes it;
/// `qw`, when given, holds one importance weight per element of `x`.
pub fn quantize_row(
    ty: GgmlType,
    x: &[f32],
    dst: &mut [u8],
    qw: Option<&[f32]>,
) -> Result<(), QuantError> {
    use GgmlType::*;
    if let Some(w) = qw {
        if w.len() != x.len() {
            return Err(QuantError::Weights {
                ty,
                n: x.len(),
                got: w.len(),
            });
        }
    }
    let qw = qw.filter(|_| uses_imatrix(ty));
    if qw.is_none() && !matches!(ty, IQ4_NL | IQ4_XS) {
        return quantize(ty, x, dst);
    }
    check_lengths(ty, x.len(), dst.len())?;
    match ty {
        IQ2_XXS | IQ2_XS if qw.is_none() => return Err(QuantError::NeedsWeights { ty }),
        IQ2_XXS | IQ2_XS | IQ2_S | IQ3_XXS | IQ3_S => {
            lattice(ty, x, dst, qw);
            return Ok(());
        }
        _ => {}
    }
    let (n, bytes) = (ty.block_size(), ty.type_size());
    let blocks = x.chunks_exact(n).zip(dst.chunks_exact_mut(bytes));
    let w = |i: usize| qw.map(|w| &w[i * n..(i + 1) * n]);
    match ty {
        IQ4_NL | IQ4_XS => {
            for (i, (x, y)) in blocks.enumerate() {
                iq4::quantize_iq4(x, y, w(i));
            }
        }
        Q4_0 | Q4_1 | Q5_0 | Q5_1 => {
            let sigma2 = mean_square(x);
            for (i, (x, y)) in blocks.enumerate() {
                legacy_block(ty, x, y, w(i).unwrap_or_default(), sigma2);
            }
        }
        _ => {
            for (i, (x, y)) in blocks.enumerate() {
                let x: &[f32; QK_K] = x.try_into().expect("whole super-blocks");
                let qw = w(i).unwrap_or_default();
                match ty {
                    Q2_K => q2_k(x, y.try_into().expect("Q2_K block"), qw),
                    Q3_K => q3_k(x, y.try_into().expect("Q3_K block"), qw),
                    Q4_K | Q5_K => q45_k(ty, x, y, qw),
                    _ => quantize_block_q6_k_weighted(x, y.try_into().expect("Q6_K"), Some(qw)),
                }
            }
        }
    }
    Ok(())
}

/// The lattice types' quantizers (`iq_quantize`, `iq2_quantize`); `qw` is there for the two
/// that need it (`quantize_row` checked).
fn lattice(ty: GgmlType, x: &[f32], dst: &mut [u8], qw: Option<&[f32]>) {
    match ty {
        GgmlType::IQ2_XXS => iq2q::quantize_iq2_xxs(x, dst, qw),
        GgmlType::IQ2_XS => iq2q::quantize_iq2_xs(x, dst, qw),
        GgmlType::IQ2_S => iq2q::quantize_iq2_s(x, dst, qw),
        GgmlType::IQ3_XXS => iqq::quantize_iq3_xxs(x, dst, qw),
        _ => iqq::quantize_iq3_s(x, dst, qw),
    }
}

fn mean_square(x: &[f32]) -> f32 {
    let mut sum = 0f32;
    for v in x {
        sum += v * v;
    }
    sum / x.len() as f32
}

/// `qw[j] * sqrt(sigma2 + x[j]^2)`: the importance weight scaled by the element's size.
fn element_weights<const N: usize>(x: &[f32], qw: &[f32], sigma2: f32) -> [f32; N] {
    std::array::from_fn(|j| qw[j] * (sigma2 + x[j] * x[j]).sqrt())
}

/// Two 4-bit quants a byte (`j` low, `j + 16` high) and, for the 5-bit types, the fifth
/// bits in a little-endian u32 before them.
fn pack_legacy(l: &[u8; 32], qs: &mut [u8], qh: Option<&mut [u8]>) {
    let mut h = 0u32;
    for j in 0..16 {
        qs[j] = (l[j] & 0x0f) | ((l[j + 16] & 0x0f) << 4);
        h |= (((l[j] & 0x10) >> 4) as u32) << j;
        h |= (((l[j + 16] & 0x10) >> 4) as u32) << (j + 16);
    }
    if let Some(qh) = qh {
        qh.copy_from_slice(&h.to_le_bytes());
    }
}

/// `quantize_row_q{4,5}_{0,1}_impl` for one 32-block.
fn legacy_block(ty: GgmlType, x: &[f32], y: &mut [u8], qw: &[f32], sigma2: f32) {
    use GgmlType::*;
    let weight: [f32; 32] = element_weights(x, qw, sigma2);
    let mut l = [0u8; 32];
    match ty {
        Q4_0 | Q5_0 => {
            let nmax = if ty == Q4_0 { 8 } else { 16 };
            let mut li = [0i8; 32];
            let d = make_qx_quants(x, &mut li, nmax, 1, Some(&weight));
            l = li.map(|q| q as u8);
            y[0..2].copy_from_slice(&f16_bytes(d));
        }
        _ => {
            let nmax = if ty == Q4_1 { 15 } else { 31 };
            let (d, the_min) = make_qkx2_quants(x, &weight, &mut l, nmax, -0.9, 0.05, 36, false);
            y[0..2].copy_from_slice(&f16_bytes(d));
            y[2..4].copy_from_slice(&f16_bytes(-the_min));
        }
    }
    match ty {
        Q4_0 => pack_legacy(&l, &mut y[2..18], None),
        Q4_1 => pack_legacy(&l, &mut y[4..20], None),
        Q5_0 => {
            let (qh, qs) = y[2..22].split_at_mut(4);
            pack_legacy(&l, qs, Some(qh));
        }
        _ => {
            let (qh, qs) = y[4..24].split_at_mut(4);
            pack_legacy(&l, qs, Some(qh));
        }
    }
}

/// `quantize_row_q2_K_impl`: 16 sub-blocks of 16 with scale and min, both to 4 bits by
/// `make_qp_quants` under the sub-blocks' summed weights.
fn q2_k(x: &[f32; QK_K], y: &mut [u8; 84], qw: &[f32]) {
    let sigma2 = mean_square(x);
    let mut l = [0u8; QK_K];
    let (mut scales, mut mins, mut sw) = ([0f32; 16], [0f32; 16], [0f32; 16]);
    for j in 0..16 {
        let r = 16 * j..16 * j + 16;
        let weight: [f32; 16] = element_weights(&x[r.clone()], &qw[r.clone()], sigma2);
        for w in weight {
            sw[j] += w;
        }
        (scales[j], mins[j]) =
            make_qkx2_quants(&x[r.clone()], &weight, &mut l[r], 3, -0.9, 0.05, 36, false);
    }
    let (mut ls, mut lm) = ([0u8; 16], [0u8; 16]);
    let dm = make_qp_quants(&scales, &mut ls, 15, &sw);
    let mm = make_qp_quants(&mins, &mut lm, 15, &sw);
    y[80..82].copy_from_slice(&f16_bytes(dm));
    y[82..84].copy_from_slice(&f16_bytes(mm));
    let (dm, mm) = (f16_at(y, 80), f16_at(y, 82));
    for (b, (s, m)) in y.iter_mut().zip(ls.iter().zip(&lm)) {
        *b = s | (m << 4);
    }
    for (j, &sc) in y[..16].iter().enumerate() {
        let d = dm * (sc & 0x0f) as f32;
        if d == 0.0 {
            continue;
        }
        let m = mm * (sc >> 4) as f32;
        for i in 16 * j..16 * j + 16 {
            l[i] = nearest_int((x[i] + m) / d).clamp(0, 3) as u8;
        }
    }
    pack_2bit(&l, &mut y[16..80]);
}

/// `quantize_row_q3_K_impl`: 16 symmetric sub-blocks of 16, their scales fit to 6 bits by
/// `make_qx_quants` under the sub-blocks' summed weights.
fn q3_k(x: &[f32; QK_K], y: &mut [u8; 110], qw: &[f32]) {
    let sigma2 = 2.0 * mean_square(x);
    let mut l = [0i8; QK_K];
    let (mut scales, mut sw) = ([0f32; 16], [0f32; 16]);
    for j in 0..16 {
        let r = 16 * j..16 * j + 16;
        let weight: [f32; 16] = element_weights(&x[r.clone()], &qw[r.clone()], sigma2);
        let mut sumw = 0f32;
        for w in weight {
            sumw += w;
        }
        sw[j] = sumw;
        scales[j] = make_qx_quants(&x[r.clone()], &mut l[r], 4, 1, Some(&weight));
    }
    y.fill(0);
    let mut ls = [0i8; 16];
    let d_block = make_qx_quants(&scales, &mut ls, 32, 1, Some(&sw));
    let sc = &mut y[96..108];
    for (j, &q) in ls.iter().enumerate() {
        let q = q as u8;
        if j < 8 {
            sc[j] = q & 0x0f;
        } else {
            sc[j - 8] |= (q & 0x0f) << 4;
        }
        sc[8 + j % 4] |= (q >> 4) << (2 * (j / 4));
    }
    y[108..110].copy_from_slice(&f16_bytes(d_block));
    finish_q3_k(x, &mut l, y);
}

/// `quantize_row_q{4,5}_K_impl`: 8 sub-blocks of 32 fit with scale and min under the
/// weights, then both to 6 bits by `make_qp_quants`.
fn q45_k(ty: GgmlType, x: &[f32; QK_K], y: &mut [u8], qw: &[f32]) {
    let nmax = if ty == GgmlType::Q4_K { 15 } else { 31 };
    let sigma2 = 2.0 * mean_square(x);
    let mut l = [0u8; QK_K];
    let (mut scales, mut mins, mut sw) = ([0f32; 8], [0f32; 8], [0f32; 8]);
    for j in 0..8 {
        let r = 32 * j..32 * j + 32;
        let weight: [f32; 32] = element_weights(&x[r.clone()], &qw[r.clone()], sigma2);
        let mut sumw = 0f32;
        for w in weight {
            sumw += w;
        }
        sw[j] = sumw;
        (scales[j], mins[j]) = make_qkx2_quants(
            &x[r.clone()],
            &weight,
            &mut l[r],
            nmax,
            -0.9,
            0.05,
            36,
            false,
        );
    }
    let (mut ls, mut lm) = ([0u8; 8], [0u8; 8]);
    let d_block = make_qp_quants(&scales, &mut ls, 63, &sw);
    let m_block = make_qp_quants(&mins, &mut lm, 63, &sw);
    let (ls, lm) = (ls.map(|q| q.min(63)), lm.map(|q| q.min(63)));
    finish_scales_mins_k(x, &mut l, y, nmax, (&ls, &lm), (d_block, m_block));
    match ty {
        GgmlType::Q4_K => pack_q4_k(&l, y.try_into().expect("Q4_K block")),
        _ => pack_q5_k(&l, y.try_into().expect("Q5_K block")),
    }
}
