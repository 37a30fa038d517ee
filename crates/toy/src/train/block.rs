//! One transformer block, forward and backward, for every non-hybrid family (pre-norm, as
//! llama.cpp's `llm_build_llama` / `llm_build_qwen2` / `llm_build_qwen3` / `llm_build_gpt2`
//! and nanoGPT's `Block`):
//!   xm  = x  + attn_output(attention(rope(qk_norm(qkv(norm(x) * s)))))
//!   out = xm + ffn_down(act(ffn_up(norm(xm) * s)))
//! with s the depth scale. llama: RMSNorm, RoPE, GQA, SwiGLU, no biases; qwen2: llama with
//! q/k/v biases and neox RoPE; qwen3: llama with per-head q/k RMSNorm and neox RoPE; gpt2:
//! LayerNorm, no RoPE, GELU, biases. Which of these a family has is `Arch`'s to say, once.
//! Letters: N = B*T rows, C width, S qkv width, F MLP width, H / Hkv heads, D head size.

use super::lin::{grad2, Lin};
use super::params::BlockRanges;
use super::qk_norm::{QkActs, QkNorm};
use super::{Arch, ModelConfig};
use std::ops::Range;
use tinynn::layers::act::{gelu_backward, gelu_forward, swiglu_backward, swiglu_forward};
use tinynn::layers::attention::Attention;
use tinynn::layers::dropout::Dropout;
use tinynn::layers::layernorm::LayerNorm;
use tinynn::layers::linear::Linear;
use tinynn::layers::rmsnorm::RmsNorm;
use tinynn::layers::rope::RopeAt;

/// The norm of a family: RMSNorm (weight) or LayerNorm (weight and bias).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Norm {
    Rms(RmsNorm),
    Layer(LayerNorm),
}

impl Norm {
    pub fn new(cfg: &ModelConfig) -> Self {
        match cfg.arch.is_gpt2() {
            false => Norm::Rms(RmsNorm::new(cfg.d_model, cfg.norm_eps)),
            true => Norm::Layer(LayerNorm::new(cfg.d_model, cfg.norm_eps)),
        }
    }

    /// x (N, C) -> out (N, C), saving mean (LayerNorm only) and rstd (N).
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &self,
        x: &[f32],
        w: &[f32],
        b: Option<&[f32]>,
        scale: f32,
        out: &mut [f32],
        mean: &mut [f32],
        rstd: &mut [f32],
        n: usize,
    ) {
        match (self, b) {
            (Norm::Rms(r), _) => r.forward(x, w, scale, out, rstd, n),
            (Norm::Layer(l), Some(b)) => l.forward(x, w, b, scale, out, mean, rstd, n),
            (Norm::Layer(_), None) => unreachable!("layouts give every LayerNorm a bias"),
        }
    }

    /// Adds the input gradient into dx and the parameter gradients into dw (and db).
    #[allow(clippy::too_many_arguments)]
    pub fn backward(
        &self,
        dy: &[f32],
        x: &[f32],
        w: &[f32],
        scale: f32,
        mean: &[f32],
        rstd: &[f32],
        dx: &mut [f32],
        dw: &mut [f32],
        db: Option<&mut [f32]>,
        n: usize,
    ) {
        match (self, db) {
            (Norm::Rms(r), _) => r.backward(dy, x, w, scale, rstd, dx, dw, n),
            (Norm::Layer(l), Some(db)) => l.backward(dy, x, w, scale, mean, rstd, dx, dw, db, n),
            (Norm::Layer(_), None) => unreachable!("layouts give every LayerNorm a bias"),
        }
    }
}

