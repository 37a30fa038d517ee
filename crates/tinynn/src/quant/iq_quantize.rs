//! Quantizing to the lattice types IQ3_XXS and IQ3_S: ports of ggml-quants.c's
//! `quantize_row_iq3_xxs_impl` / `quantize_iq3_xxs` and `quantize_row_iq3_s_impl` /
//! `quantize_iq3_s` (block size 32), llama.cpp 0c1e570, bit for bit: the float operations run
//! in ggml's order (Rust never fuses them into FMAs, and ggml-base is built without `-march`,
//! so neither does ggml). Also the scale search and helpers they share with the IQ2 types
//! (`iq2_quantize`).
//!
//! All the lattice quantizers work the same way on each sub-block (16 or 32 values for IQ2,
//! 32 for IQ3): take magnitudes and signs, then try a range of scales; at each, round every
//! group (8 values for IQ2, 4 for IQ3) to levels, and where that is not a grid point take the
//! nearest listed neighbour (`iq_quantize_init`); keep the scale with the best weighted
//! least-squares fit, refit it once, and store the points' indices. A super-block scale `d`
//! and 4-bit sub-block scales come last. Block layouts (256 values, `d` an f16 first):
//! - IQ3_XXS (98 B): `qs` 64 grid indices (one per 4 values), then 8 u32 (per 32 values:
//!   4 x 7 sign bits, a 4-bit scale << 28).
//! - IQ3_S (110 B): `qs` 64 low index bytes, `qh` 8 (the ninth bits), `signs` 32 (one byte per
//!   8 values), `scales` 4 (two 4-bit scales, one per 32 values).
//!
//! IQ3_XXS (like IQ2_XXS and IQ2_XS) stores 7 sign bits per 8 values: the eighth is implied
//! by an even count of negatives, so where the count is odd the least important value keeps
//! its sign.

use super::float::f16_bytes;
use super::iq_quantize_init::{iq3_lattice, Lattice, Lookup};
use super::scale_search::nearest_int;
use super::QK_K;

/// Below this a sub-block of IQ3_XXS counts as all zero (`GROUP_MAX_EPS_IQ3_XXS`).
const GROUP_MAX_EPS_IQ3_XXS: f32 = 1e-8;

/// The largest sub-block: 32 values.
const MAX_SUB: usize = 32;

/// ggml's `MAX(a, b)`: `a > b ? a : b`.
#[inline(always)]
pub(super) fn cmax(a: f32, b: f32) -> f32 {
    if a > b {
        a
    } else {
        b
    }
}

/// Which groups of a sub-block the search rounds again at its best scale (if positive).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Refit {
    /// Those the best trial had off the grid, if any (IQ2_XS, IQ2_S, IQ3_XXS).
    OffGrid,
    /// All of them, if the best trial had any off the grid or no trial won (IQ3_S).
    AllIfOffGrid,
    /// All of them, always (IQ2_XXS).
    All,
}

/// How one type searches a sub-block's scale.
pub(super) struct Search<'a, const N: usize> {
    pub(super) lattice: &'a Lattice<N>,
    /// Levels run 0..kmax_q (values `2 l + 1`).
    pub(super) kmax_q: i32,
    /// Trial scales `(2 kmax_q - 1 + is * step) / max` for `is` in `-trials..=trials`.
    pub(super) trials: i32,
    pub(super) step: f32,
    pub(super) refit: Refit,
}

