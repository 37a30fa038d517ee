//! The pre-LN transformer encoder block of ViT (Dosovitskiy et al. 2021, eq. 2-3; timm's
//! `Block`): x + Attn(LN1(x)), then + MLP(LN2(.)) with a GELU MLP and bidirectional
//! multi-head attention, forward and backward side by side (llm.c's style). One definition,
//! used by the image classifier's trainer and its inference alike.
//!
//! Shapes: x (N, C) with N = B*T rows, T tokens per image (patches and CLS); qkv (N, 3C);
//! MLP (N, F). Parameters in one slice, in the order of [`EncoderBlock::PARAMS`].

use super::act::{gelu_backward, gelu_forward};
use super::attention::Attention;
use super::layernorm::LayerNorm;
use super::linear::Linear;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EncoderBlock {
    /// C, heads, F.
    pub width: usize,
    pub n_head: usize,
    pub mlp: usize,
}

/// What one block keeps from its forward for its backward.
#[derive(Default)]
pub struct EncoderActs {
    pub x: Vec<f32>,
    pub h1: Vec<f32>,
    pub mean1: Vec<f32>,
    pub rstd1: Vec<f32>,
    pub qkv: Vec<f32>,
    pub att: Vec<f32>,
    pub lse: Vec<f32>,
    pub x2: Vec<f32>,
    pub h2: Vec<f32>,
    pub mean2: Vec<f32>,
    pub rstd2: Vec<f32>,
    pub u: Vec<f32>,
    pub g: Vec<f32>,
}

const EPS: f32 = 1e-6;

