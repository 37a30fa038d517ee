//! Causal self-attention with grouped-query heads (GQA, Ainslie et al. 2023), fused in the
//! manner of FlashAttention (Dao et al. 2022): the forward walks the keys in blocks with an
//! online softmax and keeps only the log-sum-exp of each query row; the backward recomputes
//! the probabilities from it, so no (T, T) matrix is ever stored.
//!
//! Shapes: qkv (N, S) with N = B*T rows of S = (H + 2 Hkv) D: the H query heads, then Hkv key
//! heads, then Hkv value heads, each of D. Query head h reads key/value head h / (H / Hkv).
//! out (N, H*D), lse (B, H, T).

use super::act::exp_approx;
use super::rmsnorm::dot16;
use super::{multiversion, SendPtr};
use rayon::prelude::*;

/// Keys per block of the online softmax (scores live on the stack).
const BLOCK: usize = 64;
/// Largest head size the stack accumulators hold.
pub const MAX_HEAD_DIM: usize = 256;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attention {
    pub n_head: usize,
    pub n_kv_head: usize,
    pub head_dim: usize,
}

/// Where one query head's task reads and writes.
#[derive(Clone, Copy)]
struct HeadJob {
    /// Row stride of qkv, and offsets of this head's q, k and v in a row.
    stride: usize,
    q: usize,
    k: usize,
    v: usize,
    /// Row stride of out, and this head's offset in it.
    out_stride: usize,
    o: usize,
    d: usize,
    t: usize,
    scale: f32,
}

multiversion! {
    /// One (sequence, query head): qkv holds the sequence's T rows, out its T output rows.
    fn head_forward(qkv: &[f32], job: HeadJob, out: SendPtr, lse: &mut [f32]) {
        let HeadJob { stride, q, k, v, out_stride, o, d, t, scale } = job;
        let mut s = [0f32; BLOCK];
        let mut acc = [0f32; MAX_HEAD_DIM];
        for i in 0..t {
            let qi = &qkv[i * stride + q..i * stride + q + d];
            let acc = &mut acc[..d];
            acc.fill(0.0);
            let (mut m, mut l) = (f32::NEG_INFINITY, 0f32);
            for j0 in (0..=i).step_by(BLOCK) {
                let nb = (i + 1 - j0).min(BLOCK);
                let mut bm = f32::NEG_INFINITY;
                for jj in 0..nb {
                    let kj = &qkv[(j0 + jj) * stride + k..(j0 + jj) * stride + k + d];
                    s[jj] = dot16(qi, kj) * scale;
                    bm = bm.max(s[jj]);
                }
                if bm > m {
                    let corr = if m == f32::NEG_INFINITY { 0.0 } else { exp_approx(m - bm) };
                    l *= corr;
                    acc.iter_mut().for_each(|a| *a *= corr);
                    m = bm;
                }
                for p in s[..nb].iter_mut() {
                    *p = exp_approx(*p - m);
                }
                for jj in 0..nb {
                    let p = s[jj];
                    l += p;
                    let vj = &qkv[(j0 + jj) * stride + v..(j0 + jj) * stride + v + d];
                    for (a, x) in acc.iter_mut().zip(vj) {
                        *a += p * x;
                    }
                }
            }
            let inv = 1.0 / l;
            // SAFETY: row i, columns o..o+d of out belong to this task alone.
            let orow = unsafe { std::slice::from_raw_parts_mut(out.get().add(i * out_stride + o), d) };
            for (y, a) in orow.iter_mut().zip(acc.iter()) {
                *y = a * inv;
            }
            lse[i] = m + l.ln();
        }
    }
}