impl<const N: usize> Search<'_, N> {
    /// Rounds group `k` (values `N k..N (k + 1)`) of `xval` at inverse scale `id` to levels
    /// in `l`, replaced by the best neighbour at `scale` when not a grid point; true if it
    /// was one.
    fn snap(
        &self,
        k: usize,
        id: f32,
        scale: f32,
        xval: &[f32],
        waux: &[f32],
        l: &mut [i8],
    ) -> bool {
        let g = N * k..N * (k + 1);
        let (xval, waux, l) = (&xval[g.clone()], &waux[g.clone()], &mut l[g]);
        for (li, &x) in l.iter_mut().zip(xval) {
            let q = nearest_int(0.5 * (id * x - 1.0));
            *li = q.clamp(0, self.kmax_q - 1) as i8;
        }
        match self.lattice.lookup(self.lattice.pack(l)) {
            Lookup::OnGrid(_) => true,
            Lookup::Off(candidates) => {
                self.lattice
                    .best_neighbour(candidates, xval, waux, scale, l);
                false
            }
        }
    }

    /// The sub-block's scale (negative only in theory; ggml then flips it and the signs),
    /// with `l` the levels of its grid points. `max` is the largest of `xval`, not zero;
    /// `weight` the importance of each value and `waux` its square root.
    pub(super) fn scale(
        &self,
        xval: &[f32],
        weight: &[f32],
        waux: &[f32],
        max: f32,
        l: &mut [i8],
    ) -> f32 {
        let top = (2 * self.kmax_q - 1) as f32;
        self.scale_from(xval, weight, waux, max, max / top, l)
    }

    /// [`Search::scale`] with the trial scales over `max` (not necessarily the largest of
    /// `xval`) and `start` the scale kept if no trial fits (IQ2_XXS starts from
    /// `make_qp_quants`).
    pub(super) fn scale_from(
        &self,
        xval: &[f32],
        weight: &[f32],
        waux: &[f32],
        max: f32,
        start: f32,
        l: &mut [i8],
    ) -> f32 {
        let n = xval.len();
        let groups = n / N;
        let top = (2 * self.kmax_q - 1) as f32;
        l.fill(0);
        let mut best = 0f32;
        let mut scale = start;
        let mut on_grid = [self.refit == Refit::OffGrid; MAX_SUB / 4];
        let mut on_grid_aux = [true; MAX_SUB / 4];
        let mut laux = [0i8; MAX_SUB];
        for is in -self.trials..=self.trials {
            let id = (top + is as f32 * self.step) / max;
            let this_scale = 1.0 / id;
            for (k, on) in on_grid_aux[..groups].iter_mut().enumerate() {
                *on = self.snap(k, id, this_scale, xval, waux, &mut laux);
            }
            let (sumqx, sumq2) = fit(xval, weight, &laux[..n]);
            if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
                scale = sumqx / sumq2;
                best = scale * sumqx;
                l.copy_from_slice(&laux[..n]);
                on_grid = on_grid_aux;
            }
        }
        let refit = self.refit == Refit::All || on_grid[..groups].iter().any(|&g| !g);
        if refit && scale > 0.0 {
            let id = 1.0 / scale;
            for (k, &on) in on_grid[..groups].iter().enumerate() {
                if !(self.refit == Refit::OffGrid && on) {
                    self.snap(k, id, scale, xval, waux, l);
                }
            }
            let (sumqx, sumq2) = fit(xval, weight, l);
            if sumq2 > 0.0 {
                scale = sumqx / sumq2;
            }
        }
        scale
    }
}

/// Weighted sums `sum w x q` and `sum w q^2` for values `q = 2 l + 1`.
fn fit(xval: &[f32], weight: &[f32], l: &[i8]) -> (f32, f32) {
    let (mut sumqx, mut sumq2) = (0f32, 0f32);
    for ((&x, &w), &li) in xval.iter().zip(weight).zip(l) {
        let q = (2 * li as i32 + 1) as f32;
        sumqx += w * x * q;
        sumq2 += w * q * q;
    }
    (sumqx, sumq2)
}

/// ggml's importance of each value of a sub-block: `qw sqrt(sigma2 + x^2)` under an
/// importance matrix, else `plain + x^2` (`plain` 0 for IQ3, `sigma2 / 4` for IQ2_S; adding
/// +0 leaves `x^2` as it is); writes `weight` and its square root `waux`.
pub(super) fn weights(
    xb: &[f32],
    qw: Option<&[f32]>,
    sigma2: f32,
    plain: f32,
    weight: &mut [f32],
    waux: &mut [f32],
) {
    match qw {
        Some(qw) => {
            for ((w, &q), &x) in weight.iter_mut().zip(qw).zip(xb) {
                *w = q * (sigma2 + x * x).sqrt();
            }
        }
        None => {
            for (w, &x) in weight.iter_mut().zip(xb) {
                *w = plain + x * x;
            }
        }
    }
    for (a, &w) in waux.iter_mut().zip(weight.iter()) {
        *a = w.sqrt();
    }
}

/// `|x|` of 8 values into `xval`, returning their sign bits; with `even`, an odd count of
/// negatives leaves the value of least `w x^2` negated in `xval` (and its bit cleared), and
/// only the low 7 bits are returned.
fn signs8(xb: &[f32], weight: &[f32], xval: &mut [f32], even: bool) -> u8 {
    let mut s = 0u8;
    let mut nflip = 0;
    for i in 0..8 {
        if xb[i] >= 0.0 {
            xval[i] = xb[i];
        } else {
            xval[i] = -xb[i];
            nflip += 1;
            s |= 1 << i;
        }
    }
    if !even {
        return s;
    }
    if nflip % 2 == 1 {
        let mut imin = 0;
        let mut min = weight[0] * xb[0] * xb[0];
        for i in 1..8 {
            let ax = weight[i] * xb[i] * xb[i];
            if ax < min {
                min = ax;
                imin = i;
            }
        }
        xval[imin] = -xval[imin];
        s ^= 1 << imin;
    }
    s & 127
}

