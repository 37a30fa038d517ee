//! Quantizing to the lattice types IQ2_XXS, IQ2_XS and IQ2_S: ports of ggml-quants.c's
//! `quantize_row_iq2_xxs_impl` / `quantize_iq2_xxs`, `quantize_row_iq2_xs_impl` /
//! `quantize_iq2_xs` and `quantize_row_iq2_s_impl` / `quantize_iq2_s`, llama.cpp 0c1e570, bit
//! for bit (float operations in ggml's order, no FMA), on the scale search and helpers of
//! `iq_quantize` (which describes the method) and the grids of `iq_quantize_init` (8 values
//! per point, levels 0..3).
//!
//! Per type: sub-block size, trial scales, and what the refit redoes:
//! - IQ2_XXS: 32 values; starts from `make_qp_quants`' scale `s` and tries
//!   `(5 + 0.1 is) / (3 s)` for `is` in -6..=6; refits every group. Needs an imatrix.
//! - IQ2_XS: 16 values; tries `(5 + 0.1 is) / max`, `is` in -9..=9; refits the groups off the
//!   grid. Needs an imatrix.
//! - IQ2_S: 16 values; as IQ2_XS, but all 8 sign bits are stored, and without an imatrix the
//!   weights are `sigma2 / 4 + x^2` (`sigma2` twice the mean square).
//!
//! Block layouts (256 values, `d` an f16 first):
//! - IQ2_XXS (66 B): `qs` a pair of u32 per 32 values: 4 grid index bytes (one per 8
//!   values); 4 x 7 sign bits | a 4-bit scale << 28.
//! - IQ2_XS (74 B): `qs` 32 u16 (9-bit grid index | 7 sign bits << 9) per group of 8,
//!   `scales` 8 bytes (two 4-bit scales, one per 16 values).
//! - IQ2_S (82 B): `qs` 32 low index bytes then 32 sign bytes (one per 8 values), `qh` 8 (the
//!   two high index bits of each group, four groups a byte), `scales` 8 (two 4-bit scales,
//!   one per 16 values).

use super::float::f16_bytes;
use super::iq_quantize::{
    check_row, cmax, max_of, scale4, signed_fit, sub_block_signs, sum_squares, weights, Refit,
    Search,
};
use super::iq_quantize_init::iq2_lattice;
use super::scale_search::{make_qp_quants, GROUP_MAX_EPS};
use super::QK_K;

/// Below this a sub-block of IQ2_S counts as all zero (`GROUP_MAX_EPS_IQ2_S`).
const GROUP_MAX_EPS_IQ2_S: f32 = 1e-8;

/// ggml's `quantize_iq2_xxs` on one row: `x` (whole blocks of 256) into `y` (66 bytes per
/// block) under importance weights `qw` (one per value).
///
/// # Panics
/// If `qw` is `None`: ggml's quantizer asserts "missing quantization weights" (IQ2_XXS is
/// only made with an importance matrix). Also if the lengths do not fit.
pub(crate) fn quantize_iq2_xxs(x: &[f32], y: &mut [u8], qw: Option<&[f32]>) {
    let qw = qw.expect("IQ2_XXS needs importance weights (ggml: missing quantization weights)");
    check_row(x, y, Some(qw), 66);
    let search = Search {
        lattice: iq2_lattice(256),
        kmax_q: 3,
        trials: 6,
        step: 0.1,
        refit: Refit::All,
    };
    for (ibl, (xbl, blk)) in x.chunks_exact(QK_K).zip(y.chunks_exact_mut(66)).enumerate() {
        let qwb = &qw[QK_K * ibl..QK_K * (ibl + 1)];
        quantize_block_iq2_xxs(&search, xbl, qwb, blk);
    }
}

