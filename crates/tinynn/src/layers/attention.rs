//! Self-attention (causal, or bidirectional for encoders) with grouped-query heads (GQA, Ainslie et al. 2023), fused in the
//! manner of FlashAttention (Dao et al. 2022): the forward walks the keys in blocks with an
//! online softmax and keeps only the log-sum-exp of each query row; the backward recomputes
//! the probabilities from it, so no (T, T) matrix is ever stored.
//!
//! Shapes: qkv (N, S) with N = B*T rows of S = (H + 2 Hkv) D: the H query heads, then Hkv key
//! heads, then Hkv value heads, each of D. Query head h reads key/value head h / (H / Hkv).
//! out (N, H*D), lse (B, H, T).
//!
//! Packed rows (several samples in one sequence, as varlen FlashAttention): `pos` (N) gives
//! each row's position inside its sample, 0 where a sample starts; a query then attends only
//! to the keys of its own sample, so each sample is computed as if it stood alone.

use super::attention_tiles::{head_backward, head_forward, HeadJob};
use super::{in_serial, SendPtr};
use rayon::prelude::*;

/// Largest head size accepted.
pub const MAX_HEAD_DIM: usize = 256;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attention {
    pub n_head: usize,
    pub n_kv_head: usize,
    pub head_dim: usize,
    /// Each query sees the keys up to its own position (decoders) or all of its sequence
    /// (encoders: ViT's patches and CLS token).
    pub causal: bool,
    /// Sliding-window attention (Gemma 3's local layers): a query sees its own position and
    /// the `window - 1` before it only.
    pub window: Option<usize>,
}

impl Attention {
    pub fn new(n_head: usize, n_kv_head: usize, head_dim: usize) -> Self {
        assert!(
            n_kv_head > 0 && n_head.is_multiple_of(n_kv_head),
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
            causal: true,
            window: None,
        }
    }

    /// The same heads over a sliding window of `window` positions (`None`: every earlier one).
    pub fn with_window(self, window: Option<usize>) -> Self {
        Self { window, ..self }
    }

    /// The same heads without the causal mask.
    pub fn bidirectional(self) -> Self {
        Self {
            causal: false,
            ..self
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
            causal: self.causal,
            window: self.window.filter(|_| self.causal).unwrap_or(0),
        }
    }

    /// Rounds the keys and values of qkv (N, S) to f16, as an f16 KV cache stores them (the
    /// queries stay f32): a forward that sees what cached inference sees. The backward treats
    /// the rounding as the identity (straight through).
    pub fn round_kv_f16(&self, qkv: &mut [f32], n: usize) {
        let (s, q) = (self.qkv_width(), self.n_head * self.head_dim);
        for row in qkv[..n * s].chunks_exact_mut(s) {
            row[q..]
                .iter_mut()
                .for_each(|v| *v = half::f16::from_f32(*v).to_f32());
        }
    }

    /// qkv (B*T, S) -> out (B*T, H*D), saving lse (B, H, T). One task per (sequence, head).
    pub fn forward(&self, qkv: &[f32], out: &mut [f32], lse: &mut [f32], b: usize, t: usize) {
        self.forward_packed(qkv, out, lse, b, t, None)
    }

    /// [`Self::forward`] with each sequence cut into samples by `pos` (N), see the module doc.
    pub fn forward_packed(
        &self,
        qkv: &[f32],
        out: &mut [f32],
        lse: &mut [f32],
        b: usize,
        t: usize,
        pos: Option<&[u32]>,
    ) {
        let _prof = crate::profile::timer(crate::profile::Kind::Attention);
        let (s, hd, nh) = (self.qkv_width(), self.n_head * self.head_dim, self.n_head);
        assert!(qkv.len() >= b * t * s && out.len() >= b * t * hd && lse.len() >= b * nh * t);
        assert!(
            pos.is_none_or(|p| p.len() >= b * t),
            "pos must give every row"
        );
        let out_ptr = SendPtr(out.as_mut_ptr());
        let task = |(bh, lse): (usize, &mut [f32])| {
            let (bi, h) = (bh / nh, bh % nh);
            for (r0, len) in samples(pos.map(|p| &p[bi * t..(bi + 1) * t]), t) {
                let rows = bi * t + r0..bi * t + r0 + len;
                let seq = &qkv[rows.start * s..rows.end * s];
                // SAFETY: the sample's output rows start here and stay inside out (checked above).
                let o = SendPtr(unsafe { out_ptr.get().add(rows.start * hd) });
                head_forward(seq, self.job(h, len), o, &mut lse[r0..r0 + len]);
            }
        };
        if in_serial() {
            lse[..b * nh * t].chunks_mut(t).enumerate().for_each(task);
        } else {
            lse[..b * nh * t]
                .par_chunks_mut(t)
                .enumerate()
                .for_each(task);
        }
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
        self.backward_packed(dout, qkv, out, lse, dqkv, b, t, None)
    }

