//! Between the conv and the delta rule: SiLU, the split into q / k / v heads (into head-major
//! layouts), the L2 norm of q and k per head, `x / sqrt(sum x^2 + eps_l2)` as ggml's
//! `l2_norm` (q then times q_scale), and the gates `beta = sigmoid(b)`,
//! `g = softplus(a + dt_bias) * ssm_a` (softplus as ggml's: x above 20); with backwards.
//! Shapes: c, dc (T, W); qk (2 Hk, T, Dk); rqk (2 Hk, T); v (Hv, T, Dv); b, a, db, da
//! (T, Hv); beta, g, gx (Hv, T) with gx = a + dt_bias.

use super::delta::GradsView;
use super::{per_task, GdnParams, GdnShape};
use crate::layers::act::exp_approx;
use crate::layers::multiversion;
use crate::layers::rmsnorm::{dot16, sum_sq};
use rayon::prelude::*;

/// x sigmoid(x), on the vectorisable exp.
#[inline(always)]
pub(super) fn silu(x: f32) -> f32 {
    x / (1.0 + exp_approx(-x))
}

/// d silu / dx = s (1 + x (1 - s)), s = sigmoid(x).
#[inline(always)]
pub(super) fn silu_grad(x: f32) -> f32 {
    let s = 1.0 / (1.0 + exp_approx(-x));
    s * (1.0 + x * (1.0 - s))
}

multiversion! {
    /// One q or k head from the columns off.. of c (rows of W): y (T, D) = s silu(x) r,
    /// r (T) = 1 / sqrt(sum silu(x)^2 + eps).
    fn l2_head(c: &[f32], w: usize, off: usize, s: f32, eps: f32, y: &mut [f32], r: &mut [f32]) {
        let d = y.len() / r.len();
        for (t, (yr, rt)) in y.chunks_exact_mut(d).zip(r.iter_mut()).enumerate() {
            let xr = &c[t * w + off..][..d];
            for (o, x) in yr.iter_mut().zip(xr) {
                *o = silu(*x);
            }
            *rt = 1.0 / (sum_sq(yr) + eps).sqrt();
            let k = *rt * s;
            yr.iter_mut().for_each(|o| *o *= k);
        }
    }
}

multiversion! {
    /// One v head from the columns off.. of c: v (T, Dv) = silu(x).
    fn v_head(c: &[f32], w: usize, off: usize, v: &mut [f32]) {
        let d = v.len() / (c.len() / w);
        for (t, vr) in v.chunks_exact_mut(d).enumerate() {
            for (o, x) in vr.iter_mut().zip(&c[t * w + off..][..d]) {
                *o = silu(*x);
            }
        }
    }
}

/// c (T, W) -> qk, rqk, v (head-major), one task per head.
pub(super) fn forward(
    sh: &GdnShape,
    c: &[f32],
    qk: &mut [f32],
    rqk: &mut [f32],
    v: &mut [f32],
    t: usize,
) {
    let (w, dk, dv, hk) = (sh.conv_channels(), sh.dk, sh.dv, sh.hk);
    assert!(c.len() == t * w && qk.len() == 2 * hk * t * dk && v.len() == sh.hv * t * dv);
    qk.par_chunks_mut(t * dk)
        .zip(rqk.par_chunks_mut(t))
        .enumerate()
        .with_min_len(per_task(t * dk, 2 * hk))
        .for_each(|(hh, (y, r))| {
            let s = if hh < hk { sh.q_scale } else { 1.0 };
            l2_head(c, w, hh * dk, s, sh.eps_l2, y, r);
        });
    v.par_chunks_mut(t * dv)
        .enumerate()
        .with_min_len(per_task(t * dv, sh.hv))
        .for_each(|(h, vh)| v_head(c, w, 2 * hk * dk + h * dv, vh));
}

