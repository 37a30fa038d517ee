//! The chunked form of the gated delta rule (Yang et al. 2024, section 3: the WY / UT
//! transform, as flash-linear-attention's `chunk_gated_delta_rule`), for one value head.
//! Within a chunk of C tokens with cumulative log decay gamma = cumsum(g) and start state S:
//!
//! - `Gamma_ij = exp(gamma_i - gamma_j)` for i >= j, 0 above (masked before the exp, so no
//!   factor ever exceeds 1);
//! - `L = diag(beta) (K K^T ⊙ Gamma)` strictly below the diagonal, `A = (I + L)^-1`;
//! - `W = A diag(beta e^gamma) K`, `U = A diag(beta) V` (A by forward substitution, the
//!   products on gemm), `V' = U - W S` (the recurrent form's u for every token);
//! - `O = diag(e^gamma) Q S + (Q K^T ⊙ Gamma) V'`;
//! - `S <- e^gamma_last S + (diag(e^(gamma_last - gamma)) K)^T V'`.
//!
//! Unrolling the recurrence over the chunk gives exactly these (`u_i` solves a unit lower
//! triangular system), so the two kernels agree to rounding. [`prepare`] computes everything
//! but O and the new S; the backward ([`super::chunk_bwd`]) recomputes it from the stored
//! chunk start states.
//! Shapes: q, k (C, Dk); v (C, Dv); S (Dk, Dv); per-chunk matrices (C, C), (C, Dk), (C, Dv).

use super::delta::HeadIn;
use super::linalg::{invert_unit_lower, mm, Mat};
use crate::layers::act::exp_approx;
use crate::layers::multiversion;
use std::cell::RefCell;

thread_local! {
    static SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// One chunk's working set, carved from the per-thread scratch for chunks of up to C rows
/// (a shorter chunk uses the first rows, its (c, c) matrices packed with stride c).
pub(super) struct Bufs<'a> {
    /// (C) gamma, e^gamma, e^(gamma_last - gamma); the backward's d gamma.
    pub gam: &'a mut [f32],
    pub eg: &'a mut [f32],
    pub ed: &'a mut [f32],
    pub dgam: &'a mut [f32],
    /// (C, C) Gamma, M = K K^T ⊙ Gamma (strict), L = diag(beta) M, A = (I + L)^-1,
    /// P = Q K^T ⊙ Gamma; the backward's dP and dL.
    pub gm: &'a mut [f32],
    pub m: &'a mut [f32],
    pub l: &'a mut [f32],
    pub a: &'a mut [f32],
    pub p: &'a mut [f32],
    pub dp: &'a mut [f32],
    pub dl: &'a mut [f32],
    /// (C, Dk) Q e^gamma, K_b = K beta e^gamma, K_d = K e^(gamma_last - gamma), W; the
    /// backward's dK_d, dW, dK_b.
    pub qe: &'a mut [f32],
    pub kb: &'a mut [f32],
    pub kd: &'a mut [f32],
    pub w: &'a mut [f32],
    pub dkd: &'a mut [f32],
    pub dw: &'a mut [f32],
    pub dkb: &'a mut [f32],
    /// (C, Dv) V_b = diag(beta) V (the backward's dV_b), U, V'; the backward's dV'.
    pub vb: &'a mut [f32],
    pub u: &'a mut [f32],
    pub vp: &'a mut [f32],
    pub dvp: &'a mut [f32],
    /// (Dk, Dv) the backward's state gradient.
    pub ds: &'a mut [f32],
}

impl<'a> Bufs<'a> {
    fn len(c: usize, dk: usize, dv: usize) -> usize {
        4 * c + 7 * c * c + 7 * c * dk + 4 * c * dv + dk * dv
    }