multiversion! {
    /// The gradient of one (sequence, query head) into dqkv (same layout as qkv): sets dq,
    /// adds into dk and dv (shared by the query heads of a group, so the caller runs a group's
    /// heads one after another on one task).
    fn head_backward(dout: &[f32], qkv: &[f32], out: &[f32], lse: &[f32], job: HeadJob, dqkv: SendPtr) {
        let HeadJob { stride, q, k, v, out_stride, o, d, t, scale } = job;
        let (mut p, mut ds) = ([0f32; BLOCK], [0f32; BLOCK]);
        let mut dq = [0f32; MAX_HEAD_DIM];
        for i in 0..t {
            let qi = &qkv[i * stride + q..i * stride + q + d];
            let doi = &dout[i * out_stride + o..i * out_stride + o + d];
            let oi = &out[i * out_stride + o..i * out_stride + o + d];
            // D_i = dO_i . O_i: the softmax backward's row term
            let di = dot16(doi, oi);
            let dq = &mut dq[..d];
            dq.fill(0.0);
            for j0 in (0..=i).step_by(BLOCK) {
                let nb = (i + 1 - j0).min(BLOCK);
                for jj in 0..nb {
                    let kj = &qkv[(j0 + jj) * stride + k..(j0 + jj) * stride + k + d];
                    p[jj] = dot16(qi, kj) * scale - lse[i];
                }
                for x in p[..nb].iter_mut() {
                    *x = exp_approx(*x);
                }
                for jj in 0..nb {
                    let vj = &qkv[(j0 + jj) * stride + v..(j0 + jj) * stride + v + d];
                    ds[jj] = p[jj] * (dot16(doi, vj) - di);
                }
                for jj in 0..nb {
                    let row = (j0 + jj) * stride;
                    let kj = &qkv[row + k..row + k + d];
                    for (a, x) in dq.iter_mut().zip(kj) {
                        *a += ds[jj] * x;
                    }
                    // SAFETY: the k and v columns of this group's kv head belong to this task.
                    let (dk, dv) = unsafe {
                        (
                            std::slice::from_raw_parts_mut(dqkv.get().add(row + k), d),
                            std::slice::from_raw_parts_mut(dqkv.get().add(row + v), d),
                        )
                    };
                    let dsk = ds[jj] * scale;
                    for c in 0..d {
                        dk[c] += dsk * qi[c];
                        dv[c] += p[jj] * doi[c];
                    }
                }
            }
            // SAFETY: the q columns of this head in row i belong to this task.
            let dqi = unsafe { std::slice::from_raw_parts_mut(dqkv.get().add(i * stride + q), d) };
            for (y, a) in dqi.iter_mut().zip(dq.iter()) {
                *y = a * scale;
            }
        }
    }
}

impl Attention {
    pub fn new(n_head: usize, n_kv_head: usize, head_dim: usize) -> Self {
        assert!(
            n_kv_head > 0 && n_head % n_kv_head == 0,
            "{n_kv_head} kv heads must divide {n_head} heads"
        );
        assert!(
            head_dim <= MAX_HEAD_DIM,
            "head size {head_dim} is over {MAX_HEAD_DIM}"
        );
        Self {
            n_head,
            n_kv_head,
            head_dim,
        }
    }

    /// Width S of a qkv row.
    pub fn qkv_width(&self) -> usize {
        (self.n_head + 2 * self.n_kv_head) * self.head_dim
    }

    fn job(&self, h: usize, t: usize) -> HeadJob {
        let d = self.head_dim;
        let g = h / (self.n_head / self.n_kv_head);
        HeadJob {
            stride: self.qkv_width(),
            q: h * d,
            k: (self.n_head + g) * d,
            v: (self.n_head + self.n_kv_head + g) * d,
            out_stride: self.n_head * d,
            o: h * d,
            d,
            t,
            scale: 1.0 / (d as f32).sqrt(),
        }
    }

    /// qkv (B*T, S) -> out (B*T, H*D), saving lse (B, H, T). One task per (sequence, head).
    pub fn forward(&self, qkv: &[f32], out: &mut [f32], lse: &mut [f32], b: usize, t: usize) {
        let (s, hd, nh) = (self.qkv_width(), self.n_head * self.head_dim, self.n_head);
        assert!(qkv.len() >= b * t * s && out.len() >= b * t * hd && lse.len() >= b * nh * t);
        let out_ptr = SendPtr(out.as_mut_ptr());
        lse[..b * nh * t]
            .par_chunks_mut(t)
            .enumerate()
            .for_each(|(bh, lse)| {
                let (bi, h) = (bh / nh, bh % nh);
                let seq = &qkv[bi * t * s..(bi + 1) * t * s];
                // SAFETY: the sequence's output rows start here and stay inside out (checked above).
                let o = SendPtr(unsafe { out_ptr.get().add(bi * t * hd) });
                head_forward(seq, self.job(h, t), o, lse);
            });
    }

