//! Bidirectional attention of one (sequence, head) for short sequences (T <= [`SMALL_T`]: a
//! small ViT's 17 tokens): the math of the tiled kernels in `attention_tiles` (FlashAttention's
//! forward keeping only the log-sum-exp, the backward recomputing P from it) without their
//! `gemm` calls, which at T = 17 and D = 16 cost more than their arithmetic. The head size is
//! a constant (8, 16, 32 or 64), so a row's D-wide sums stay in registers; K and V are
//! transposed once per task to (D, 32) panels, so a query row's 32 scores are 32 lanes summed
//! over D; rows go in pairs, which gives the fused multiply-adds independent chains.
//! Shapes as in `attention`: qkv rows of `stride`, out rows of `out_stride`.

use super::act::exp_approx;
use super::attention_tiles::HeadJob;
use super::{multiversion, SendPtr};
use std::cell::RefCell;

/// Longest sequence of this path: the lanes of a score row.
pub(crate) const SMALL_T: usize = 32;
const L: usize = SMALL_T;

thread_local! {
    static SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Whether the short kernels take `job`.
pub(crate) fn takes(job: &HeadJob) -> bool {
    !job.causal && job.t <= SMALL_T && matches!(job.d, 8 | 16 | 32 | 64)
}

/// D floats of a row at `at` of `x`.
#[inline(always)]
fn row<const D: usize>(x: &[f32], at: usize) -> &[f32; D] {
    x[at..at + D].try_into().unwrap()
}

/// D floats at `at` behind `p`.
///
/// # Safety
/// They lie inside the caller's buffer, belong to this task, and no other reference to them
/// is alive.
#[inline(always)]
unsafe fn row_mut<'a, const D: usize>(p: SendPtr, at: usize) -> &'a mut [f32; D] {
    &mut *(p.get().add(at) as *mut [f32; D])
}

/// Columns `off..off+D` of the T rows of `x` (row stride `st`), times `scale`, as (D, 32) in
/// `panel`; zero past T.
#[inline(always)]
fn transpose<const D: usize>(
    x: &[f32],
    st: usize,
    off: usize,
    t: usize,
    scale: f32,
    panel: &mut [f32],
) {
    panel[..D * L].fill(0.0);
    for j in 0..t {
        for (c, v) in row::<D>(x, j * st + off).iter().enumerate() {
            panel[c * L + j] = v * scale;
        }
    }
}

/// Two rows' 32 lanes `s_j = sum_c x_c panel[c][j]`.
#[inline(always)]
fn lanes2<const D: usize>(x0: &[f32; D], x1: &[f32; D], panel: &[f32]) -> ([f32; L], [f32; L]) {
    let (mut s0, mut s1) = ([0f32; L], [0f32; L]);
    for c in 0..D {
        let col: &[f32; L] = panel[c * L..(c + 1) * L].try_into().unwrap();
        for j in 0..L {
            s0[j] = x0[c].mul_add(col[j], s0[j]);
            s1[j] = x1[c].mul_add(col[j], s1[j]);
        }
    }
    (s0, s1)
}

/// `p_j = exp(s_j - m)` for j < t, 0 past t; returns the sum (8 lanes, a fixed tree).
#[inline(always)]
fn exp_lanes(s: &[f32; L], m: f32, t: usize, p: &mut [f32; L]) -> f32 {
    for j in 0..L {
        let e = exp_approx(s[j] - m);
        p[j] = if j < t { e } else { 0.0 };
    }
    let mut acc = [0f32; 8];
    for part in p.chunks_exact(8) {
        for i in 0..8 {
            acc[i] += part[i];
        }
    }
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]))
}

