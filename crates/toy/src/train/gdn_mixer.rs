//! The Gated DeltaNet core of a qwen35 block in training, forward and backward, as llama.cpp's
//! `build_layer_attn_linear` (`src/models/qwen35.cpp`): tinynn's core (conv, delta rule,
//! gated norm: `tinynn::layers::gdn`, the same kernels inference runs) over each sequence
//! from a zero state. Its input products and `ssm_out` are the block's (`Op::GdnIn`,
//! `Op::Residual`). The core trains A_log: `blk.N.ssm_a` holds A_log while training (what
//! AdamW steps and the state file keeps; the export writes ssm_a = -exp(A_log), as the GGUF
//! stores it). The core sees ssm_a = -exp(A_log), so dA_log = dssm_a * ssm_a.
//!
//! The core's saved buffers are made once for sequences of `ctx` tokens. A shorter batch
//! (sampling, a test) runs each sequence zero-padded to ctx: the core is causal and its
//! padded rows get a zero output gradient, so the first t rows and every gradient are those
//! of the unpadded sequence.
//! Letters: B sequences, T positions, N = B*T rows, W = 2 Hk Dk + Hv Dv, Hv value heads,
//! VW = Hv Dv.

use std::ops::Range;
use tinynn::layers::gdn::{self, GdnGrads, GdnParams, GdnSaved, GdnShape};

pub(crate) struct DeltaNet {
    sh: GdnShape,
    ctx: usize,
}

/// One layer's forward values for up to B sequences of ctx tokens.
pub(crate) struct GdnActs {
    /// The core's inputs qkv (N, W), z (N, VW), b and a (N, Hv) (the GdnIn products write
    /// them); its output y (N, VW).
    pub ins: [Vec<f32>; 4],
    pub y: Vec<f32>,
    /// ssm_a = -exp(A_log) (Hv), as the core reads it.
    ssm_a: Vec<f32>,
    /// The core's saved values, one per sequence.
    saved: Vec<GdnSaved>,
    /// One zero-padded sequence (ctx rows of each input and of the output).
    pad: [Vec<f32>; 5],
}

/// Backward buffers, shared by the GDN layers: gradients of qkv, z, b, a (N rows) and of
/// the core's output (N, VW), their padded one-sequence versions, and dssm_a (Hv).
pub(crate) struct GdnScratch {
    pub d: [Vec<f32>; 5],
    pad: [Vec<f32>; 5],
    dssm_a: Vec<f32>,
}

/// Disjoint mutable views of sorted, non-overlapping ranges of `g`.
fn disjoint_mut<'a, const K: usize>(
    mut g: &'a mut [f32],
    rs: [&Range<usize>; K],
) -> [&'a mut [f32]; K] {
    let mut at = 0;
    rs.map(|r| {
        assert!(r.start >= at, "ranges sorted and disjoint");
        let (_, rest) = std::mem::take(&mut g).split_at_mut(r.start - at);
        let (mine, rest) = rest.split_at_mut(r.len());
        g = rest;
        at = r.end;
        mine
    })
}

impl DeltaNet {
    pub fn new(sh: GdnShape, ctx: usize) -> Self {
        Self { sh, ctx }
    }

    /// Widths of qkv, z, b, a and the output: W, VW, Hv, Hv, VW.
    pub fn widths(&self) -> [usize; 5] {
        let (w, vw, hv) = (self.sh.conv_channels(), self.sh.value_width(), self.sh.hv);
        [w, vw, hv, hv, vw]
    }

    pub fn acts(&self, b: usize) -> GdnActs {
        let (n, ws) = (b * self.ctx, self.widths());
        GdnActs {
            ins: [0, 1, 2, 3].map(|k| vec![0.0; n * ws[k]]),
            y: vec![0.0; n * ws[4]],
            ssm_a: vec![0.0; self.sh.hv],
            saved: (0..b).map(|_| GdnSaved::new(&self.sh, self.ctx)).collect(),
            pad: ws.map(|x| vec![0.0; self.ctx * x]),
        }
    }

    pub fn scratch(&self, n: usize) -> GdnScratch {
        GdnScratch {
            d: self.widths().map(|x| vec![0.0; n * x]),
            pad: self.widths().map(|x| vec![0.0; self.ctx * x]),
            dssm_a: vec![0.0; self.sh.hv],
        }
    }

