//! The Gated DeltaNet mixer of a qwen35 block, forward and backward, as llama.cpp's
//! `build_layer_attn_linear` (`src/models/qwen35.cpp`): four input projections of the
//! normalised stream, tinynn's GDN core (conv, delta rule, gated norm: `tinynn::layers::gdn`,
//! the same kernels inference runs) over each sequence from a zero state, then `ssm_out`
//! added into the residual stream. The core trains A_log; it sees ssm_a = -exp(A_log), so
//! dA_log = dssm_a * ssm_a.
//!
//! The core's saved buffers are made once for sequences of `ctx` tokens. A shorter batch
//! (sampling, a test) runs each sequence zero-padded to ctx: the core is causal and its
//! padded rows get a zero output gradient, so the first t rows and every gradient are those
//! of the unpadded sequence.
//! Letters: B sequences, T positions, N = B*T rows, C width, W = 2 Hk Dk + Hv Dv, Hv value
//! heads, VW = Hv Dv.

use super::hybrid_params::GdnRanges;
use super::lin::Lin;
use std::ops::Range;
use tinynn::layers::gdn::{self, GdnGrads, GdnParams, GdnSaved, GdnShape};
use tinynn::layers::linear::Linear;

pub(crate) struct GdnMixer {
    sh: GdnShape,
    ctx: usize,
    qkv: Lin,
    gate: Lin,
    beta: Lin,
    alpha: Lin,
    out: Lin,
}

/// One layer's forward values for up to B sequences of ctx tokens.
pub(crate) struct GdnActs {
    /// The projections qkv (N, W), z (N, VW), b and a (N, Hv); the core's output (N, VW).
    qkv: Vec<f32>,
    z: Vec<f32>,
    b: Vec<f32>,
    a: Vec<f32>,
    y: Vec<f32>,
    /// ssm_a = -exp(A_log) (Hv), as the core reads it.
    ssm_a: Vec<f32>,
    /// The core's saved values, one per sequence.
    saved: Vec<GdnSaved>,
    /// One zero-padded sequence (ctx rows of each input and of the output).
    pad: [Vec<f32>; 5],
    /// The LoRA intermediates of qkv, gate, beta, alpha, out (empty without adapters).
    u: [Vec<f32>; 5],
}

/// Backward buffers, shared by the GDN layers: gradients of qkv, z, b, a (N rows) and of
/// the core's output (N, VW), their padded one-sequence versions, and dssm_a (Hv).
pub(crate) struct GdnScratch {
    d: [Vec<f32>; 5],
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

impl GdnMixer {
    pub fn new(c: usize, sh: GdnShape, ctx: usize) -> Self {
        let (w, vw, hv) = (sh.conv_channels(), sh.value_width(), sh.hv);
        Self {
            sh,
            ctx,
            qkv: Lin::Dense(Linear::new(c, w)),
            gate: Lin::Dense(Linear::new(c, vw)),
            beta: Lin::Dense(Linear::new(c, hv)),
            alpha: Lin::Dense(Linear::new(c, hv)),
            out: Lin::Dense(Linear::new(vw, c)),
        }
    }

    /// The products as frozen base matrices with adapters (a LoRA run): attn_qkv,
    /// attn_gate, ssm_beta, ssm_alpha, ssm_out.
    pub fn freeze(&mut self, [qkv, gate, beta, alpha, out]: [Lin; 5]) {
        (self.qkv, self.gate, self.beta, self.alpha, self.out) = (qkv, gate, beta, alpha, out);
    }

    fn lins(&self) -> [&Lin; 5] {
        [&self.qkv, &self.gate, &self.beta, &self.alpha, &self.out]
    }

    /// Widths of qkv, z, b, a and the output: W, VW, Hv, Hv, VW.
    fn widths(&self) -> [usize; 5] {
        let (w, vw, hv) = (self.sh.conv_channels(), self.sh.value_width(), self.sh.hv);
        [w, vw, hv, hv, vw]
    }

    pub fn acts(&self, b: usize) -> GdnActs {
        let (n, [w, vw, hv, _, _]) = (b * self.ctx, self.widths());
        GdnActs {
            qkv: vec![0.0; n * w],
            z: vec![0.0; n * vw],
            b: vec![0.0; n * hv],
            a: vec![0.0; n * hv],
            y: vec![0.0; n * vw],
            ssm_a: vec![0.0; hv],
            saved: (0..b).map(|_| GdnSaved::new(&self.sh, self.ctx)).collect(),
            pad: self.widths().map(|x| vec![0.0; self.ctx * x]),
            u: self.lins().map(|l| vec![0.0; n * l.u_width()]),
        }
    }