/// The largest of the first t lanes.
#[inline(always)]
fn max_lanes(s: &[f32; L], t: usize) -> f32 {
    let mut acc = [f32::NEG_INFINITY; 8];
    for (k, part) in s.chunks_exact(8).enumerate() {
        for i in 0..8 {
            let v = if k * 8 + i < t {
                part[i]
            } else {
                f32::NEG_INFINITY
            };
            acc[i] = acc[i].max(v);
        }
    }
    acc.iter().fold(f32::NEG_INFINITY, |a, &v| a.max(v))
}

/// Two rows' `o = sum_j w_j x_j` over the T rows `x_j` at `off` (stride `st`).
#[inline(always)]
fn mix2<const D: usize>(
    w0: &[f32],
    w1: &[f32],
    x: &[f32],
    st: usize,
    off: usize,
    t: usize,
) -> ([f32; D], [f32; D]) {
    let (mut o0, mut o1) = ([0f32; D], [0f32; D]);
    for j in 0..t {
        let v = row::<D>(x, j * st + off);
        for c in 0..D {
            o0[c] = w0[j].mul_add(v[c], o0[c]);
            o1[c] = w1[j].mul_add(v[c], o1[c]);
        }
    }
    (o0, o1)
}

#[inline(always)]
fn forward<const D: usize>(
    qkv: &[f32],
    job: &HeadJob,
    out: SendPtr,
    lse: &mut [f32],
    kt: &mut [f32],
) {
    let (t, st, os) = (job.t, job.stride, job.out_stride);
    transpose::<D>(qkv, st, job.k, t, job.scale, kt);
    for i in (0..t).step_by(2) {
        // an odd last row runs paired with itself
        let i1 = (i + 1).min(t - 1);
        let (s0, s1) = lanes2::<D>(row(qkv, i * st + job.q), row(qkv, i1 * st + job.q), kt);
        let (mut p0, mut p1) = ([0f32; L], [0f32; L]);
        let (m0, m1) = (max_lanes(&s0, t), max_lanes(&s1, t));
        let (z0, z1) = (
            exp_lanes(&s0, m0, t, &mut p0),
            exp_lanes(&s1, m1, t, &mut p1),
        );
        let (o0, o1) = mix2::<D>(&p0, &p1, qkv, st, job.v, t);
        for (r, m, z, o) in [(i, m0, z0, o0), (i1, m1, z1, o1)] {
            lse[r] = m + z.ln();
            let inv = 1.0 / z;
            // SAFETY: row r's columns o..o+D of out belong to this task (the caller's contract).
            let dst = unsafe { row_mut::<D>(out, r * os + job.o) };
            for c in 0..D {
                dst[c] = o[c] * inv;
            }
        }
    }
}