    /// a.ins -> a.y, each sequence from a zero state; `r` the core's ranges (conv, dt bias,
    /// A_log, norm).
    pub fn forward(&self, p: &[f32], r: &[Range<usize>; 4], a: &mut GdnActs, b: usize, t: usize) {
        let [conv, dt_bias, a_log, norm] = r;
        for (s, l) in a.ssm_a.iter_mut().zip(&p[a_log.clone()]) {
            *s = -l.exp();
        }
        let prm = GdnParams {
            conv_w: &p[conv.clone()],
            dt_bias: &p[dt_bias.clone()],
            ssm_a: &a.ssm_a,
            norm_w: &p[norm.clone()],
        };
        let ws = self.widths();
        for (i, saved) in a.saved[..b].iter_mut().enumerate() {
            let rows = |x: usize| i * t * x..(i + 1) * t * x;
            let ins = &a.ins;
            if t == self.ctx {
                let y = &mut a.y[rows(ws[4])];
                let s = |k: usize| &ins[k][rows(ws[k])];
                gdn::forward_train(&self.sh, prm, s(0), s(1), s(2), s(3), saved, y);
            } else {
                for k in 0..4 {
                    let pad = &mut a.pad[k];
                    pad.fill(0.0);
                    pad[..t * ws[k]].copy_from_slice(&ins[k][rows(ws[k])]);
                }
                let [px, pz, pb, pa, py] = &mut a.pad;
                gdn::forward_train(&self.sh, prm, px, pz, pb, pa, saved, py);
                a.y[rows(ws[4])].copy_from_slice(&py[..t * ws[4]]);
            }
        }
    }

    /// From s.d[4], the gradient of a.y: the gradients of a.ins into s.d[..4], the core's
    /// parameter gradients added into g.
    #[allow(clippy::too_many_arguments)]
    pub fn backward(
        &self,
        p: &[f32],
        g: &mut [f32],
        r: &[Range<usize>; 4],
        a: &mut GdnActs,
        s: &mut GdnScratch,
        b: usize,
        t: usize,
    ) {
        let ws = self.widths();
        let [conv, dt_bias, a_log, norm] = r;
        let [dqkv, dz, db, da, dy] = &mut s.d;
        let prm = GdnParams {
            conv_w: &p[conv.clone()],
            dt_bias: &p[dt_bias.clone()],
            ssm_a: &a.ssm_a,
            norm_w: &p[norm.clone()],
        };
        s.dssm_a.fill(0.0);
        {
            let [conv_w, dt_bias, norm_w] = disjoint_mut(g, [conv, dt_bias, norm]);
            let mut grads = GdnGrads {
                conv_w,
                dt_bias,
                ssm_a: &mut s.dssm_a,
                norm_w,
            };
            for (i, saved) in a.saved[..b].iter_mut().enumerate() {
                let rows = |x: usize| i * t * x..(i + 1) * t * x;
                if t == self.ctx {
                    gdn::backward(
                        &self.sh,
                        prm,
                        saved,
                        &dy[rows(ws[4])],
                        &mut dqkv[rows(ws[0])],
                        &mut dz[rows(ws[1])],
                        &mut db[rows(ws[2])],
                        &mut da[rows(ws[3])],
                        &mut grads,
                    );
                } else {
                    let [px, pz, pb, pa, py] = &mut s.pad;
                    py.fill(0.0);
                    py[..t * ws[4]].copy_from_slice(&dy[rows(ws[4])]);
                    gdn::backward(&self.sh, prm, saved, py, px, pz, pb, pa, &mut grads);
                    let outs: [&mut Vec<f32>; 4] = [dqkv, dz, db, da];
                    for (k, (d, pd)) in outs.into_iter().zip([&*px, &*pz, &*pb, &*pa]).enumerate() {
                        d[rows(ws[k])].copy_from_slice(&pd[..t * ws[k]]);
                    }
                }
            }
        }
        // d A_log = d ssm_a * ssm_a, since ssm_a = -exp(A_log)
        let g_alog = &mut g[a_log.clone()];
        for ((gl, ds), sa) in g_alog.iter_mut().zip(&s.dssm_a).zip(&a.ssm_a) {
            *gl += ds * sa;
        }
    }
}