/// What one block keeps from its forward for the backward, for up to N rows.
pub(crate) struct BlockActs {
    /// Residual stream into the block (N, C).
    pub x: Vec<f32>,
    /// Normalised inputs of attention and MLP (N, C), their means and rstds (N).
    pub h1: Vec<f32>,
    pub mean1: Vec<f32>,
    pub rstd1: Vec<f32>,
    pub h2: Vec<f32>,
    pub mean2: Vec<f32>,
    pub rstd2: Vec<f32>,
    /// q, k, v after RoPE (N, S).
    pub qkv: Vec<f32>,
    /// Per-head q/k norm (else empty): q (N H, D) and k (N Hkv, D) before it, their rstds,
    /// and room for one of them normalised.
    pub qk: QkActs,
    /// Attention output (N, H*D) and its log-sum-exp per query row (B, H, T).
    pub att: Vec<f32>,
    pub lse: Vec<f32>,
    /// Residual stream after attention (N, C).
    pub xm: Vec<f32>,
    /// MLP pre-activation: llama gate|up (N, 2F), gpt2 up (N, F); activation (N, F).
    pub ff: Vec<f32>,
    pub act: Vec<f32>,
    /// The LoRA intermediates x A^T of qkv, attn_output, ffn_up, ffn_down (empty without).
    pub u: [Vec<f32>; 4],
    /// The adapters' input dropout of this block for this pass (the backward regenerates
    /// the forward's mask from it); None outside training or without dropout.
    pub drop: Option<Dropout>,
}

/// Gradient buffers the blocks share during the backward.
pub(crate) struct Scratch {
    /// Gradient of the residual stream (N, C): of a block's output on entry, of its input on exit.
    pub dx: Vec<f32>,
    pub dh: Vec<f32>,
    pub dqkv: Vec<f32>,
    pub datt: Vec<f32>,
    pub dff: Vec<f32>,
    pub dact: Vec<f32>,
    /// The q/k norm's backward (empty without it).
    pub dqk: Vec<f32>,
}

fn opt<'a>(p: &'a [f32], r: &Option<Range<usize>>) -> Option<&'a [f32]> {
    r.as_ref().map(|r| &p[r.clone()])
}

pub(crate) struct Block {
    pub r: BlockRanges,
    arch: Arch,
    c: usize,
    f: usize,
    /// Depth scale of the normalised inputs (1 without depth scaling).
    scale: f32,
    norm: Norm,
    attn: Attention,
    /// The per-head q/k RMSNorm, for families that have it.
    qk_norm: Option<QkNorm>,
    /// RoPE on q and k (all but gpt2, whose positions are learned).
    rope: bool,
    /// K/V and GPT-2's GELU rounded as inference does (`ModelConfig::inference_rounding`).
    inference_rounding: bool,
    qkv: Lin,
    attn_output: Lin,
    ffn_up: Lin,
    ffn_down: Lin,
}

impl Block {
    pub fn new(cfg: &ModelConfig, l: usize, r: BlockRanges) -> Self {
        let (c, f, d) = (cfg.d_model, cfg.d_ff, cfg.head_dim());
        let attn = Attention::new(cfg.n_head, cfg.n_kv_head, d);
        let qk_norm = r.q_norm.is_some();
        let up = if cfg.arch.is_gpt2() { f } else { 2 * f };
        Self {
            r,
            arch: cfg.arch,
            c,
            f,
            scale: if cfg.depth_scale {
                tinynn::layers::depth_scale(l)
            } else {
                1.0
            },
            norm: Norm::new(cfg),
            attn,
            qk_norm: qk_norm.then(|| QkNorm {
                norm: RmsNorm::new(d, cfg.norm_eps),
                h: cfg.n_head,
                hkv: cfg.n_kv_head,
            }),
            rope: !cfg.arch.is_gpt2(),
            inference_rounding: cfg.inference_rounding,
            qkv: Lin::Dense(Linear::new(c, attn.qkv_width())),
            attn_output: Lin::Dense(Linear::new(cfg.n_head * d, c)),
            ffn_up: Lin::Dense(Linear::new(c, up)),
            ffn_down: Lin::Dense(Linear::new(f, c)),
        }
    }

    /// Replaces the four products (qkv, attn_output, ffn_up, ffn_down) with frozen ones.
    pub fn freeze(&mut self, lins: Vec<Lin>) {
        let lins: [Lin; 4] = lins
            .try_into()
            .unwrap_or_else(|_| unreachable!("the table gives a block four products"));
        [self.qkv, self.attn_output, self.ffn_up, self.ffn_down] = lins;
    }