    /// From dout (B*T, H*D): dqkv (B*T, S) is overwritten with the gradient of qkv.
    /// One task per (sequence, kv head) runs the query heads of its group in order.
    #[allow(clippy::too_many_arguments)]
    pub fn backward(
        &self,
        dout: &[f32],
        qkv: &[f32],
        out: &[f32],
        lse: &[f32],
        dqkv: &mut [f32],
        b: usize,
        t: usize,
    ) {
        let (s, hd, nh, nkv, d) = (
            self.qkv_width(),
            self.n_head * self.head_dim,
            self.n_head,
            self.n_kv_head,
            self.head_dim,
        );
        assert!(dqkv.len() >= b * t * s && dout.len() >= b * t * hd && lse.len() >= b * nh * t);
        let rep = nh / nkv;
        let ptr = SendPtr(dqkv.as_mut_ptr());
        (0..b * nkv).into_par_iter().for_each(|bg| {
            let (bi, g) = (bg / nkv, bg % nkv);
            // SAFETY: the sequence's rows of dqkv start here; this task touches only its kv
            // head's k/v columns and its query heads' q columns.
            let seq = SendPtr(unsafe { ptr.get().add(bi * t * s) });
            let job0 = self.job(g * rep, t);
            for i in 0..t {
                // SAFETY: as above.
                unsafe {
                    std::slice::from_raw_parts_mut(seq.get().add(i * s + job0.k), d).fill(0.0);
                    std::slice::from_raw_parts_mut(seq.get().add(i * s + job0.v), d).fill(0.0);
                }
            }
            for h in g * rep..(g + 1) * rep {
                let rows = bi * t..(bi + 1) * t;
                head_backward(
                    &dout[rows.start * hd..rows.end * hd],
                    &qkv[rows.start * s..rows.end * s],
                    &out[rows.start * hd..rows.end * hd],
                    &lse[(bi * nh + h) * t..(bi * nh + h + 1) * t],
                    self.job(h, t),
                    seq,
                );
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_data;
    use crate::layers::gradcheck::{check, weighted_sum};

    /// Plain softmax attention in f64, the reference.
    fn naive(a: &Attention, qkv: &[f32], b: usize, t: usize) -> Vec<f64> {
        let (s, d, nh) = (a.qkv_width(), a.head_dim, a.n_head);
        let mut out = vec![0f64; b * t * nh * d];
        for bi in 0..b {
            for h in 0..nh {
                let j = a.job(h, t);
                for i in 0..t {
                    let row = |r: usize, off: usize| {
                        &qkv[(bi * t + r) * s + off..(bi * t + r) * s + off + d]
                    };
                    let sc: Vec<f64> = (0..=i)
                        .map(|r| {
                            row(i, j.q)
                                .iter()
                                .zip(row(r, j.k))
                                .map(|(x, y)| *x as f64 * *y as f64)
                                .sum::<f64>()
                                * j.scale as f64
                        })
                        .collect();
                    let m = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let z: f64 = sc.iter().map(|x| (x - m).exp()).sum();
                    for (r, x) in sc.iter().enumerate() {
                        for c in 0..d {
                            out[(bi * t + i) * nh * d + h * d + c] +=
                                (x - m).exp() / z * row(r, j.v)[c] as f64;
                        }
                    }
                }
            }
        }
        out
    }

    #[test]
    fn attention_forward_matches_naive_softmax() {
        // t > BLOCK exercises the online rescaling across key blocks
        let a = Attention::new(4, 2, 8);
        let (b, t) = (2, 70);
        let qkv: Vec<f32> = test_data(b * t * a.qkv_width(), 1)
            .iter()
            .map(|v| 2.0 * v)
            .collect();
        let (mut out, mut lse) = (vec![0.0; b * t * 32], vec![0.0; b * 4 * t]);
        a.forward(&qkv, &mut out, &mut lse, b, t);
        let want = naive(&a, &qkv, b, t);
        for (x, y) in out.iter().zip(&want) {
            assert!((*x as f64 - y).abs() < 1e-5, "{x} vs {y}");
        }
    }

    #[test]
    fn attention_backward_matches_finite_differences() {
        let a = Attention::new(4, 2, 4);
        let (b, t) = (2, 5);
        let s = a.qkv_width();
        let qkv = test_data(b * t * s, 2);
        let dy = test_data(b * t * 16, 3);
        let run = |qkv: &[f32]| {
            let (mut out, mut lse) = (vec![0.0; b * t * 16], vec![0.0; b * 4 * t]);
            a.forward(qkv, &mut out, &mut lse, b, t);
            weighted_sum(&dy, &out)
        };
        let (mut out, mut lse) = (vec![0.0; b * t * 16], vec![0.0; b * 4 * t]);
        a.forward(&qkv, &mut out, &mut lse, b, t);
        let mut dqkv = vec![f32::NAN; b * t * s];
        a.backward(&dy, &qkv, &out, &lse, &mut dqkv, b, t);
        check("attention dqkv", &qkv, &dqkv, 1e-2, 2e-3, run);
    }
}