    /// [`Self::backward`] of [`Self::forward_packed`] with the same `pos`.
    #[allow(clippy::too_many_arguments)]
    pub fn backward_packed(
        &self,
        dout: &[f32],
        qkv: &[f32],
        out: &[f32],
        lse: &[f32],
        dqkv: &mut [f32],
        b: usize,
        t: usize,
        pos: Option<&[u32]>,
    ) {
        let _prof = crate::profile::timer(crate::profile::Kind::Attention);
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
        let task = |bg: usize| {
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
                for (r0, len) in samples(pos.map(|p| &p[bi * t..(bi + 1) * t]), t) {
                    let rows = bi * t + r0..bi * t + r0 + len;
                    let l0 = (bi * nh + h) * t + r0;
                    // SAFETY: the sample's rows of this sequence's dqkv.
                    let at = SendPtr(unsafe { seq.get().add(r0 * s) });
                    head_backward(
                        &dout[rows.start * hd..rows.end * hd],
                        &qkv[rows.start * s..rows.end * s],
                        &out[rows.start * hd..rows.end * hd],
                        &lse[l0..l0 + len],
                        self.job(h, len),
                        at,
                    );
                }
            }
        };
        if in_serial() {
            (0..b * nkv).for_each(task);
        } else {
            (0..b * nkv).into_par_iter().for_each(task);
        }
    }
}

/// The samples of one sequence of `t` rows as (first row, length): split where `pos` is 0,
/// or the whole sequence without `pos`.
fn samples(pos: Option<&[u32]>, t: usize) -> impl Iterator<Item = (usize, usize)> + '_ {
    let mut starts: Vec<usize> = match pos {
        None => vec![0],
        Some(p) => (0..t).filter(|&i| i == 0 || p[i] == 0).collect(),
    };
    starts.push(t);
    (0..starts.len() - 1).map(move |i| (starts[i], starts[i + 1] - starts[i]))
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
                    let seen = if a.causal { i + 1 } else { t };
                    let first = a.window.map_or(0, |w| (i + 1).saturating_sub(w));
                    let sc: Vec<f64> = (first..seen)
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
                    for (r, x) in (first..).zip(&sc) {
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
        // t = 20: one query tile; t = 70 > QB: several, and the causal mask inside a tile
        for (t, a) in [20, 70].into_iter().flat_map(|t| {
            [
                (t, Attention::new(4, 2, 8)),
                (t, Attention::new(4, 2, 8).bidirectional()),
                (t, Attention::new(4, 2, 8).with_window(Some(7))),
            ]
        }) {
            let b = 2;
            let qkv: Vec<f32> = test_data(b * t * a.qkv_width(), 1)
                .iter()
                .map(|v| 2.0 * v)
                .collect();
            let (mut out, mut lse) = (vec![0.0; b * t * 32], vec![0.0; b * 4 * t]);
            a.forward(&qkv, &mut out, &mut lse, b, t);
            let want = naive(&a, &qkv, b, t);
            for (x, y) in out.iter().zip(&want) {
                assert!(
                    (*x as f64 - y).abs() < 1e-5,
                    "t = {t}, causal {}: {x} vs {y}",
                    a.causal
                );
            }
        }
    }

    #[test]
    fn attention_backward_matches_finite_differences() {
        // one tile (t = 5) and several (t = 70 > QB)
        let kinds = [
            Attention::new(4, 2, 4),
            Attention::new(4, 2, 4).bidirectional(),
            Attention::new(4, 2, 4).with_window(Some(3)),
        ];
        for (b, t, a) in [(2, 5), (1, 70)]
            .into_iter()
            .flat_map(|(b, t)| kinds.map(|a| (b, t, a)))
        {
            let s = a.qkv_width();
            let qkv: Vec<f32> = test_data(b * t * s, 2).iter().map(|v| 2.0 * v).collect();
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

    #[test]
    fn packed_samples_attend_only_inside_themselves() {
        // one sequence holding samples of 5, 66 (over one query tile) and 4 rows
        let a = Attention::new(4, 2, 4);
        let (s, hd) = (a.qkv_width(), 16);
        let lens = [5usize, 66, 4];
        let t: usize = lens.iter().sum();
        let pos: Vec<u32> = lens.iter().flat_map(|&l| 0..l as u32).collect();
        let qkv: Vec<f32> = test_data(t * s, 4).iter().map(|v| 2.0 * v).collect();
        let dy = test_data(t * hd, 5);
        let (mut out, mut lse) = (vec![0.0; t * hd], vec![0.0; 4 * t]);
        a.forward_packed(&qkv, &mut out, &mut lse, 1, t, Some(&pos));
        let mut dqkv = vec![f32::NAN; t * s];
        a.backward_packed(&dy, &qkv, &out, &lse, &mut dqkv, 1, t, Some(&pos));
        let mut r0 = 0;
        for &l in &lens {
            let rows = |x: &[f32], w: usize| x[r0 * w..(r0 + l) * w].to_vec();
            let (mut o1, mut lse1) = (vec![0.0; l * hd], vec![0.0; 4 * l]);
            a.forward(&rows(&qkv, s), &mut o1, &mut lse1, 1, l);
            assert_eq!(o1, rows(&out, hd), "sample at row {r0}: forward");
            let mut d1 = vec![f32::NAN; l * s];
            a.backward(&rows(&dy, hd), &rows(&qkv, s), &o1, &lse1, &mut d1, 1, l);
            assert_eq!(d1, rows(&dqkv, s), "sample at row {r0}: backward");
            r0 += l;
        }
    }
}