    pub fn acts(&self, b: usize, t: usize) -> BlockActs {
        let n = b * t;
        let z = |k: usize| vec![0f32; k];
        BlockActs {
            x: z(n * self.c),
            h1: z(n * self.c),
            mean1: z(n),
            rstd1: z(n),
            h2: z(n * self.c),
            mean2: z(n),
            rstd2: z(n),
            qkv: z(n * self.qkv.n_out()),
            qk: self
                .qk_norm
                .as_ref()
                .map_or_else(QkActs::default, |q| q.acts(n)),
            att: z(n * self.attn_output.n_in()),
            lse: z(b * self.attn.n_head * t),
            xm: z(n * self.c),
            ff: z(n * self.ffn_up.n_out()),
            act: z(n * self.f),
            u: [&self.qkv, &self.attn_output, &self.ffn_up, &self.ffn_down]
                .map(|l| z(n * l.u_width())),
            drop: None,
        }
    }

    pub fn scratch(&self, n: usize) -> Scratch {
        let z = |k: usize| vec![0f32; k];
        Scratch {
            dx: z(n * self.c),
            dh: z(n * self.c),
            dqkv: z(n * self.qkv.n_out()),
            datt: z(n * self.attn_output.n_in()),
            dff: z(n * self.ffn_up.n_out()),
            dact: z(n * self.f),
            dqk: z(self.qk_norm.as_ref().map_or(0, |q| q.scratch_len(n))),
        }
    }

    /// a.x (B*T, C) -> out (B*T, C), keeping what the backward needs in `a`.
    pub fn forward(
        &self,
        p: &[f32],
        a: &mut BlockActs,
        out: &mut [f32],
        rope: RopeAt,
        b: usize,
        t: usize,
    ) {
        let (r, n, c, f) = (&self.r, b * t, self.c, self.f);
        self.norm.forward(
            &a.x,
            &p[r.attn_norm.clone()],
            opt(p, &r.attn_norm_b),
            self.scale,
            &mut a.h1,
            &mut a.mean1,
            &mut a.rstd1,
            n,
        );
        // (N, C) -> (N, S)
        self.qkv.forward(
            p,
            &r.qkv,
            &r.qkv_b,
            &a.h1,
            &mut a.qkv,
            &mut a.u[0],
            n,
            false,
            a.drop.map(|d| d.part(0)),
        );
        if let (Some(qk), Some(wq), Some(wk)) = (&self.qk_norm, &r.q_norm, &r.k_norm) {
            qk.forward(p, (wq, wk), &mut a.qkv, &mut a.qk, n);
        }
        if self.rope {
            rope.forward(
                &mut a.qkv,
                self.qkv.n_out(),
                self.attn.n_head + self.attn.n_kv_head,
                t,
                n,
            );
        }
        if self.inference_rounding {
            self.attn.round_kv_f16(&mut a.qkv, n);
        }
        // (N, S) -> (N, H*D)
        self.attn
            .forward_packed(&a.qkv, &mut a.att, &mut a.lse, b, t, rope.pos);
        a.xm[..n * c].copy_from_slice(&a.x[..n * c]);
        self.attn_output.forward(
            p,
            &r.attn_output,
            &r.attn_output_b,
            &a.att,
            &mut a.xm,
            &mut a.u[1],
            n,
            true,
            a.drop.map(|d| d.part(1)),
        );

        self.norm.forward(
            &a.xm,
            &p[r.ffn_norm.clone()],
            opt(p, &r.ffn_norm_b),
            self.scale,
            &mut a.h2,
            &mut a.mean2,
            &mut a.rstd2,
            n,
        );
        // (N, C) -> (N, 2F) or (N, F) -> (N, F)
        self.ffn_up.forward(
            p,
            &r.ffn_up,
            &r.ffn_up_b,
            &a.h2,
            &mut a.ff,
            &mut a.u[2],
            n,
            false,
            a.drop.map(|d| d.part(2)),
        );
        match self.arch.is_gpt2() {
            false => swiglu_forward(&a.ff, &mut a.act, n, f),
            true if self.inference_rounding => {
                // ggml's GELU through f16 (the inference kernel); the backward stays exact
                a.act[..n * f].copy_from_slice(&a.ff[..n * f]);
                tinynn::kernels::act::gelu(&mut a.act[..n * f]);
            }
            true => gelu_forward(&a.ff[..n * f], &mut a.act[..n * f]),
        }
        out[..n * c].copy_from_slice(&a.xm[..n * c]);
        self.ffn_down.forward(
            p,
            &r.ffn_down,
            &r.ffn_down_b,
            &a.act,
            out,
            &mut a.u[3],
            n,
            true,
            a.drop.map(|d| d.part(3)),
        );
    }

