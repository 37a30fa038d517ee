//! One qwen35 block, forward and backward (llama.cpp `src/models/qwen35.cpp`):
//!   xm  = x  + mixer(rmsnorm(x, attn_norm) * s)          (GDN or gated attention)
//!   out = xm + ffn_down(swiglu(ffn_gate|ffn_up(rmsnorm(xm, post_attention_norm) * s)))
//! with s the depth scale. The mixers are in `gdn_mixer` and `gated_attn`.
//! Letters: B sequences, T positions, N = B*T rows, C width, F MLP width.

use super::gated_attn::{AttnActs, AttnScratch, GatedAttn};
use super::gdn_mixer::{GdnActs, GdnMixer, GdnScratch};
use super::hybrid_params::{HybridRanges, MixerRanges};
use super::lin::Lin;
use super::ModelConfig;
use tinynn::layers::act::{swiglu_backward, swiglu_forward};
use tinynn::layers::linear::Linear;
use tinynn::layers::rmsnorm::RmsNorm;
use tinynn::layers::rope::RopeAt;

enum Mixer {
    Gdn(GdnMixer),
    Attn(GatedAttn),
}

enum MixerActs {
    Gdn(GdnActs),
    Attn(AttnActs),
}

/// What one block keeps from its forward for the backward, for up to N rows.
pub(crate) struct HybridActs {
    /// Residual stream into the block (N, C); the mixer's and the MLP's normalised inputs
    /// (N, C) and rstds (N); the stream after the mixer (N, C).
    pub x: Vec<f32>,
    h1: Vec<f32>,
    rstd1: Vec<f32>,
    mixer: MixerActs,
    xm: Vec<f32>,
    h2: Vec<f32>,
    rstd2: Vec<f32>,
    /// gate|up (N, 2F) and swiglu of it (N, F).
    ff: Vec<f32>,
    act: Vec<f32>,
    /// The LoRA intermediates of ffn_gate|ffn_up and ffn_down (empty without adapters).
    u: [Vec<f32>; 2],
}

/// Gradient buffers the blocks share during the backward.
pub(crate) struct HybridScratch {
    /// Gradient of the residual stream (N, C): of a block's output on entry, of its input on
    /// exit; of a normalised input (N, C); the MLP's (N, 2F) and (N, F).
    pub dx: Vec<f32>,
    pub dh: Vec<f32>,
    dff: Vec<f32>,
    dact: Vec<f32>,
    gdn: Option<GdnScratch>,
    attn: Option<AttnScratch>,
}

pub(crate) struct HybridBlock {
    pub r: HybridRanges,
    c: usize,
    f: usize,
    ctx: usize,
    /// Depth scale of the normalised inputs (1 without depth scaling).
    scale: f32,
    norm: RmsNorm,
    mixer: Mixer,
    ffn_up: Lin,
    ffn_down: Lin,
}

impl HybridBlock {
    /// Block l of a qwen35 config (`cfg.hybrid` is Some, checked by `validate`).
    pub fn new(cfg: &ModelConfig, l: usize, r: HybridRanges) -> Self {
        let h = cfg
            .hybrid
            .as_ref()
            .expect("a qwen35 config has a hybrid shape");
        let (c, f) = (cfg.d_model, cfg.d_ff);
        let mixer = match &r.mixer {
            MixerRanges::Gdn(_) => Mixer::Gdn(GdnMixer::new(c, h.gdn_shape(cfg.norm_eps), cfg.ctx)),
            MixerRanges::Attn(_) => Mixer::Attn(GatedAttn::new(
                c,
                cfg.n_head,
                cfg.n_kv_head,
                h.head_dim,
                cfg.norm_eps,
                cfg.inference_rounding,
            )),
        };
        Self {
            r,
            c,
            f,
            ctx: cfg.ctx,
            scale: if cfg.depth_scale {
                tinynn::layers::depth_scale(l)
            } else {
                1.0
            },
            norm: RmsNorm::new(c, cfg.norm_eps),
            mixer,
            ffn_up: Lin::Dense(Linear::new(c, 2 * f)),
            ffn_down: Lin::Dense(Linear::new(f, c)),
        }
    }

    /// A LoRA run's frozen products of this block, in the order of the table of products (`model::tensors`): the
    /// mixer's, then ffn_gate|ffn_up and ffn_down.
    pub fn freeze(&mut self, mut lins: Vec<Lin>) {
        let down = lins.pop().expect("ffn_down");
        let up = lins.pop().expect("ffn_gate|ffn_up");
        (self.ffn_up, self.ffn_down) = (up, down);
        match &mut self.mixer {
            Mixer::Gdn(m) => m.freeze(lins.try_into().unwrap_or_else(|_| panic!("5 GDN products"))),
            Mixer::Attn(m) => m.freeze(
                lins.try_into()
                    .unwrap_or_else(|_| panic!("2 attention products")),
            ),
        }
    }

    pub fn acts(&self, b: usize) -> HybridActs {
        let n = b * self.ctx;
        let z = |k: usize| vec![0f32; k];
        HybridActs {
            x: z(n * self.c),
            h1: z(n * self.c),
            rstd1: z(n),
            mixer: match &self.mixer {
                Mixer::Gdn(m) => MixerActs::Gdn(m.acts(b)),
                Mixer::Attn(m) => MixerActs::Attn(m.acts(b, self.ctx)),
            },
            xm: z(n * self.c),
            h2: z(n * self.c),
            rstd2: z(n),
            ff: z(n * 2 * self.f),
            act: z(n * self.f),
            u: [&self.ffn_up, &self.ffn_down].map(|l| z(n * l.u_width())),
        }
    }