    fn new(buf: &'a mut [f32], c: usize, dk: usize, dv: usize) -> Self {
        let mut rest = buf;
        let mut take = |n: usize| {
            let (a, b) = std::mem::take(&mut rest).split_at_mut(n);
            rest = b;
            a
        };
        let (gam, eg, ed, dgam) = (take(c), take(c), take(c), take(c));
        let (gm, m, l, a) = (take(c * c), take(c * c), take(c * c), take(c * c));
        let (p, dp, dl) = (take(c * c), take(c * c), take(c * c));
        let (qe, kb, kd, w) = (take(c * dk), take(c * dk), take(c * dk), take(c * dk));
        let (dkd, dw, dkb) = (take(c * dk), take(c * dk), take(c * dk));
        let (vb, u, vp, dvp) = (take(c * dv), take(c * dv), take(c * dv), take(c * dv));
        let ds = take(dk * dv);
        Self {
            gam,
            eg,
            ed,
            dgam,
            gm,
            m,
            l,
            a,
            p,
            dp,
            dl,
            qe,
            kb,
            kd,
            w,
            dkd,
            dw,
            dkb,
            vb,
            u,
            vp,
            dvp,
            ds,
        }
    }
}

/// Run `f` on chunk buffers for chunks of up to c rows, from this thread's scratch.
pub(super) fn with_bufs<R>(c: usize, dk: usize, dv: usize, f: impl FnOnce(Bufs) -> R) -> R {
    crate::kernels::with_scratch(&SCRATCH, Bufs::len(c, dk, dv), |buf| {
        f(Bufs::new(buf, c, dk, dv))
    })
}

/// Decay factors below e^-DECAY_CUT (about 1e-13, under f32's resolution relative to the
/// undecayed terms of the same sum) are taken as 0: then no product of two of them comes near
/// f32's denormal range, where x86 arithmetic runs many times slower (measured: with
/// fast-decaying heads, chunks of 64 ran about 1.5x slower without the cut).
const DECAY_CUT: f32 = 30.0;

/// e^x for a log decay x <= 0, 0 below -DECAY_CUT.
#[inline(always)]
fn decay(x: f32) -> f32 {
    if x < -DECAY_CUT {
        0.0
    } else {
        exp_approx(x)
    }
}

/// (C) gamma, e^gamma, e^(gamma_last - gamma) and (C, C) Gamma.
#[inline(always)]
fn decays(b: &mut Bufs, g: &[f32]) {
    let c = g.len();
    let mut acc = 0f32;
    for (y, x) in b.gam.iter_mut().zip(g) {
        acc += x;
        *y = acc;
    }
    for i in 0..c {
        b.eg[i] = decay(b.gam[i]);
        b.ed[i] = decay(acc - b.gam[i]);
    }
    for i in 0..c {
        let gi = b.gam[i];
        for (j, e) in b.gm[i * c..(i + 1) * c].iter_mut().enumerate() {
            *e = decay(if j <= i {
                gi - b.gam[j]
            } else {
                f32::NEG_INFINITY
            });
        }
    }
}

/// (C, C) M, L, P and (C, Dk) the scaled q and k rows.
#[inline(always)]
fn scores(b: &mut Bufs, x: HeadIn) {
    let c = x.beta.len();
    let (dk, cc) = (x.q.len() / c, c * c);
    let (q, k) = (Mat::new(x.q, c, dk), Mat::new(x.k, c, dk));
    mm(b.m, k, k.t(), 1.0, false);
    mm(b.p, q, k.t(), 1.0, false);
    let rows = b.m[..cc]
        .chunks_exact_mut(c)
        .zip(b.l[..cc].chunks_exact_mut(c));
    let rows = rows.zip(
        b.p[..cc]
            .chunks_exact_mut(c)
            .zip(b.gm[..cc].chunks_exact(c)),
    );
    for (i, ((mr, lr), (pr, gr))) in rows.enumerate() {
        let bi = x.beta[i];
        let row = mr.iter_mut().zip(lr.iter_mut()).zip(pr.iter_mut().zip(gr));
        for (j, ((m, l), (p, g))) in row.enumerate() {
            *m = if j < i { *m * g } else { 0.0 };
            *l = bi * *m;
            *p *= g;
        }
    }
    let rows = b.qe.chunks_exact_mut(dk).zip(b.kb.chunks_exact_mut(dk));
    let rows = rows.zip(
        b.kd.chunks_exact_mut(dk)
            .zip(x.q.chunks_exact(dk).zip(x.k.chunks_exact(dk))),
    );
    for (i, ((qe, kb), (kd, (qr, kr)))) in rows.enumerate() {
        let (e, be, d) = (b.eg[i], x.beta[i] * b.eg[i], b.ed[i]);
        for ((((a, bb), dd), qq), kk) in qe
            .iter_mut()
            .zip(kb.iter_mut())
            .zip(kd.iter_mut())
            .zip(qr)
            .zip(kr)
        {
            *a = e * qq;
            *bb = be * kk;
            *dd = d * kk;
        }
    }
}

