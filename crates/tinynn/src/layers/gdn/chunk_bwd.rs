//! Backward of the chunked gated delta rule ([`super::chunk`]) for one value head, through
//! the WY form itself: chunks in reverse order, each recomputed from its stored start state S,
//! carrying dS (the gradient of the state after the chunk, zero after the last). With
//! `O = diag(e^gamma) Q S + P V'`, `S' = e^gamma_last S + K_d^T V'`, `V' = U - W S`,
//! `U = A V_b`, `W = A K_b`, `A = (I + L)^-1`:
//!
//! - `dV' = P^T dO + K_d dS'`, `dP = dO V'^T` (lower), `dQ = e^gamma (dO S^T) + (dP ⊙ Gamma) K`,
//!   `dK = (dP ⊙ Gamma)^T Q + e^(gamma_last - gamma) (V' dS'^T) + ...`;
//! - `dW = -dV' S^T`, `dS = e^gamma_last dS' + (Q e^gamma)^T dO - W^T dV'`;
//! - `dV_b = A^T dV'`, `dK_b = A^T dW`, and from `dL = -A^T dA A^T` with
//!   `dA = dV' V_b^T + dW K_b^T`: `dL = -(dV_b U^T + dK_b W^T)`;
//! - every factor's share of d gamma (each Gamma_ij = exp(gamma_i - gamma_j) gives
//!   +x to i and -x to j), then `dg = reverse cumsum(d gamma)` within the chunk.
//!
//! Shapes: as in `chunk`; do rows strided in (T, Hv Dv); outputs (T, Dk), (T, Dv), (T).

use super::chunk::{prepare, with_bufs, Bufs};
use super::delta::{HeadGrads, HeadIn};
use super::linalg::{mm, Mat};
use crate::layers::multiversion;
use crate::layers::rmsnorm::dot16;

/// One head's output gradient: row t at `d[t * stride + off..][..Dv]`.
#[derive(Clone, Copy)]
pub(super) struct DoView<'a> {
    pub d: &'a [f32],
    pub stride: usize,
    pub off: usize,
}

impl<'a> DoView<'a> {
    fn rows(&self, t0: usize, c: usize, dv: usize) -> Mat<'a> {
        Mat::strided(&self.d[t0 * self.stride + self.off..], c, dv, self.stride)
    }
}

multiversion! {
    /// dV', dP ⊙ Gamma, dQ and the dP share of dK for a prepared chunk; d gamma started.
    fn grad_out(b: &mut Bufs<'_>, x: HeadIn<'_>, s: &[f32], d_o: Mat<'_>, dq: &mut [f32], dk: &mut [f32]) {
        let c = x.beta.len();
        let (dkn, dv) = (x.q.len() / c, x.v.len() / c);
        b.dgam[..c].fill(0.0);
        // (C, Dv) dV' = P^T dO + K_d dS'
        mm(b.dvp, Mat::new(b.p, c, c).t(), d_o, 1.0, false);
        mm(b.dvp, Mat::new(b.kd, c, dkn), Mat::new(b.ds, dkn, dv), 1.0, true);
        // (C, C) dP = dO V'^T; P = Q K^T ⊙ Gamma is 0 above the diagonal, so is Gamma
        mm(b.dp, d_o, Mat::new(b.vp, c, dv).t(), 1.0, false);
        for i in 0..c {
            for j in 0..c {
                let ij = i * c + j;
                let e = b.dp[ij] * b.p[ij];
                b.dgam[i] += e;
                b.dgam[j] -= e;
                b.dp[ij] *= b.gm[ij];
            }
        }
        // (C, Dk) dQ = e^gamma (dO S^T) + (dP ⊙ Gamma) K, dK = (dP ⊙ Gamma)^T Q
        mm(dq, d_o, Mat::new(s, dkn, dv).t(), 1.0, false);
        for i in 0..c {
            let row = &mut dq[i * dkn..(i + 1) * dkn];
            row.iter_mut().for_each(|v| *v *= b.eg[i]);
            b.dgam[i] += dot16(row, &x.q[i * dkn..(i + 1) * dkn]);
        }
        mm(dq, Mat::new(b.dp, c, c), Mat::new(x.k, c, dkn), 1.0, true);
        mm(dk, Mat::new(b.dp, c, c).t(), Mat::new(x.q, c, dkn), 1.0, false);
    }
}

multiversion! {
    /// Through the state update: the K_d share of dK, dW, and dS <- the gradient of the
    /// chunk's start state.
    fn grad_state(b: &mut Bufs<'_>, s: &[f32], d_o: Mat<'_>, c: usize, dk: &mut [f32]) {
        let dkn = dk.len() / c;
        let dv = s.len() / dkn;
        let cd = c * dkn;
        // (C, Dk) dK_d = V' dS'^T, K_d = e^(gamma_last - gamma) K
        mm(b.dkd, Mat::new(b.vp, c, dv), Mat::new(b.ds, dkn, dv).t(), 1.0, false);
        let mut dlast = b.eg[c - 1] * dot16(s, b.ds);
        for i in 0..c {
            let (kd, dkd) = (&b.kd[i * dkn..(i + 1) * dkn], &b.dkd[i * dkn..(i + 1) * dkn]);
            let tau = dot16(kd, dkd);
            dlast += tau;
            b.dgam[i] -= tau;
            for (a, g) in dk[i * dkn..(i + 1) * dkn].iter_mut().zip(dkd) {
                *a += b.ed[i] * g;
            }
        }
        b.dgam[c - 1] += dlast;
        // (C, Dk) dW = -dV' S^T
        mm(&mut b.dw[..cd], Mat::new(b.dvp, c, dv), Mat::new(s, dkn, dv).t(), -1.0, false);
        // (Dk, Dv) dS = e^gamma_last dS' + (Q e^gamma)^T dO - W^T dV'
        let el = b.eg[c - 1];
        b.ds.iter_mut().for_each(|v| *v *= el);
        mm(b.ds, Mat::new(b.qe, c, dkn).t(), d_o, 1.0, true);
        mm(b.ds, Mat::new(b.w, c, dkn).t(), Mat::new(b.dvp, c, dv), -1.0, true);
    }
}