/// [`signs8`] over each 8 values of a sub-block of `8 G`.
pub(super) fn sub_block_signs<const G: usize>(
    xb: &[f32],
    weight: &[f32],
    xval: &mut [f32],
    even: bool,
) -> [u8; G] {
    let mut signs = [0u8; G];
    for (k, s) in signs.iter_mut().enumerate() {
        let g = 8 * k..8 * (k + 1);
        *s = signs8(&xb[g.clone()], &weight[g.clone()], &mut xval[g], even);
    }
    signs
}

/// `sum x^2` of a super-block, in order.
pub(super) fn sum_squares(xbl: &[f32]) -> f32 {
    xbl.iter().fold(0f32, |s, &x| s + x * x)
}

/// The largest of `xval` (ggml's `MAX` fold from the first).
/// One sub-block's fit: its signs (folded out into `xval`, `parity` as for
/// `sub_block_signs`) and the search's scale made positive, the signs flipped with it (ggml's
/// `!s`, within the 7 stored bits under parity); `None` where the largest |x| is below `zero`
/// (the sub-block counts as all zero; `f32::from_bits(1)` asks for exactly zero).
pub(super) fn signed_fit<const N: usize, const S: usize>(
    search: &Search<N>,
    xb: &[f32],
    (weight, waux): (&[f32], &[f32]),
    xval: &mut [f32],
    l: &mut [i8],
    parity: bool,
    zero: f32,
) -> Option<(f32, [u8; S])> {
    let signs: [u8; S] = sub_block_signs(xb, weight, xval, parity);
    let max = max_of(xval);
    if max < zero {
        return None;
    }
    let scale = search.scale(xval, weight, waux, max, l);
    if scale >= 0.0 {
        return Some((scale, signs));
    }
    let mask = if parity { 127 } else { 255 };
    Some((-scale, signs.map(|s| !s & mask)))
}

pub(super) fn max_of(xval: &[f32]) -> f32 {
    xval[1..].iter().fold(xval[0], |m, &x| cmax(m, x))
}

/// A 4-bit sub-block scale under super-block inverse scale `id` (values `2 l + 1`).
pub(super) fn scale4(id: f32, scale: f32) -> u8 {
    nearest_int(0.5 * (id * scale - 1.0)).clamp(0, 15) as u8
}

/// Checks a row's shapes as ggml's quantize_<type> asserts them.
pub(super) fn check_row(x: &[f32], y: &[u8], qw: Option<&[f32]>, type_size: usize) {
    assert!(
        x.len().is_multiple_of(QK_K),
        "a row of {} is not whole blocks of {QK_K}",
        x.len()
    );
    assert_eq!(
        y.len(),
        x.len() / QK_K * type_size,
        "output bytes for a row of {}",
        x.len()
    );
    if let Some(qw) = qw {
        assert_eq!(
            qw.len(),
            x.len(),
            "importance weights for a row of {}",
            x.len()
        );
    }
}

/// The row's importance weights for super-block `ibl`, if any.
pub(super) fn block_weights(qw: Option<&[f32]>, ibl: usize) -> Option<&[f32]> {
    qw.map(|w| &w[QK_K * ibl..QK_K * (ibl + 1)])
}

/// ggml's `quantize_iq3_xxs` on one row: `x` (whole blocks of 256) into `y` (98 bytes per
/// block), with importance weights `qw` (one per value) or without (then `x^2`).
///
/// # Panics
/// If the lengths do not fit.
pub(crate) fn quantize_iq3_xxs(x: &[f32], y: &mut [u8], qw: Option<&[f32]>) {
    check_row(x, y, qw, 98);
    let search = Search {
        lattice: iq3_lattice(256),
        kmax_q: 8,
        trials: 15,
        step: 0.2,
        refit: Refit::OffGrid,
    };
    for (ibl, (xbl, blk)) in x.chunks_exact(QK_K).zip(y.chunks_exact_mut(98)).enumerate() {
        quantize_block_iq3_xxs(&search, xbl, block_weights(qw, ibl), blk);
    }
}

