//! The gated output norm of Gated DeltaNet, as llama.cpp's `build_norm_gated`:
//! `y = o r w silu(z)` per (token, value head), `r = 1 / sqrt(mean(o^2) + eps)` over Dv,
//! with one weight w (Dv) shared by all heads.
//! Shapes: o (Hv, T, Dv) head-major as the delta rule writes it; z, out, dout, dz (T, Hv Dv);
//! do (T, Hv Dv) row-major (the delta rule's backward reads it strided); rstd (T, Hv).

use super::prep::{silu, silu_grad};
use super::{per_task, GdnShape};
use crate::layers::multiversion;
use crate::layers::rmsnorm::{dot16, sum_sq};
use rayon::prelude::*;

/// Head h's o row at token tt (Dv).
#[inline(always)]
fn o_row(o: &[f32], t: usize, dv: usize, h: usize, tt: usize) -> &[f32] {
    &o[(h * t + tt) * dv..][..dv]
}

multiversion! {
    /// Output rows t0.. (rows, Hv Dv) and their rstd (rows, Hv), of a sequence of t tokens.
    fn forward_rows(o: &[f32], z: &[f32], w: &[f32], eps: f32, t: usize, t0: usize, out: &mut [f32], rstd: &mut [f32]) {
        let dv = w.len();
        let vw = o.len() / t;
        for (i, (yr, rr)) in out.chunks_exact_mut(vw).zip(rstd.chunks_exact_mut(vw / dv)).enumerate() {
            let tt = t0 + i;
            let zr = &z[tt * vw..(tt + 1) * vw];
            for (h, (y, r)) in yr.chunks_exact_mut(dv).zip(rr.iter_mut()).enumerate() {
                let x = o_row(o, t, dv, h, tt);
                *r = 1.0 / (sum_sq(x) / dv as f32 + eps).sqrt();
                let zh = &zr[h * dv..(h + 1) * dv];
                let r = *r;
                for ((y, x), (w, z)) in y.iter_mut().zip(x).zip(w.iter().zip(zh)) {
                    *y = x * r * w * silu(*z);
                }
            }
        }
    }
}

/// o (Hv, T, Dv), z (T, Hv Dv) -> out (T, Hv Dv), saving rstd (T, Hv).
pub(super) fn forward(
    sh: &GdnShape,
    o: &[f32],
    z: &[f32],
    w: &[f32],
    out: &mut [f32],
    rstd: &mut [f32],
    t: usize,
) {
    let (vw, hv) = (sh.value_width(), sh.hv);
    assert!(o.len() == t * vw && z.len() == t * vw && out.len() == t * vw && rstd.len() == t * hv);
    let rows = per_task(vw, t);
    out.par_chunks_mut(rows * vw)
        .zip(rstd.par_chunks_mut(rows * hv))
        .enumerate()
        .for_each(|(i, (y, r))| forward_rows(o, z, w, sh.eps, t, i * rows, y, r));
}

/// The inputs the backward reads: o (Hv, T, Dv), z (T, Hv Dv), w (Dv), rstd (T, Hv).
#[derive(Clone, Copy)]
pub(super) struct Saved<'a> {
    pub o: &'a [f32],
    pub z: &'a [f32],
    pub w: &'a [f32],
    pub rstd: &'a [f32],
    pub t: usize,
}

multiversion! {
    /// do and dz rows t0.. (rows, Hv Dv) from dout: with u = dy silu(z) w,
    /// do = r u - r^3 o mean(u o), dz = dy o r w silu'(z).
    fn backward_rows(dy: &[f32], s: Saved<'_>, t0: usize, d_o: &mut [f32], dz: &mut [f32]) {
        let dv = s.w.len();
        let vw = s.o.len() / s.t;
        for (i, (dor, dzr)) in d_o.chunks_exact_mut(vw).zip(dz.chunks_exact_mut(vw)).enumerate() {
            let tt = t0 + i;
            let (gr, zr) = (&dy[tt * vw..(tt + 1) * vw], &s.z[tt * vw..(tt + 1) * vw]);
            for h in 0..vw / dv {
                let x = o_row(s.o, s.t, dv, h, tt);
                let r = s.rstd[tt * (vw / dv) + h];
                let (g, zh) = (&gr[h * dv..(h + 1) * dv], &zr[h * dv..(h + 1) * dv]);
                let (dx, dzh) = (&mut dor[h * dv..(h + 1) * dv], &mut dzr[h * dv..(h + 1) * dv]);
                let outs = dx.iter_mut().zip(dzh.iter_mut());
                for ((d, dz), ((g, x), (w, z))) in outs.zip(g.iter().zip(x).zip(s.w.iter().zip(zh))) {
                    *d = g * silu(*z) * w;
                    *dz = g * x * r * w * silu_grad(*z);
                }
                let k = r * r * r * dot16(dx, x) / dv as f32;
                dx.iter_mut().zip(x).for_each(|(d, x)| *d = r * *d - k * x);
            }
        }
    }
}

multiversion! {
    /// dw (Dv) += sum over (token, head) of dy silu(z) o r, in order.
    fn weight_grad(dy: &[f32], s: Saved<'_>, dw: &mut [f32]) {
        let dv = dw.len();
        let vw = s.o.len() / s.t;
        for tt in 0..s.t {
            for h in 0..vw / dv {
                let x = o_row(s.o, s.t, dv, h, tt);
                let r = s.rstd[tt * (vw / dv) + h];
                let (g, zh) = (&dy[tt * vw + h * dv..][..dv], &s.z[tt * vw + h * dv..][..dv]);
                for ((d, g), (z, x)) in dw.iter_mut().zip(g).zip(zh.iter().zip(x)) {
                    *d += g * silu(*z) * x * r;
                }
            }
        }
    }
}

/// From dout (T, Hv Dv): do (T, Hv Dv) and dz (T, Hv Dv) overwritten, dw (Dv) added into.
pub(super) fn backward(dout: &[f32], s: Saved, d_o: &mut [f32], dz: &mut [f32], dw: &mut [f32]) {
    let vw = s.o.len() / s.t;
    assert!(dout.len() == s.o.len() && d_o.len() == s.o.len() && dz.len() == s.o.len());
    assert!(s.z.len() == s.o.len() && dw.len() == s.w.len());
    let rows = per_task(vw, s.t);
    d_o.par_chunks_mut(rows * vw)
        .zip(dz.par_chunks_mut(rows * vw))
        .enumerate()
        .for_each(|(i, (a, b))| backward_rows(dout, s, i * rows, a, b));
    weight_grad(dout, s, dw);
}