/// Sets this query head's dQ; adds into its kv head's dK and dV. `buf`: the K and V panels
/// and the P and scale dS rows (32 x 32 each).
#[inline(always)]
fn backward<const D: usize>(
    dout: &[f32],
    qkv: &[f32],
    out: &[f32],
    lse: &[f32],
    job: &HeadJob,
    dqkv: SendPtr,
    buf: &mut [f32],
) {
    let (t, st, os, scale) = (job.t, job.stride, job.out_stride, job.scale);
    let (kt, rest) = buf.split_at_mut(D * L);
    let (vt, rest) = rest.split_at_mut(D * L);
    let (pm, dsm) = rest.split_at_mut(L * L);
    transpose::<D>(qkv, st, job.k, t, scale, kt);
    transpose::<D>(qkv, st, job.v, t, 1.0, vt);
    let dot = |a: &[f32; D], b: &[f32; D]| -> f32 { a.iter().zip(b).map(|(x, y)| x * y).sum() };
    for i in (0..t).step_by(2) {
        let i1 = (i + 1).min(t - 1);
        let (q0, q1) = (
            row::<D>(qkv, i * st + job.q),
            row::<D>(qkv, i1 * st + job.q),
        );
        let (g0, g1) = (
            row::<D>(dout, i * os + job.o),
            row::<D>(dout, i1 * os + job.o),
        );
        let (s0, s1) = lanes2::<D>(q0, q1, kt);
        let (dp0, dp1) = lanes2::<D>(g0, g1, vt);
        for (r, s, dp, g) in [(i, s0, dp0, g0), (i1, s1, dp1, g1)] {
            let di = dot(g, row::<D>(out, r * os + job.o));
            let p: &mut [f32; L] = (&mut pm[r * L..(r + 1) * L]).try_into().unwrap();
            exp_lanes(&s, lse[r], t, p);
            // scale dS: dQ = dS K scale, dK = dS^T Q scale
            for j in 0..L {
                dsm[r * L + j] = scale * p[j] * (dp[j] - di);
            }
        }
        let (dq0, dq1) = mix2::<D>(&dsm[i * L..], &dsm[i1 * L..], qkv, st, job.k, t);
        for (r, dq) in [(i, dq0), (i1, dq1)] {
            // SAFETY: row r's q columns of this head in dqkv belong to this task.
            unsafe { *row_mut::<D>(dqkv, r * st + job.q) = dq };
        }
    }
    // dK_j += sum_i dS_ij Q_i, dV_j += sum_i P_ij dO_i: the columns of the stored rows
    for j in (0..t).step_by(2) {
        let j1 = (j + 1).min(t - 1);
        let (mut k0, mut k1, mut v0, mut v1) = ([0f32; D], [0f32; D], [0f32; D], [0f32; D]);
        for i in 0..t {
            let (q, g) = (
                row::<D>(qkv, i * st + job.q),
                row::<D>(dout, i * os + job.o),
            );
            let (a0, a1, b0, b1) = (
                dsm[i * L + j],
                dsm[i * L + j1],
                pm[i * L + j],
                pm[i * L + j1],
            );
            for c in 0..D {
                k0[c] = a0.mul_add(q[c], k0[c]);
                k1[c] = a1.mul_add(q[c], k1[c]);
                v0[c] = b0.mul_add(g[c], v0[c]);
                v1[c] = b1.mul_add(g[c], v1[c]);
            }
        }
        // an odd last column ran paired with itself: add it once
        let cols = if j1 > j { 2 } else { 1 };
        for (r, dk, dv) in [(j, k0, v0), (j1, k1, v1)].into_iter().take(cols) {
            // SAFETY: row r's k and v columns of this kv head belong to this task; one
            // reference at a time.
            unsafe {
                let at = row_mut::<D>(dqkv, r * st + job.k);
                at.iter_mut().zip(&dk).for_each(|(a, b)| *a += b);
                let at = row_mut::<D>(dqkv, r * st + job.v);
                at.iter_mut().zip(&dv).for_each(|(a, b)| *a += b);
            }
        }
    }
}

macro_rules! sized {
    ($fwd:ident, $bwd:ident, $d:literal) => {
        multiversion! {
            fn $fwd(qkv: &[f32], job: &HeadJob, out: SendPtr, lse: &mut [f32], kt: &mut [f32]) {
                forward::<$d>(qkv, job, out, lse, kt)
            }
        }
        multiversion! {
            fn $bwd(dout: &[f32], qkv: &[f32], out: &[f32], lse: &[f32], job: &HeadJob, dqkv: SendPtr, buf: &mut [f32]) {
                backward::<$d>(dout, qkv, out, lse, job, dqkv, buf)
            }
        }
    };
}
sized!(forward8, backward8, 8);
sized!(forward16, backward16, 16);
sized!(forward32, backward32, 32);
sized!(forward64, backward64, 64);

/// [`super::attention_tiles::head_forward`] for a job [`takes`] accepts.
pub(crate) fn head_forward_small(qkv: &[f32], job: HeadJob, out: SendPtr, lse: &mut [f32]) {
    assert!(takes(&job) && job.t >= 1 && qkv.len() >= job.t * job.stride && lse.len() >= job.t);
    crate::kernels::with_scratch(&SCRATCH, job.d * L, |kt| match job.d {
        8 => forward8(qkv, &job, out, lse, kt),
        16 => forward16(qkv, &job, out, lse, kt),
        32 => forward32(qkv, &job, out, lse, kt),
        _ => forward64(qkv, &job, out, lse, kt),
    })
}