    pub fn scratch(&self, n: usize) -> GdnScratch {
        GdnScratch {
            d: self.widths().map(|x| vec![0.0; n * x]),
            pad: self.widths().map(|x| vec![0.0; self.ctx * x]),
            dssm_a: vec![0.0; self.sh.hv],
        }
    }

    /// h (N, C) -> out (N, C) += ssm_out(gdn(projections of h)).
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &self,
        p: &[f32],
        r: &GdnRanges,
        h: &[f32],
        a: &mut GdnActs,
        out: &mut [f32],
        b: usize,
        t: usize,
    ) {
        let n = b * t;
        // (N, C) -> (N, W), (N, VW), (N, Hv), (N, Hv)
        let [u0, u1, u2, u3, u4] = &mut a.u;
        self.qkv
            .forward(p, &r.qkv, &None, h, &mut a.qkv, u0, n, false, None);
        self.gate
            .forward(p, &r.gate, &None, h, &mut a.z, u1, n, false, None);
        self.beta
            .forward(p, &r.beta, &None, h, &mut a.b, u2, n, false, None);
        self.alpha
            .forward(p, &r.alpha, &None, h, &mut a.a, u3, n, false, None);
        for (s, l) in a.ssm_a.iter_mut().zip(&p[r.a_log.clone()]) {
            *s = -l.exp();
        }
        let prm = GdnParams {
            conv_w: &p[r.conv.clone()],
            dt_bias: &p[r.dt_bias.clone()],
            ssm_a: &a.ssm_a,
            norm_w: &p[r.norm.clone()],
        };
        let ws = self.widths();
        for (i, saved) in a.saved[..b].iter_mut().enumerate() {
            let rows = |x: usize| i * t * x..(i + 1) * t * x;
            let ins = [&a.qkv, &a.z, &a.b, &a.a];
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
        // (N, VW) -> (N, C), added into the residual stream
        self.out
            .forward(p, &r.out, &None, &a.y, out, u4, n, true, None);
    }

    /// From dres (N, C), the gradient of the mixer's output: dh (N, C) overwritten with the
    /// gradient of h; parameter gradients added into g.
    #[allow(clippy::too_many_arguments)]
    pub fn backward(
        &self,
        p: &[f32],
        g: &mut [f32],
        r: &GdnRanges,
        h: &[f32],
        a: &mut GdnActs,
        s: &mut GdnScratch,
        dres: &[f32],
        dh: &mut [f32],
        b: usize,
        t: usize,
    ) {
        let (n, ws) = (b * t, self.widths());
        let [dqkv, dz, db, da, dy] = &mut s.d;
        // (N, C) -> (N, VW)
        let dy_out = Some(&mut dy[..]);
        self.out.backward(
            p, g, &r.out, &None, dres, &a.y, &a.u[4], dy_out, false, n, None,
        );
        let prm = GdnParams {
            conv_w: &p[r.conv.clone()],
            dt_bias: &p[r.dt_bias.clone()],
            ssm_a: &a.ssm_a,
            norm_w: &p[r.norm.clone()],
        };
        s.dssm_a.fill(0.0);
        {
            let [conv_w, dt_bias, norm_w] = disjoint_mut(g, [&r.conv, &r.dt_bias, &r.norm]);
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
        let g_alog = &mut g[r.a_log.clone()];
        for ((gl, ds), sa) in g_alog.iter_mut().zip(&s.dssm_a).zip(&a.ssm_a) {
            *gl += ds * sa;
        }
        // (N, W), (N, VW), (N, Hv), (N, Hv) -> (N, C): the first writes dh, the rest add
        let lins = [
            (&self.qkv, &r.qkv, &*dqkv),
            (&self.gate, &r.gate, &*dz),
            (&self.beta, &r.beta, &*db),
            (&self.alpha, &r.alpha, &*da),
        ];
        for (k, (lin, rr, d)) in lins.into_iter().enumerate() {
            let dh = Some(&mut *dh);
            lin.backward(p, g, rr, &None, d, h, &a.u[k], dh, k > 0, n, None);
        }
    }
}