multiversion! {
    /// dc rows t0.. (rows, W) from the delta rule's gradients: each key head sums those of
    /// the value heads h = kh, kh + Hk, ... in that order, then back through L2 norm and SiLU.
    fn backward_rows(sh: &GdnShape, gv: GradsView<'_>, c: &[f32], qk: &[f32], rqk: &[f32], t0: usize, dc: &mut [f32]) {
        let (w, t, dk, dv, hk) = (sh.conv_channels(), gv.t, sh.dk, sh.dv, sh.hk);
        for (i, dr) in dc.chunks_exact_mut(w).enumerate() {
            let tt = t0 + i;
            let cr = &c[tt * w..(tt + 1) * w];
            for hh in 0..2 * hk {
                let d = &mut dr[hh * dk..(hh + 1) * dk];
                d.fill(0.0);
                for h in (hh % hk..sh.hv).step_by(hk) {
                    let g = if hh < hk { gv.dq(h, tt) } else { gv.dk(h, tt) };
                    d.iter_mut().zip(g).for_each(|(a, b)| *a += b);
                }
                // y = s r x: dx = r (s dy - y (y . dy) / s)
                let y = &qk[(hh * t + tt) * dk..][..dk];
                let (r, s) = (rqk[hh * t + tt], if hh < hk { sh.q_scale } else { 1.0 });
                let yd = dot16(y, d) / s;
                for ((d, y), x) in d.iter_mut().zip(y).zip(&cr[hh * dk..]) {
                    *d = r * (s * *d - y * yd) * silu_grad(*x);
                }
            }
            for h in 0..sh.hv {
                let off = 2 * hk * dk + h * dv;
                for ((d, g), x) in dr[off..off + dv].iter_mut().zip(gv.dv(h, tt)).zip(&cr[off..]) {
                    *d = g * silu_grad(*x);
                }
            }
        }
    }
}

/// dc (T, W), overwritten, from the delta rule's input gradients.
pub(super) fn backward(
    sh: &GdnShape,
    gv: GradsView,
    c: &[f32],
    qk: &[f32],
    rqk: &[f32],
    dc: &mut [f32],
) {
    let w = sh.conv_channels();
    let rows = per_task(w, gv.t);
    dc.par_chunks_mut(rows * w)
        .enumerate()
        .for_each(|(i, d)| backward_rows(sh, gv, c, qk, rqk, i * rows, d));
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

/// b, a (T, Hv) -> beta, g, gx (Hv, T).
#[allow(clippy::too_many_arguments)]
pub(super) fn gates_forward(
    sh: &GdnShape,
    b: &[f32],
    a: &[f32],
    p: GdnParams,
    beta: &mut [f32],
    g: &mut [f32],
    gx: &mut [f32],
    t: usize,
) {
    let hv = sh.hv;
    for h in 0..hv {
        for tt in 0..t {
            let (i, o) = (tt * hv + h, h * t + tt);
            beta[o] = sigmoid(b[i]);
            gx[o] = a[i] + p.dt_bias[h];
            g[o] = softplus(gx[o]) * p.ssm_a[h];
        }
    }
}

/// db, da (T, Hv) overwritten; d_dt_bias, d_ssm_a (Hv) added into.
#[allow(clippy::too_many_arguments)]
pub(super) fn gates_backward(
    sh: &GdnShape,
    gv: GradsView,
    beta: &[f32],
    gx: &[f32],
    ssm_a: &[f32],
    (db, da): (&mut [f32], &mut [f32]),
    d_dt_bias: &mut [f32],
    d_ssm_a: &mut [f32],
) {
    let (hv, t) = (sh.hv, gv.t);
    for h in 0..hv {
        let (dbeta, dg) = (gv.dbeta(h), gv.dg(h));
        let (mut sb, mut sa) = (0f32, 0f32);
        for tt in 0..t {
            let (i, o) = (tt * hv + h, h * t + tt);
            db[i] = dbeta[tt] * beta[o] * (1.0 - beta[o]);
            da[i] = dg[tt] * ssm_a[h] * sigmoid(gx[o]);
            sb += da[i];
            sa += dg[tt] * softplus(gx[o]);
        }
        d_dt_bias[h] += sb;
        d_ssm_a[h] += sa;
    }
}