/// [`super::attention_tiles::head_backward`] for a job [`takes`] accepts.
pub(crate) fn head_backward_small(
    dout: &[f32],
    qkv: &[f32],
    out: &[f32],
    lse: &[f32],
    job: HeadJob,
    dqkv: SendPtr,
) {
    let t = job.t;
    assert!(
        takes(&job)
            && t >= 1
            && qkv.len() >= t * job.stride
            && dout.len() >= t * job.out_stride
            && out.len() >= t * job.out_stride
            && lse.len() >= t
    );
    let len = 2 * job.d * L + 2 * L * L;
    crate::kernels::with_scratch(&SCRATCH, len, |buf| match job.d {
        8 => backward8(dout, qkv, out, lse, &job, dqkv, buf),
        16 => backward16(dout, qkv, out, lse, &job, dqkv, buf),
        32 => backward32(dout, qkv, out, lse, &job, dqkv, buf),
        _ => backward64(dout, qkv, out, lse, &job, dqkv, buf),
    })
}

#[cfg(test)]
mod tests {
    use super::super::attention_tiles::{head_backward_tiled, head_forward_tiled};
    use super::*;
    use crate::kernels::test_data;

    /// The short path agrees with the tiled one on a task of two query heads sharing a kv
    /// head (dK and dV add up over both), for T = 1, 2, 17 and 32 and D = 8 and 16.
    #[test]
    fn short_sequences_match_the_tiled_kernels() {
        let nh = 2;
        for (t, d) in [(1, 8), (2, 16), (17, 16), (17, 8), (32, 16)] {
            let (stride, os) = ((nh + 2) * d, nh * d);
            let qkv: Vec<f32> = test_data(t * stride, 1).iter().map(|v| 2.0 * v).collect();
            let dout = test_data(t * os, 2);
            let job = |h: usize| HeadJob {
                stride,
                q: h * d,
                k: nh * d,
                v: (nh + 1) * d,
                out_stride: os,
                o: h * d,
                d,
                t,
                scale: 1.0 / (d as f32).sqrt(),
                causal: false,
                window: 0,
            };
            assert!(takes(&job(0)));
            let run = |small: bool| {
                let (mut out, mut lse) = (vec![0.0; t * os], vec![0.0; nh * t]);
                for h in 0..nh {
                    let (o, l) = (SendPtr(out.as_mut_ptr()), &mut lse[h * t..(h + 1) * t]);
                    if small {
                        head_forward_small(&qkv, job(h), o, l)
                    } else {
                        head_forward_tiled(&qkv, job(h), o, l)
                    }
                }
                let mut dqkv = vec![0.0; t * stride];
                for h in 0..nh {
                    let (g, l) = (SendPtr(dqkv.as_mut_ptr()), &lse[h * t..(h + 1) * t]);
                    if small {
                        head_backward_small(&dout, &qkv, &out, l, job(h), g)
                    } else {
                        head_backward_tiled(&dout, &qkv, &out, l, job(h), g)
                    }
                }
                (out, lse, dqkv)
            };
            let (a, b) = (run(true), run(false));
            for (what, x, y) in [
                ("out", &a.0, &b.0),
                ("lse", &a.1, &b.1),
                ("dqkv", &a.2, &b.2),
            ] {
                for (i, (u, v)) in x.iter().zip(y).enumerate() {
                    let ok = (u - v).abs() < 1e-5 + 1e-5 * v.abs();
                    assert!(ok, "t = {t}, d = {d}: {what}[{i}]: {u} vs {v}");
                }
            }
        }
    }
}
