//! The gated delta rule over all value heads: per head h (reading key head h % Hk, ggml's
//! tiled broadcast), `S <- e^g S; u = beta (v - S^T k); S <- S + k u^T; o = S^T q`, with the
//! recurrent kernel ([`super::recurrent`]) or the chunked one ([`super::chunk`]) forward and
//! the chunked backward ([`super::chunk_bwd`]). One rayon task per head (or per group of
//! heads when they are small), so no result depends on the thread count.
//! Shapes: qk (2 Hk, T, Dk) [q heads | k heads]; v, o (Hv, T, Dv); beta, g (Hv, T);
//! s (Hv, Dk, Dv); states (Hv, n_chunks, Dk, Dv); do (T, Hv Dv).

use super::{chunk, chunk_bwd, per_task, recurrent, GdnShape};
use rayon::prelude::*;

/// Which form of the delta rule computes the forward.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    /// Token by token: best for decode.
    Recurrent,
    /// Chunks of C in the WY form (matrix products): best for prefill.
    Chunked,
}

/// The delta rule's inputs for T tokens.
#[derive(Clone, Copy)]
pub(super) struct Inputs<'a> {
    qk: &'a [f32],
    v: &'a [f32],
    beta: &'a [f32],
    g: &'a [f32],
    pub t: usize,
    hk: usize,
    dk: usize,
    dv: usize,
}

/// One value head's rows: q, k (T, Dk), v (T, Dv), beta, g (T).
#[derive(Clone, Copy)]
pub(super) struct HeadIn<'a> {
    pub q: &'a [f32],
    pub k: &'a [f32],
    pub v: &'a [f32],
    pub beta: &'a [f32],
    pub g: &'a [f32],
}

impl<'a> Inputs<'a> {
    pub fn new(
        sh: &GdnShape,
        t: usize,
        qk: &'a [f32],
        v: &'a [f32],
        beta: &'a [f32],
        g: &'a [f32],
    ) -> Self {
        let (hk, hv, dk, dv) = (sh.hk, sh.hv, sh.dk, sh.dv);
        assert!(qk.len() == 2 * hk * t * dk && v.len() == hv * t * dv);
        assert!(
            beta.len() == hv * t && g.len() == hv * t,
            "delta rule input lengths"
        );
        Self {
            qk,
            v,
            beta,
            g,
            t,
            hk,
            dk,
            dv,
        }
    }

    /// Value head h, on key head h % Hk.
    pub fn head(&self, h: usize) -> HeadIn<'a> {
        let (t, dk, dv, kh) = (self.t, self.dk, self.dv, h % self.hk);
        HeadIn {
            q: &self.qk[kh * t * dk..][..t * dk],
            k: &self.qk[(self.hk + kh) * t * dk..][..t * dk],
            v: &self.v[h * t * dv..][..t * dv],
            beta: &self.beta[h * t..][..t],
            g: &self.g[h * t..][..t],
        }
    }
}

impl<'a> HeadIn<'a> {
    /// Rows t0..t0 + c.
    pub fn rows(self, t0: usize, c: usize, dk: usize, dv: usize) -> Self {
        HeadIn {
            q: &self.q[t0 * dk..(t0 + c) * dk],
            k: &self.k[t0 * dk..(t0 + c) * dk],
            v: &self.v[t0 * dv..(t0 + c) * dv],
            beta: &self.beta[t0..t0 + c],
            g: &self.g[t0..t0 + c],
        }
    }
}

/// Forward over all heads: o (Hv, T, Dv) written, s (Hv, Dk, Dv) carried; with `states`
/// (chunked only) each chunk's start state is stored.
pub(super) fn forward(
    sh: &GdnShape,
    kernel: Kernel,
    x: Inputs,
    s: &mut [f32],
    o: &mut [f32],
    states: Option<&mut [f32]>,
) {
    let (t, dk, dv) = (x.t, sh.dk, sh.dv);
    assert!(s.len() == sh.ssm_state_len() && o.len() == sh.hv * t * dv);
    assert!(states.is_none() || kernel == Kernel::Chunked);
    if t == 0 {
        return;
    }
    let run = |h: usize, oh: &mut [f32], sh_: &mut [f32], st: Option<&mut [f32]>| match kernel {
        Kernel::Recurrent => recurrent::head_forward(x.head(h), sh_, oh),
        Kernel::Chunked => chunk::head_forward(x.head(h), sh_, oh, st, sh.chunk),
    };
    let per = per_task(t * dk * dv, sh.hv);
    let heads = o.par_chunks_mut(t * dv).zip(s.par_chunks_mut(dk * dv));
    match states {
        None => heads
            .enumerate()
            .with_min_len(per)
            .for_each(|(h, (oh, sh_))| run(h, oh, sh_, None)),
        Some(st) => {
            assert_eq!(st.len(), sh.n_chunks(t) * sh.ssm_state_len());
            heads
                .zip(st.par_chunks_mut(sh.n_chunks(t) * dk * dv))
                .enumerate()
                .with_min_len(per)
                .for_each(|(h, ((oh, sh_), st))| run(h, oh, sh_, Some(st)))
        }
    }
}

