//! The Llama family forward pass (Touvron et al. 2023), as llama.cpp's `llm_build_llama`
//! with the Qwen2 (q/k/v bias) and Qwen3 (q/k RMSNorm) variations. Pre-norm blocks:
//!   x = x + attn(rmsnorm(x));  x = x + mlp(rmsnorm(x))
//! where attn is GQA with RoPE and mlp is SwiGLU. Letters: T tokens in the batch, C width,
//! H / Hkv heads, D head size, F MLP width, V vocabulary.

use super::lora::{RowLoras, Target};
use super::parts::{attend_spans, embed_rows, final_rmsnorm, Mlp};
use super::tap::tap;
use super::weights::{embedding_and_head, load_f32, load_f32_opt, Linear, Loader, Weight};
use super::{Config, ModelError, Span, State};
use tinynn::kernels::norm::{rmsnorm, rmsnorm_inplace};
use tinynn::kernels::rope::Rope;

/// One transformer block, tensors named as in GGUF (`blk.{i}.*`).
pub struct Block {
    attn_norm: Vec<f32>,
    attn_q: Linear,
    attn_k: Linear,
    attn_v: Linear,
    /// Qwen3's per-head RMSNorm of queries and keys (D).
    attn_q_norm: Option<Vec<f32>>,
    attn_k_norm: Option<Vec<f32>>,
    attn_output: Linear,
    ffn_norm: Vec<f32>,
    mlp: Mlp,
}

impl Block {
    pub fn load(f: &Loader, cfg: &Config, i: usize) -> Result<Self, ModelError> {
        let t = cfg.block_table(i);
        Ok(Self {
            attn_norm: t.vector(f, "attn_norm.weight")?,
            attn_q: t.linear(f, "attn_q")?,
            attn_k: t.linear(f, "attn_k")?,
            attn_v: t.linear(f, "attn_v")?,
            attn_q_norm: t.vector_opt(f, "attn_q_norm.weight")?,
            attn_k_norm: t.vector_opt(f, "attn_k_norm.weight")?,
            attn_output: t.linear(f, "attn_output")?,
            ffn_norm: t.vector(f, "ffn_norm.weight")?,
            mlp: Mlp::load(f, &t)?,
        })
    }

    /// Run layer `l` on s.x (T, C): the rows are the spans' tokens one span after another,
    /// each span a run of consecutive positions of one sequence. Everything but attention
    /// runs on all T rows at once, so several sequences share one pass over the weights;
    /// each row adds its own adapters of `lora` after each product.
    #[allow(clippy::too_many_arguments)]
    fn forward(
        &self,
        file: &[u8],
        cfg: &Config,
        rope: &Rope,
        s: &mut State,
        l: usize,
        spans: &mut [Span],
        lora: &RowLoras,
    ) {
        let t: usize = spans.iter().map(|sp| sp.len).sum();
        let (c, qd, kvd, ff) = (cfg.d_model, cfg.q_dim(), cfg.kv_dim(), cfg.d_ff);
        let (x, h) = (&mut s.x[..t * c], &mut s.h[..t * c]);
        rmsnorm(x, &self.attn_norm, cfg.norm_eps, h);
        tap(&mut s.taps, l, "attn_norm", h, c);
        // (T, C) -> (T, H*D), (T, Hkv*D), (T, Hkv*D)
        let (q, k, v) = (&mut s.q[..t * qd], &mut s.k[..t * kvd], &mut s.v[..t * kvd]);
        Linear::forward_many(
            &[&self.attn_q, &self.attn_k, &self.attn_v],
            file,
            h,
            t,
            &mut [&mut *q, &mut *k, &mut *v],
        );
        lora.apply(l, Target::Q, h, q);
        lora.apply(l, Target::K, h, k);
        lora.apply(l, Target::V, h, v);
        if let Some(w) = &self.attn_q_norm {
            rmsnorm_inplace(q, w, cfg.norm_eps);
        }
        if let Some(w) = &self.attn_k_norm {
            rmsnorm_inplace(k, w, cfg.norm_eps);
        }
        let att = &mut s.att[..t * qd];
        attend_spans(cfg, Some(rope), l, q, k, v, spans, att);
        // (T, H*D) -> (T, C), added to the residual
        let proj = &mut s.proj[..t * c];
        self.attn_output.forward(file, att, t, proj);
        lora.apply(l, Target::Output, att, proj);
        tap(&mut s.taps, l, "attn_out", proj, c);
        x.iter_mut().zip(proj.iter()).for_each(|(a, b)| *a += b);

        rmsnorm(x, &self.ffn_norm, cfg.norm_eps, h);
        let (a, b) = (&mut s.ff_a[..t * ff], &mut s.ff_b[..t * ff]);
        self.mlp.forward(file, h, t, a, b, proj, lora, l);
        tap(&mut s.taps, l, "ffn_out", proj, c);
        x.iter_mut().zip(proj.iter()).for_each(|(a, b)| *a += b);
        tap(&mut s.taps, l, "resid", x, c);
    }
}

/// A Llama-family model: embedding, blocks, final norm and head.
pub struct Llama {
    pub token_embd: Weight,
    pub blocks: Vec<Block>,
    pub output_norm: Vec<f32>,
    /// `output.weight`, or the embedding when tied.
    pub output: Weight,
    pub rope: Rope,
}

impl Llama {
    pub fn load(f: &Loader, cfg: &Config) -> Result<Self, ModelError> {
        let (token_embd, output) = embedding_and_head(f, cfg)?;
        let freq_factors = load_f32_opt(f, "rope_freqs.weight", cfg.rope_dim / 2)?;
        Ok(Self {
            blocks: (0..cfg.n_layer)
                .map(|i| Block::load(f, cfg, i))
                .collect::<Result<_, _>>()?,
            output_norm: load_f32(f, "output_norm.weight", cfg.d_model)?,
            rope: Rope::new(
                cfg.rope_dim,
                cfg.rope_base,
                cfg.rope_neox,
                freq_factors.as_deref(),
            ),
            token_embd,
            output,
        })
    }

    /// tokens (T), laid out as `spans` say -> s.x (T, C) of the final residual stream, each
    /// row with its adapters of `lora`.
    pub fn forward_hidden(
        &self,
        file: &[u8],
        cfg: &Config,
        s: &mut State,
        tokens: &[u32],
        spans: &mut [Span],
        lora: &RowLoras,
    ) {
        embed_rows(file, &self.token_embd, cfg.d_model, tokens, &mut s.x);
        for (l, b) in self.blocks.iter().enumerate() {
            b.forward(file, cfg, &self.rope, s, l, spans, lora);
        }
    }

    /// Final norm (T, C) of s.x into s.h.
    pub fn final_norm(&self, cfg: &Config, s: &mut State, t: usize) {
        final_rmsnorm(cfg, &self.output_norm, s, t);
    }
}