    /// s.dx holds the gradient of the block's output; on return, that of its input. Parameter
    /// gradients are added into g.
    #[allow(clippy::too_many_arguments)]
    pub fn backward(
        &self,
        p: &[f32],
        g: &mut [f32],
        a: &BlockActs,
        s: &mut Scratch,
        rope: RopeAt,
        b: usize,
        t: usize,
    ) {
        let (r, n, f) = (&self.r, b * t, self.f);
        self.ffn_down.backward(
            p,
            g,
            &r.ffn_down,
            &r.ffn_down_b,
            &s.dx,
            &a.act,
            &a.u[3],
            Some(&mut s.dact),
            false,
            n,
            a.drop.map(|d| d.part(3)),
        );
        match self.arch.is_gpt2() {
            false => swiglu_backward(&s.dact, &a.ff, &mut s.dff, n, f),
            true => gelu_backward(&s.dact[..n * f], &a.ff[..n * f], &mut s.dff[..n * f]),
        }
        self.ffn_up.backward(
            p,
            g,
            &r.ffn_up,
            &r.ffn_up_b,
            &s.dff,
            &a.h2,
            &a.u[2],
            Some(&mut s.dh),
            false,
            n,
            a.drop.map(|d| d.part(2)),
        );
        let (dw, db) = grad2(g, &r.ffn_norm, &r.ffn_norm_b);
        self.norm.backward(
            &s.dh,
            &a.xm,
            &p[r.ffn_norm.clone()],
            self.scale,
            &a.mean2,
            &a.rstd2,
            &mut s.dx,
            dw,
            db,
            n,
        );

        self.attn_output.backward(
            p,
            g,
            &r.attn_output,
            &r.attn_output_b,
            &s.dx,
            &a.att,
            &a.u[1],
            Some(&mut s.datt),
            false,
            n,
            a.drop.map(|d| d.part(1)),
        );
        self.attn
            .backward_packed(&s.datt, &a.qkv, &a.att, &a.lse, &mut s.dqkv, b, t, rope.pos);
        if self.rope {
            rope.backward(
                &mut s.dqkv,
                self.qkv.n_out(),
                self.attn.n_head + self.attn.n_kv_head,
                t,
                n,
            );
        }
        if let (Some(qk), Some(wq), Some(wk)) = (&self.qk_norm, &r.q_norm, &r.k_norm) {
            qk.backward(p, g, (wq, wk), &mut s.dqkv, &a.qk, &mut s.dqk, n);
        }
        self.qkv.backward(
            p,
            g,
            &r.qkv,
            &r.qkv_b,
            &s.dqkv,
            &a.h1,
            &a.u[0],
            Some(&mut s.dh),
            false,
            n,
            a.drop.map(|d| d.part(0)),
        );
        let (dw, db) = grad2(g, &r.attn_norm, &r.attn_norm_b);
        self.norm.backward(
            &s.dh,
            &a.x,
            &p[r.attn_norm.clone()],
            self.scale,
            &a.mean1,
            &a.rstd1,
            &mut s.dx,
            dw,
            db,
            n,
        );
    }
}