multiversion! {
    /// Through the WY solves: dV, dbeta, the K_b and M shares of dK, and dg.
    fn grad_wy(b: &mut Bufs<'_>, x: HeadIn<'_>, g: &mut HeadGrads<'_>) {
        let c = x.beta.len();
        let (dkn, dv) = (x.q.len() / c, x.v.len() / c);
        // dV_b = A^T dV', dK_b = A^T dW; (C, C) dL = -(dV_b U^T + dK_b W^T)
        let at = Mat::new(b.a, c, c).t();
        mm(b.vb, at, Mat::new(b.dvp, c, dv), 1.0, false);
        mm(b.dkb, at, Mat::new(b.dw, c, dkn), 1.0, false);
        mm(b.dl, Mat::new(b.vb, c, dv), Mat::new(b.u, c, dv).t(), -1.0, false);
        mm(b.dl, Mat::new(b.dkb, c, dkn), Mat::new(b.w, c, dkn).t(), -1.0, true);
        // V_b = diag(beta) V, K_b = diag(beta e^gamma) K
        for i in 0..c {
            let (ri, rv) = (i * dkn..(i + 1) * dkn, i * dv..(i + 1) * dv);
            let (dkb, dvb) = (&b.dkb[ri.clone()], &b.vb[rv.clone()]);
            g.dbeta[i] = dot16(&x.v[rv.clone()], dvb) + b.eg[i] * dot16(&x.k[ri.clone()], dkb);
            b.dgam[i] += dot16(&b.kb[ri.clone()], dkb);
            let be = x.beta[i] * b.eg[i];
            g.dv[rv].iter_mut().zip(dvb).for_each(|(a, d)| *a = x.beta[i] * d);
            g.dk[ri].iter_mut().zip(dkb).for_each(|(a, d)| *a += be * d);
        }
        // L = diag(beta) M, M = K K^T ⊙ Gamma strictly below the diagonal (M is 0 elsewhere,
        // so only those entries add): dL -> dM ⊙ Gamma
        for i in 0..c {
            for j in 0..c {
                let ij = i * c + j;
                let (dm, e) = (x.beta[i] * b.dl[ij], b.dl[ij] * b.m[ij]);
                g.dbeta[i] += e;
                b.dgam[i] += x.beta[i] * e;
                b.dgam[j] -= x.beta[i] * e;
                b.dl[ij] = if j < i { dm * b.gm[ij] } else { 0.0 };
            }
        }
        mm(g.dk, Mat::new(b.dl, c, c), Mat::new(x.k, c, dkn), 1.0, true);
        mm(g.dk, Mat::new(b.dl, c, c).t(), Mat::new(x.k, c, dkn), 1.0, true);
        // gamma = cumsum(g): dg_j = sum over i >= j of d gamma_i
        let mut acc = 0f32;
        for i in (0..c).rev() {
            acc += b.dgam[i];
            g.dg[i] = acc;
        }
    }
}

/// All T tokens of one head: the input gradients `g` written from do, from the chunk start
/// states (n_chunks, Dk, Dv) the forward stored and a zero gradient of the final state.
pub(super) fn head_backward(x: HeadIn, states: &[f32], d_o: DoView, g: HeadGrads, chunk: usize) {
    let t = x.beta.len();
    let (dk, dv) = (x.q.len() / t, x.v.len() / t);
    let n = dk * dv;
    assert_eq!(states.len(), t.div_ceil(chunk) * n);
    with_bufs(chunk.min(t), dk, dv, |mut b| {
        b.ds.fill(0.0);
        for ci in (0..t.div_ceil(chunk)).rev() {
            let t0 = ci * chunk;
            let c = chunk.min(t - t0);
            let (xc, s) = (x.rows(t0, c, dk, dv), &states[ci * n..(ci + 1) * n]);
            prepare(&mut b, xc, s);
            let mut gc = HeadGrads {
                dq: &mut g.dq[t0 * dk..(t0 + c) * dk],
                dk: &mut g.dk[t0 * dk..(t0 + c) * dk],
                dv: &mut g.dv[t0 * dv..(t0 + c) * dv],
                dbeta: &mut g.dbeta[t0..t0 + c],
                dg: &mut g.dg[t0..t0 + c],
            };
            let d_oc = d_o.rows(t0, c, dv);
            grad_out(&mut b, xc, s, d_oc, gc.dq, gc.dk);
            grad_state(&mut b, s, d_oc, c, gc.dk);
            grad_wy(&mut b, xc, &mut gc);
        }
    });
}