/// One IQ2_XXS block; sub-blocks of 32 values, four grid points of 8 each.
fn quantize_block_iq2_xxs(search: &Search<8>, xbl: &[f32], qw: &[f32], blk: &mut [u8]) {
    blk.fill(0);
    let sigma2 = sum_squares(xbl) / QK_K as f32;
    let mut scales = [0f32; QK_K / 32];
    let mut q2 = [0u32; QK_K / 16];
    let (mut weight, mut waux, mut xval) = ([0f32; 32], [0f32; 32], [0f32; 32]);
    let mut l = [0i8; 32];
    let mut lqp = [0u8; 32];
    let mut max_scale = 0f32;
    for ib in 0..QK_K / 32 {
        let sub = 32 * ib..32 * (ib + 1);
        let xb = &xbl[sub.clone()];
        weights(xb, Some(&qw[sub]), sigma2, 0.0, &mut weight, &mut waux);
        let mut signs: [u8; 4] = sub_block_signs(xb, &weight, &mut xval, true);
        let max = max_of(&xval);
        if max < GROUP_MAX_EPS {
            scales[ib] = 0.0;
            continue;
        }
        // xval may hold one negative value per 8 (the kept sign); ggml passes it as is and
        // stores its negative level as a uint8_t, which make_qp_quants reproduces. The
        // levels are not used: the search below always replaces them.
        let start = make_qp_quants(&xval, &mut lqp, search.kmax_q + 1, &weight);
        let eff_max = start * search.kmax_q as f32;
        if eff_max <= 0.0 {
            scales[ib] = 0.0;
            continue;
        }
        let mut scale = search.scale_from(&xval, &weight, &waux, eff_max, start, &mut l);
        if scale < 0.0 {
            scale = -scale;
            signs = signs.map(|s| !s & 127);
        }
        for k in 0..4 {
            let index = search.lattice.index_of(&l[8 * k..8 * (k + 1)]);
            q2[2 * ib] |= (index as u32) << (8 * k);
            q2[2 * ib + 1] |= (signs[k] as u32) << (7 * k);
        }
        scales[ib] = scale;
        max_scale = cmax(max_scale, scale);
    }
    if max_scale == 0.0 {
        return;
    }
    let d = max_scale / 31.0;
    blk[0..2].copy_from_slice(&f16_bytes(d));
    let id = 1.0 / d;
    for (ib, &s) in scales.iter().enumerate() {
        q2[2 * ib + 1] |= (scale4(id, s) as u32) << 28;
    }
    for (dst, q) in blk[2..66].chunks_exact_mut(4).zip(q2) {
        dst.copy_from_slice(&q.to_le_bytes());
    }
}

/// ggml's `quantize_iq2_xs` on one row: `x` (whole blocks of 256) into `y` (74 bytes per
/// block) under importance weights `qw` (one per value).
///
/// # Panics
/// If `qw` is `None`: ggml's quantizer asserts "missing quantization weights" (IQ2_XS is
/// only made with an importance matrix). Also if the lengths do not fit.
pub(crate) fn quantize_iq2_xs(x: &[f32], y: &mut [u8], qw: Option<&[f32]>) {
    let qw = qw.expect("IQ2_XS needs importance weights (ggml: missing quantization weights)");
    check_row(x, y, Some(qw), 74);
    let search = Search {
        lattice: iq2_lattice(512),
        kmax_q: 3,
        trials: 9,
        step: 0.1,
        refit: Refit::OffGrid,
    };
    for (ibl, (xbl, blk)) in x.chunks_exact(QK_K).zip(y.chunks_exact_mut(74)).enumerate() {
        let qwb = &qw[QK_K * ibl..QK_K * (ibl + 1)];
        quantize_block_iq2_xs(&search, xbl, qwb, blk);
    }
}