/// Floats of one value head's input gradients: [dq (T, Dk) | dk (T, Dk) | dv (T, Dv) |
/// dbeta (T) | dg (T)]. The dq and dk are this value head's share; key heads sum them.
pub(super) fn grad_len(sh: &GdnShape, t: usize) -> usize {
    t * (2 * sh.dk + sh.dv + 2)
}

/// One value head's input gradients (see [`grad_len`]).
pub(super) struct HeadGrads<'a> {
    pub dq: &'a mut [f32],
    pub dk: &'a mut [f32],
    pub dv: &'a mut [f32],
    pub dbeta: &'a mut [f32],
    pub dg: &'a mut [f32],
}

impl<'a> HeadGrads<'a> {
    fn split(buf: &'a mut [f32], t: usize, dk: usize, dv: usize) -> Self {
        let (dq, rest) = buf.split_at_mut(t * dk);
        let (dk, rest) = rest.split_at_mut(t * dk);
        let (dv, rest) = rest.split_at_mut(t * dv);
        let (dbeta, dg) = rest.split_at_mut(t);
        Self {
            dq,
            dk,
            dv,
            dbeta,
            dg,
        }
    }
}

/// Read access to all heads' input gradients (Hv, grad_len).
#[derive(Clone, Copy)]
pub(super) struct GradsView<'a> {
    buf: &'a [f32],
    pub t: usize,
    dk: usize,
    dv: usize,
}

impl<'a> GradsView<'a> {
    pub fn new(sh: &GdnShape, t: usize, buf: &'a [f32]) -> Self {
        assert_eq!(buf.len(), sh.hv * grad_len(sh, t));
        let (dk, dv) = (sh.dk, sh.dv);
        Self { buf, t, dk, dv }
    }

    fn head(&self, h: usize) -> &'a [f32] {
        let n = self.t * (2 * self.dk + self.dv + 2);
        &self.buf[h * n..(h + 1) * n]
    }

    pub fn dq(&self, h: usize, tt: usize) -> &'a [f32] {
        &self.head(h)[tt * self.dk..][..self.dk]
    }

    pub fn dk(&self, h: usize, tt: usize) -> &'a [f32] {
        &self.head(h)[(self.t + tt) * self.dk..][..self.dk]
    }

    pub fn dv(&self, h: usize, tt: usize) -> &'a [f32] {
        &self.head(h)[2 * self.t * self.dk + tt * self.dv..][..self.dv]
    }

    pub fn dbeta(&self, h: usize) -> &'a [f32] {
        &self.head(h)[self.t * (2 * self.dk + self.dv)..][..self.t]
    }

    pub fn dg(&self, h: usize) -> &'a [f32] {
        &self.head(h)[self.t * (2 * self.dk + self.dv + 1)..][..self.t]
    }
}

/// Backward over all heads from a zero final-state gradient: grads (Hv, grad_len) written
/// from do (T, Hv Dv), with the chunk start states the forward stored.
pub(super) fn backward(sh: &GdnShape, x: Inputs, states: &[f32], d_o: &[f32], grads: &mut [f32]) {
    let (t, dk, dv) = (x.t, sh.dk, sh.dv);
    let nc = sh.n_chunks(t);
    assert!(states.len() == nc * sh.ssm_state_len() && d_o.len() == t * sh.value_width());
    assert_eq!(grads.len(), sh.hv * grad_len(sh, t));
    if t == 0 {
        return;
    }
    grads
        .par_chunks_mut(grad_len(sh, t))
        .zip(states.par_chunks(nc * dk * dv))
        .enumerate()
        .with_min_len(per_task(t * dk * dv, sh.hv))
        .for_each(|(h, (gh, st))| {
            let d_oh = chunk_bwd::DoView {
                d: d_o,
                stride: sh.value_width(),
                off: h * dv,
            };
            let g = HeadGrads::split(gh, t, dk, dv);
            chunk_bwd::head_backward(x.head(h), st, d_oh, g, sh.chunk);
        });
}