thread_local! {
    /// The backward's gradient buffers, kept between calls.
    static BWD: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl EncoderBlock {
    /// Parameter names, in their order in the slice.
    pub const PARAMS: [&'static str; 12] = [
        "ln1.weight",
        "ln1.bias",
        "attn.qkv.weight",
        "attn.qkv.bias",
        "attn.proj.weight",
        "attn.proj.bias",
        "ln2.weight",
        "ln2.bias",
        "mlp.fc1.weight",
        "mlp.fc1.bias",
        "mlp.fc2.weight",
        "mlp.fc2.bias",
    ];

    pub fn new(width: usize, n_head: usize, mlp: usize) -> Self {
        assert!(
            width.is_multiple_of(n_head),
            "{n_head} heads must divide width {width}"
        );
        Self { width, n_head, mlp }
    }

    /// Sizes of the parameters, as [`Self::PARAMS`].
    pub fn shapes(&self) -> [usize; 12] {
        let (c, f) = (self.width, self.mlp);
        [c, c, 3 * c * c, 3 * c, c * c, c, c, c, f * c, f, c * f, c]
    }

    pub fn n_params(&self) -> usize {
        self.shapes().iter().sum()
    }

    /// The parameters as slices of `p`, in [`Self::PARAMS`] order.
    pub fn split<'a>(&self, p: &'a [f32]) -> [&'a [f32]; 12] {
        let mut rest = p;
        self.shapes().map(|n| {
            let (a, b) = rest.split_at(n);
            rest = b;
            a
        })
    }

    fn split_mut<'a>(&self, p: &'a mut [f32]) -> [&'a mut [f32]; 12] {
        let mut rest = p;
        self.shapes().map(|n| {
            let (a, b) = std::mem::take(&mut rest).split_at_mut(n);
            rest = b;
            a
        })
    }

    fn attention(&self) -> Attention {
        Attention::new(self.n_head, self.n_head, self.width / self.n_head).bidirectional()
    }

    /// `x` (B*T, C) -> `y` (B*T, C), keeping what the backward needs in `a`.
    pub fn forward(
        &self,
        p: &[f32],
        x: &[f32],
        y: &mut [f32],
        a: &mut EncoderActs,
        b: usize,
        t: usize,
    ) {
        let (c, f, n) = (self.width, self.mlp, b * t);
        let [l1w, l1b, wqkv, bqkv, wo, bo, l2w, l2b, w1, b1, w2, b2] = self.split(p);
        let ln = LayerNorm::new(c, EPS);
        let resize = |v: &mut Vec<f32>, len: usize| v.resize(len, 0.0);
        a.x.clear();
        a.x.extend_from_slice(&x[..n * c]);
        resize(&mut a.h1, n * c);
        resize(&mut a.mean1, n);
        resize(&mut a.rstd1, n);
        ln.forward(x, l1w, l1b, 1.0, &mut a.h1, &mut a.mean1, &mut a.rstd1, n);
        // (N, C) -> (N, 3C) -> attention -> (N, C)
        resize(&mut a.qkv, n * 3 * c);
        Linear::new(c, 3 * c).forward(&a.h1, wqkv, Some(bqkv), &mut a.qkv, n, false);
        resize(&mut a.att, n * c);
        resize(&mut a.lse, b * self.n_head * t);
        self.attention()
            .forward(&a.qkv, &mut a.att, &mut a.lse, b, t);
        a.x2.clear();
        a.x2.extend_from_slice(&x[..n * c]);
        Linear::new(c, c).forward(&a.att, wo, Some(bo), &mut a.x2, n, true);
        resize(&mut a.h2, n * c);
        resize(&mut a.mean2, n);
        resize(&mut a.rstd2, n);
        ln.forward(
            &a.x2,
            l2w,
            l2b,
            1.0,
            &mut a.h2,
            &mut a.mean2,
            &mut a.rstd2,
            n,
        );
        // (N, C) -> (N, F) -> gelu -> (N, C)
        resize(&mut a.u, n * f);
        Linear::new(c, f).forward(&a.h2, w1, Some(b1), &mut a.u, n, false);
        resize(&mut a.g, n * f);
        gelu_forward(&a.u, &mut a.g);
        y[..n * c].copy_from_slice(&a.x2);
        Linear::new(f, c).forward(&a.g, w2, Some(b2), y, n, true);
    }

    /// From `dy` (B*T, C): `dx` (B*T, C) is overwritten, `dp` (the parameters' gradient) added to.
    #[allow(clippy::too_many_arguments)]
    pub fn backward(
        &self,
        p: &[f32],
        a: &EncoderActs,
        dy: &[f32],
        dx: &mut [f32],
        dp: &mut [f32],
        b: usize,
        t: usize,
    ) {
        let (c, f, n) = (self.width, self.mlp, b * t);
        let [l1w, _, wqkv, _, wo, _, l2w, _, w1, _, w2, _] = self.split(p);
        let [dl1w, dl1b, dwqkv, dbqkv, dwo, dbo, dl2w, dl2b, dw1, db1, dw2, db2] =
            self.split_mut(dp);
        let ln = LayerNorm::new(c, EPS);
        // every buffer below is overwritten before it is read: one per-thread scratch
        let dx = &mut dx[..n * c];
        crate::kernels::with_scratch(&BWD, n * (6 * c + 2 * f), |buf| {
            let (dg, buf) = buf.split_at_mut(n * f);
            let (du, buf) = buf.split_at_mut(n * f);
            let (dh2, buf) = buf.split_at_mut(n * c);
            let (datt, buf) = buf.split_at_mut(n * c);
            let (dqkv, dh1) = buf.split_at_mut(n * 3 * c);
            // y = x2 + fc2(gelu(fc1(ln2(x2)))): dx2 = dy + ..., held in dx
            dx.copy_from_slice(&dy[..n * c]);
            Linear::new(f, c).backward(dy, &a.g, w2, Some(dg), false, dw2, Some(db2), n);
            gelu_backward(dg, &a.u, du);
            Linear::new(c, f).backward(du, &a.h2, w1, Some(dh2), false, dw1, Some(db1), n);
            ln.backward(dh2, &a.x2, l2w, 1.0, &a.mean2, &a.rstd2, dx, dl2w, dl2b, n);
            // x2 = x + proj(attn(qkv(ln1(x)))): dx = dx2 + ...
            Linear::new(c, c).backward(dx, &a.att, wo, Some(datt), false, dwo, Some(dbo), n);
            self.attention()
                .backward(datt, &a.qkv, &a.att, &a.lse, dqkv, b, t);
            let qkv = Linear::new(c, 3 * c);
            qkv.backward(dqkv, &a.h1, wqkv, Some(dh1), false, dwqkv, Some(dbqkv), n);
            ln.backward(dh1, &a.x, l1w, 1.0, &a.mean1, &a.rstd1, dx, dl1w, dl1b, n);
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_data;
    use crate::layers::gradcheck::{check, weighted_sum};

    fn setup() -> (EncoderBlock, Vec<f32>, Vec<f32>, Vec<f32>, usize, usize) {
        let blk = EncoderBlock::new(8, 2, 12);
        let (b, t) = (2, 5);
        let mut p = test_data(blk.n_params(), 11);
        // LayerNorm weights near 1 as at init
        let [n1, _, _, _, _, _, n2, ..] = blk.shapes();
        let off2 = blk.shapes()[..6].iter().sum::<usize>();
        p[..n1].iter_mut().for_each(|w| *w += 1.0);
        p[off2..off2 + n2].iter_mut().for_each(|w| *w += 1.0);
        let x = test_data(b * t * 8, 12);
        let dy = test_data(b * t * 8, 13);
        (blk, p, x, dy, b, t)
    }

    #[test]
    fn encoder_block_backward_matches_finite_differences() {
        let (blk, p, x, dy, b, t) = setup();
        let run = |p: &[f32], x: &[f32]| {
            let mut y = vec![0.0; x.len()];
            blk.forward(p, x, &mut y, &mut EncoderActs::default(), b, t);
            weighted_sum(&dy, &y)
        };
        let mut a = EncoderActs::default();
        let mut y = vec![0.0; x.len()];
        blk.forward(&p, &x, &mut y, &mut a, b, t);
        let (mut dx, mut dp) = (vec![f32::NAN; x.len()], vec![0.0; p.len()]);
        blk.backward(&p, &a, &dy, &mut dx, &mut dp, b, t);
        check("encoder dx", &x, &dx, 1e-2, 3e-3, |x| run(&p, x));
        check("encoder dparams", &p, &dp, 1e-2, 3e-3, |p| run(p, &x));
        // every parameter tensor receives a gradient
        for (name, g) in EncoderBlock::PARAMS.iter().zip(blk.split(&dp)) {
            assert!(g.iter().any(|v| *v != 0.0), "{name} got no gradient");
        }
    }

    #[test]
    fn every_token_sees_every_other_one() {
        // changing the last token changes the first token's output: no causal mask
        let (blk, p, x, _, b, t) = setup();
        let mut y = vec![0.0; x.len()];
        blk.forward(&p, &x, &mut y, &mut EncoderActs::default(), b, t);
        let mut x2 = x.clone();
        x2[(t - 1) * 8] += 1.0;
        let mut y2 = vec![0.0; x.len()];
        blk.forward(&p, &x2, &mut y2, &mut EncoderActs::default(), b, t);
        assert!(y[..8]
            .iter()
            .zip(&y2[..8])
            .any(|(a, b)| (a - b).abs() > 1e-4));
        // and the other image of the batch does not
        assert_eq!(y[t * 8..], y2[t * 8..]);
    }
}
