//! Depthwise causal conv1d over time without bias, as ggml's `ssm_conv` in llama.cpp's
//! qwen35 / qwen3next graphs: `c[t, ch] = sum_j w[ch, j] xpad[t + j, ch]` where xpad is the
//! K-1 state rows followed by the T input rows (tap K-1 multiplies the current token). The
//! SiLU after it lives in [`super::prep`]. The kernels read the taps transposed, wt (K, W),
//! so that every loop runs along the channels.
//! Shapes: x, c, dc, dx (T, W); w, dw (W, K); wt (K, W); state (K-1, W).

use super::per_task;
use crate::layers::multiversion;
use rayon::prelude::*;
use std::cell::RefCell;

thread_local! {
    static SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// wt (K, W) = the transpose of w (W, K).
pub(super) fn transpose_taps(w: &[f32], kernel: usize, wt: &mut [f32]) {
    let nc = w.len() / kernel;
    assert_eq!(wt.len(), w.len());
    for (ch, taps) in w.chunks_exact(kernel).enumerate() {
        for (j, v) in taps.iter().enumerate() {
            wt[j * nc + ch] = *v;
        }
    }
}

/// Row r of xpad (W).
#[inline(always)]
fn pad_row<'a>(state: &'a [f32], x: &'a [f32], r: usize, nc: usize, k1: usize) -> &'a [f32] {
    if r < k1 {
        &state[r * nc..(r + 1) * nc]
    } else {
        &x[(r - k1) * nc..(r - k1 + 1) * nc]
    }
}

/// Channels whose sums a conv kernel keeps in registers.
const BLOCK: usize = 64;

multiversion! {
    /// Conv output rows t0.. into c (rows, W), BLOCK channels at a time over all K taps.
    fn conv_rows(wt: &[f32], nc: usize, state: &[f32], x: &[f32], t0: usize, c: &mut [f32]) {
        let kernel = wt.len() / nc;
        for (i, cr) in c.chunks_exact_mut(nc).enumerate() {
            for (bi, cb) in cr.chunks_mut(BLOCK).enumerate() {
                let (b0, n) = (bi * BLOCK, cb.len());
                let mut acc = [0f32; BLOCK];
                for (j, wj) in wt.chunks_exact(nc).enumerate() {
                    let xr = &pad_row(state, x, t0 + i + j, nc, kernel - 1)[b0..b0 + n];
                    for ((a, w), x) in acc.iter_mut().zip(&wj[b0..b0 + n]).zip(xr) {
                        *a += w * x;
                    }
                }
                cb.copy_from_slice(&acc[..n]);
            }
        }
    }
}

/// x (T, W) -> c (T, W) after the K-1 rows of `state`, with the taps wt (K, W).
pub(super) fn forward(wt: &[f32], kernel: usize, x: &[f32], state: &[f32], c: &mut [f32]) {
    let nc = wt.len() / kernel;
    assert!(
        x.len() == c.len() && x.len().is_multiple_of(nc) && state.len() == (kernel - 1) * nc,
        "conv shapes"
    );
    let rows = per_task(nc * kernel, x.len() / nc);
    c.par_chunks_mut(rows * nc)
        .enumerate()
        .for_each(|(i, cb)| conv_rows(wt, nc, state, x, i * rows, cb));
}

/// The state after x (T, W): the last K-1 rows of xpad.
pub(super) fn update_state(state: &mut [f32], x: &[f32], nc: usize) {
    let (k1, t) = (state.len() / nc, x.len() / nc);
    if t >= k1 {
        state.copy_from_slice(&x[(t - k1) * nc..]);
    } else {
        state.copy_within(t * nc.., 0);
        state[(k1 - t) * nc..].copy_from_slice(x);
    }
}

multiversion! {
    /// dx rows s0.. (rows, W): `dx[s] = sum_j wt[j] dc[s + K-1 - j]` over the rows of dc.
    fn dx_rows(wt: &[f32], nc: usize, dc: &[f32], s0: usize, dx: &mut [f32]) {
        let (kernel, t) = (wt.len() / nc, dc.len() / nc);
        for (i, dr) in dx.chunks_exact_mut(nc).enumerate() {
            dr.fill(0.0);
            for (j, wj) in wt.chunks_exact(nc).enumerate() {
                let r = s0 + i + kernel - 1 - j;
                if r < t {
                    for ((o, w), g) in dr.iter_mut().zip(wj).zip(&dc[r * nc..(r + 1) * nc]) {
                        *o += w * g;
                    }
                }
            }
        }
    }
}

multiversion! {
    /// dw rows ch0.. (n, K) += sum over t, in order, of dc[t, ch] xpad[t + j, ch], summed
    /// first into acc (K, n).
    fn dw_rows(dc: &[f32], x: &[f32], state: &[f32], nc: usize, kernel: usize, ch0: usize, dw: &mut [f32], acc: &mut [f32]) {
        let (t, n) = (dc.len() / nc, dw.len() / kernel);
        acc.fill(0.0);
        for tt in 0..t {
            let g = &dc[tt * nc + ch0..][..n];
            for (j, aj) in acc.chunks_exact_mut(n).enumerate() {
                let xr = &pad_row(state, x, tt + j, nc, kernel - 1)[ch0..ch0 + n];
                for ((a, gg), xx) in aj.iter_mut().zip(g).zip(xr) {
                    *a += gg * xx;
                }
            }
        }
        for (ch, taps) in dw.chunks_exact_mut(kernel).enumerate() {
            for (j, d) in taps.iter_mut().enumerate() {
                *d += acc[j * n + ch];
            }
        }
    }
}

/// From dc (T, W): dx (T, W) overwritten, dw (W, K) added into; wt, x and state as the
/// forward had them. Each dw element sums over t in order, so no task split changes a bit.
pub(super) fn backward(
    wt: &[f32],
    kernel: usize,
    dc: &[f32],
    x: &[f32],
    state: &[f32],
    dx: &mut [f32],
    dw: &mut [f32],
) {
    let nc = wt.len() / kernel;
    assert!(dc.len() == x.len() && dx.len() == x.len() && dw.len() == wt.len());
    let t = x.len() / nc;
    let rows = per_task(nc * kernel, t);
    dx.par_chunks_mut(rows * nc)
        .enumerate()
        .for_each(|(i, d)| dx_rows(wt, nc, dc, i * rows, d));
    let chans = per_task(t * kernel, nc);
    dw.par_chunks_mut(chans * kernel)
        .enumerate()
        .for_each(|(i, d)| {
            crate::kernels::with_scratch(&SCRATCH, d.len(), |acc| {
                dw_rows(dc, x, state, nc, kernel, i * chans, d, acc)
            })
        });
}