/// (C, C) A, (C, Dk) W = A K_b, (C, Dv) V_b, U = A V_b and V' = U - W S.
#[inline(always)]
fn solve(b: &mut Bufs, x: HeadIn, s: &[f32]) {
    let c = x.beta.len();
    let (dk, dv) = (x.q.len() / c, x.v.len() / c);
    invert_unit_lower(&b.l[..c * c], &mut b.a[..c * c], c);
    let a = Mat::new(b.a, c, c);
    mm(b.w, a, Mat::new(b.kb, c, dk), 1.0, false);
    for ((vb, v), bi) in
        b.vb.chunks_exact_mut(dv)
            .zip(x.v.chunks_exact(dv))
            .zip(x.beta)
    {
        vb.iter_mut().zip(v).for_each(|(o, v)| *o = bi * v);
    }
    mm(b.u, a, Mat::new(b.vb, c, dv), 1.0, false);
    b.vp[..c * dv].copy_from_slice(&b.u[..c * dv]);
    mm(b.vp, Mat::new(b.w, c, dk), Mat::new(s, dk, dv), -1.0, true);
}

multiversion! {
    /// Everything of one chunk (rows x, start state s) but its output and new state.
    pub(super) fn prepare(b: &mut Bufs<'_>, x: HeadIn<'_>, s: &[f32]) {
        decays(b, x.g);
        scores(b, x);
        solve(b, x, s);
    }
}

/// O (c, Dv) of a prepared chunk, and S advanced past it.
fn finish(b: &Bufs, c: usize, s: &mut [f32], o: &mut [f32]) {
    let dv = o.len() / c;
    let dk = s.len() / dv;
    mm(o, Mat::new(b.qe, c, dk), Mat::new(s, dk, dv), 1.0, false);
    mm(o, Mat::new(b.p, c, c), Mat::new(b.vp, c, dv), 1.0, true);
    let el = b.eg[c - 1];
    s.iter_mut().for_each(|v| *v *= el);
    mm(
        s,
        Mat::new(b.kd, c, dk).t(),
        Mat::new(b.vp, c, dv),
        1.0,
        true,
    );
}

/// All T tokens of one head in chunks of `chunk`: o (T, Dv) written, S carried in place;
/// with `states` (n_chunks, Dk, Dv) each chunk's start state is stored.
pub(super) fn head_forward(
    x: HeadIn,
    s: &mut [f32],
    o: &mut [f32],
    mut states: Option<&mut [f32]>,
    chunk: usize,
) {
    let t = x.beta.len();
    let (dk, dv) = (x.q.len() / t.max(1), x.v.len() / t.max(1));
    assert!(t > 0 && chunk > 0 && s.len() == dk * dv && o.len() == t * dv);
    with_bufs(chunk.min(t), dk, dv, |mut b| {
        for (ci, t0) in (0..t).step_by(chunk).enumerate() {
            let c = chunk.min(t - t0);
            if let Some(st) = states.as_deref_mut() {
                st[ci * dk * dv..(ci + 1) * dk * dv].copy_from_slice(s);
            }
            prepare(&mut b, x.rows(t0, c, dk, dv), s);
            finish(&b, c, s, &mut o[t0 * dv..(t0 + c) * dv]);
        }
    });
}