/// One IQ2_XS block; sub-blocks of 16 values, two grid points of 8 each.
fn quantize_block_iq2_xs(search: &Search<8>, xbl: &[f32], qw: &[f32], blk: &mut [u8]) {
    blk.fill(0);
    let sigma2 = sum_squares(xbl) / QK_K as f32;
    let mut scales = [0f32; QK_K / 16];
    let mut q2 = [0u16; QK_K / 8];
    let (mut weight, mut waux, mut xval) = ([0f32; 16], [0f32; 16], [0f32; 16]);
    let mut l = [0i8; 16];
    let mut max_scale = 0f32;
    for ib in 0..QK_K / 16 {
        let xb = &xbl[16 * ib..16 * (ib + 1)];
        let qw = Some(&qw[16 * ib..16 * (ib + 1)]);
        weights(xb, qw, sigma2, 0.0, &mut weight, &mut waux);
        let fit = signed_fit::<_, 2>(
            search,
            xb,
            (&weight, &waux),
            &mut xval,
            &mut l,
            true,
            GROUP_MAX_EPS,
        );
        let Some((scale, signs)) = fit else {
            scales[ib] = 0.0;
            continue;
        };
        for k in 0..2 {
            let index = search.lattice.index_of(&l[8 * k..8 * (k + 1)]);
            q2[2 * ib + k] = index as u16 | (signs[k] as u16) << 9;
        }
        scales[ib] = scale;
        max_scale = cmax(max_scale, scale);
    }
    if max_scale == 0.0 {
        return;
    }
    let d = max_scale / 31.0;
    blk[0..2].copy_from_slice(&f16_bytes(d));
    let id = 1.0 / d;
    for (ib, &s) in scales.iter().enumerate() {
        blk[66 + ib / 2] |= scale4(id, s) << (4 * (ib % 2));
    }
    for (dst, q) in blk[2..66].chunks_exact_mut(2).zip(q2) {
        dst.copy_from_slice(&q.to_le_bytes());
    }
}

/// ggml's `quantize_iq2_s` on one row: `x` (whole blocks of 256) into `y` (82 bytes per
/// block), with importance weights `qw` (one per value) or without (then
/// `sigma2 / 4 + x^2`).
///
/// # Panics
/// If the lengths do not fit.
pub(crate) fn quantize_iq2_s(x: &[f32], y: &mut [u8], qw: Option<&[f32]>) {
    check_row(x, y, qw, 82);
    let search = Search {
        lattice: iq2_lattice(1024),
        kmax_q: 3,
        trials: 9,
        step: 0.1,
        refit: Refit::OffGrid,
    };
    for (ibl, (xbl, blk)) in x.chunks_exact(QK_K).zip(y.chunks_exact_mut(82)).enumerate() {
        let qwb = qw.map(|w| &w[QK_K * ibl..QK_K * (ibl + 1)]);
        quantize_block_iq2_s(&search, xbl, qwb, blk);
    }
}

/// One IQ2_S block; sub-blocks of 16 values, two grid points of 8 each (group `i8` of the
/// block is sub-block `i8 / 2`'s `i8 % 2`).
fn quantize_block_iq2_s(search: &Search<8>, xbl: &[f32], qw: Option<&[f32]>, blk: &mut [u8]) {
    blk.fill(0);
    let (qs, rest) = blk[2..].split_at_mut(64);
    let (qh, _) = rest.split_at_mut(8);
    let sigma2 = 2.0 * sum_squares(xbl) / QK_K as f32;
    let mut scales = [0f32; QK_K / 16];
    let (mut weight, mut waux, mut xval) = ([0f32; 16], [0f32; 16], [0f32; 16]);
    let mut l = [0i8; 16];
    let mut max_scale = 0f32;
    let plain = 0.25 * sigma2;
    for (ib, scale_ib) in scales.iter_mut().enumerate() {
        let sub = 16 * ib..16 * (ib + 1);
        let xb = &xbl[sub.clone()];
        let qw = qw.map(|w| &w[sub]);
        weights(xb, qw, sigma2, plain, &mut weight, &mut waux);
        let fit = signed_fit::<_, 2>(
            search,
            xb,
            (&weight, &waux),
            &mut xval,
            &mut l,
            false,
            GROUP_MAX_EPS_IQ2_S,
        );
        let Some((scale, signs)) = fit else {
            *scale_ib = 0.0;
            continue;
        };
        for k in 0..2 {
            let index = search.lattice.index_of(&l[8 * k..8 * (k + 1)]);
            let i8 = 2 * ib + k;
            qs[i8] = index as u8;
            qh[i8 / 4] |= ((index >> 8) as u8) << (2 * (i8 % 4));
            qs[QK_K / 8 + i8] = signs[k];
        }
        *scale_ib = scale;
        max_scale = cmax(max_scale, scale);
    }
    if max_scale == 0.0 {
        return;
    }
    let d = max_scale / 31.0;
    blk[0..2].copy_from_slice(&f16_bytes(d * 0.9875));
    let id = 1.0 / d;
    for (ib, pair) in scales.chunks_exact(2).enumerate() {
        blk[74 + ib] = scale4(id, pair[0]) | scale4(id, pair[1]) << 4;
    }
}