/// One IQ3_XXS block (`quantize_row_iq3_xxs_impl` with grid size 256); sub-blocks of 32
/// values, 8 grid points of 4 each.
fn quantize_block_iq3_xxs(search: &Search<4>, xbl: &[f32], qw: Option<&[f32]>, blk: &mut [u8]) {
    blk.fill(0);
    let sigma2 = 2.0 * sum_squares(xbl) / QK_K as f32;
    let mut scales = [0f32; QK_K / 32];
    let mut scales_and_signs = [0u32; QK_K / 32];
    let (mut weight, mut waux, mut xval) = ([0f32; 32], [0f32; 32], [0f32; 32]);
    let mut l = [0i8; 32];
    let mut max_scale = 0f32;
    for ib in 0..QK_K / 32 {
        let sub = 32 * ib..32 * (ib + 1);
        let xb = &xbl[sub.clone()];
        weights(xb, qw.map(|w| &w[sub]), sigma2, 0.0, &mut weight, &mut waux);
        let fit = signed_fit::<_, 4>(
            search,
            xb,
            (&weight, &waux),
            &mut xval,
            &mut l,
            true,
            GROUP_MAX_EPS_IQ3_XXS,
        );
        let Some((scale, signs)) = fit else {
            scales[ib] = 0.0;
            continue;
        };
        for k in 0..8 {
            blk[2 + 8 * ib + k] = search.lattice.index_of(&l[4 * k..4 * (k + 1)]) as u8;
        }
        scales_and_signs[ib] = signs
            .iter()
            .enumerate()
            .fold(0, |a, (k, &s)| a | (s as u32) << (7 * k));
        scales[ib] = scale;
        max_scale = cmax(max_scale, scale);
    }
    if max_scale == 0.0 {
        blk.fill(0);
        return;
    }
    let d = max_scale / 31.0;
    // ggml: "small improvement via this fudge factor"
    blk[0..2].copy_from_slice(&f16_bytes(d * 1.0125));
    let id = 1.0 / d;
    for (ib, (sas, &s)) in scales_and_signs.iter().zip(&scales).enumerate() {
        let word = sas | (scale4(id, s) as u32) << 28;
        blk[66 + 4 * ib..70 + 4 * ib].copy_from_slice(&word.to_le_bytes());
    }
}

/// ggml's `quantize_iq3_s` on one row: `x` (whole blocks of 256) into `y` (110 bytes per
/// block), with importance weights `qw` (one per value) or without (then `x^2`).
///
/// # Panics
/// If the lengths do not fit.
pub(crate) fn quantize_iq3_s(x: &[f32], y: &mut [u8], qw: Option<&[f32]>) {
    check_row(x, y, qw, 110);
    let search = Search {
        lattice: iq3_lattice(512),
        kmax_q: 8,
        trials: 9,
        step: 0.2,
        refit: Refit::AllIfOffGrid,
    };
    for (ibl, (xbl, blk)) in x
        .chunks_exact(QK_K)
        .zip(y.chunks_exact_mut(110))
        .enumerate()
    {
        quantize_block_iq3_s(&search, xbl, block_weights(qw, ibl), blk);
    }
}

/// One IQ3_S block (`quantize_row_iq3_s_impl` with block size 32): sub-blocks of 32 values,
/// 8 grid points of 4 each.
///
/// As in ggml, an all-zero sub-block does not advance the `qs` and `signs` cursors (its
/// `continue` skips their increments), so the sub-blocks after it land one slot early; the
/// decoder then reads them misplaced. `qh` is indexed by sub-block and is unaffected.
fn quantize_block_iq3_s(search: &Search<4>, xbl: &[f32], qw: Option<&[f32]>, blk: &mut [u8]) {
    blk.fill(0);
    let (qs, rest) = blk[2..].split_at_mut(64);
    let (qh, rest) = rest.split_at_mut(8);
    let signs_out = &mut rest[..32];
    let (mut qs_at, mut signs_at) = (0, 0);
    let sigma2 = 2.0 * sum_squares(xbl) / QK_K as f32;
    let mut scales = [0f32; QK_K / 32];
    let (mut weight, mut waux, mut xval) = ([0f32; 32], [0f32; 32], [0f32; 32]);
    let mut l = [0i8; 32];
    let mut max_scale = 0f32;
    for ib in 0..QK_K / 32 {
        let sub = 32 * ib..32 * (ib + 1);
        let xb = &xbl[sub.clone()];
        weights(xb, qw.map(|w| &w[sub]), sigma2, 0.0, &mut weight, &mut waux);
        let fit = signed_fit::<_, 4>(
            search,
            xb,
            (&weight, &waux),
            &mut xval,
            &mut l,
            false,
            f32::from_bits(1),
        );
        let Some((scale, signs)) = fit else {
            scales[ib] = 0.0;
            continue;
        };
        for k in 0..8 {
            let index = search.lattice.index_of(&l[4 * k..4 * (k + 1)]);
            qs[qs_at + k] = index as u8;
            qh[ib] |= ((index >> 8) as u8) << k;
        }
        qs_at += 8;
        signs_out[signs_at..signs_at + 4].copy_from_slice(&signs);
        signs_at += 4;
        scales[ib] = scale;
        max_scale = cmax(max_scale, scale);
    }
    if max_scale == 0.0 {
        return;
    }
    let d = max_scale / 31.0;
    blk[0..2].copy_from_slice(&f16_bytes(d * 1.033));
    let id = 1.0 / d;
    for (ib, pair) in scales.chunks_exact(2).enumerate() {
        blk[106 + ib] = scale4(id, pair[0]) | scale4(id, pair[1]) << 4;
    }
}