    /// Scratch for N rows, with room for every mixer kind among `blocks`.
    pub fn scratch(blocks: &[HybridBlock], n: usize) -> HybridScratch {
        let first = |gdn: bool| {
            blocks
                .iter()
                .find(|b| matches!(b.mixer, Mixer::Gdn(_)) == gdn)
        };
        let (c, f) = blocks.first().map_or((0, 0), |b| (b.c, b.f));
        HybridScratch {
            dx: vec![0.0; n * c],
            dh: vec![0.0; n * c],
            dff: vec![0.0; n * 2 * f],
            dact: vec![0.0; n * f],
            gdn: first(true).and_then(|b| match &b.mixer {
                Mixer::Gdn(m) => Some(m.scratch(n)),
                Mixer::Attn(_) => None,
            }),
            attn: first(false).and_then(|b| match &b.mixer {
                Mixer::Attn(m) => Some(m.scratch(n)),
                Mixer::Gdn(_) => None,
            }),
        }
    }

    /// a.x (B*T, C) -> out (B*T, C), keeping what the backward needs in `a`.
    pub fn forward(
        &self,
        p: &[f32],
        a: &mut HybridActs,
        out: &mut [f32],
        rope: RopeAt,
        b: usize,
        t: usize,
    ) {
        let (r, n, c, f) = (&self.r, b * t, self.c, self.f);
        let w1 = &p[r.attn_norm.clone()];
        self.norm
            .forward(&a.x, w1, self.scale, &mut a.h1, &mut a.rstd1, n);
        a.xm[..n * c].copy_from_slice(&a.x[..n * c]);
        match (&self.mixer, &mut a.mixer, &r.mixer) {
            (Mixer::Gdn(m), MixerActs::Gdn(ma), MixerRanges::Gdn(mr)) => {
                m.forward(p, mr, &a.h1, ma, &mut a.xm, b, t)
            }
            (Mixer::Attn(m), MixerActs::Attn(ma), MixerRanges::Attn(mr)) => {
                m.forward(p, mr, &a.h1, ma, &mut a.xm, rope, b, t)
            }
            _ => unreachable!("a block's mixer, its acts and its ranges are of one kind"),
        }
        let w2 = &p[r.ffn_norm.clone()];
        self.norm
            .forward(&a.xm, w2, self.scale, &mut a.h2, &mut a.rstd2, n);
        // (N, C) -> (N, 2F) -> (N, F) -> (N, C), added to the stream
        let [u0, u1] = &mut a.u;
        let up = &r.ffn_up;
        self.ffn_up
            .forward(p, up, &None, &a.h2, &mut a.ff, u0, n, false, None);
        swiglu_forward(&a.ff, &mut a.act, n, f);
        out[..n * c].copy_from_slice(&a.xm[..n * c]);
        let down = &r.ffn_down;
        self.ffn_down
            .forward(p, down, &None, &a.act, out, u1, n, true, None);
    }

    /// s.dx holds the gradient of the block's output; on return, that of its input. Parameter
    /// gradients are added into g.
    #[allow(clippy::too_many_arguments)]
    pub fn backward(
        &self,
        p: &[f32],
        g: &mut [f32],
        a: &mut HybridActs,
        s: &mut HybridScratch,
        rope: RopeAt,
        b: usize,
        t: usize,
    ) {
        let (r, n, f) = (&self.r, b * t, self.f);
        let (down, dact) = (&r.ffn_down, Some(&mut s.dact[..]));
        self.ffn_down.backward(
            p, g, down, &None, &s.dx, &a.act, &a.u[1], dact, false, n, None,
        );
        swiglu_backward(&s.dact, &a.ff, &mut s.dff, n, f);
        let (up, dh) = (&r.ffn_up, Some(&mut s.dh[..]));
        self.ffn_up
            .backward(p, g, up, &None, &s.dff, &a.h2, &a.u[0], dh, false, n, None);
        let (w, gw) = (&p[r.ffn_norm.clone()], &mut g[r.ffn_norm.clone()]);
        self.norm
            .backward(&s.dh, &a.xm, w, self.scale, &a.rstd2, &mut s.dx, gw, n);
        // s.dx is now the gradient of xm: of the mixer's output and of x through the skip
        match (&self.mixer, &mut a.mixer, &r.mixer) {
            (Mixer::Gdn(m), MixerActs::Gdn(ma), MixerRanges::Gdn(mr)) => {
                let gs = s.gdn.as_mut().expect("gdn scratch for a gdn layer");
                m.backward(p, g, mr, &a.h1, ma, gs, &s.dx, &mut s.dh, b, t)
            }
            (Mixer::Attn(m), MixerActs::Attn(ma), MixerRanges::Attn(mr)) => {
                let at = s
                    .attn
                    .as_mut()
                    .expect("attention scratch for an attention layer");
                m.backward(p, g, mr, &a.h1, ma, at, &s.dx, &mut s.dh, rope, b, t)
            }
            _ => unreachable!("a block's mixer, its acts and its ranges are of one kind"),
        }
        let (w, gw) = (&p[r.attn_norm.clone()], &mut g[r.attn_norm.clone()]);
        self.norm
            .backward(&s.dh, &a.x, w, self.scale, &a.rstd1, &mut s.dx, gw, n);
    }
}
