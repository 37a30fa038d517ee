//! GPT-2 (Radford et al. 2019) forward pass, as llama.cpp's `llm_build_gpt2`: learned
//! position embeddings, pre-LayerNorm blocks with a fused qkv projection, GELU MLP, all
//! linear layers with bias. Like the other families it runs the spans of a batch in one
//! pass: the products over all rows, attention per span (`parts::attend_spans`, without
//! RoPE), each row with its own adapters. Letters: T tokens in the batch, C width, H heads,
//! D head size, F MLP width.

use super::lora::{RowLoras, Target};
use super::parts::attend_spans;
use super::tap::tap;
use super::tensors::BlockTable;
use super::weights::{embedding_and_head, load_f32, Linear, Loader, Weight};
use super::{Config, ModelError, Span, State};
use tinynn::kernels::act::gelu;
use tinynn::kernels::norm::layernorm;

/// A LayerNorm's weight and bias (C).
pub struct Norm {
    w: Vec<f32>,
    b: Vec<f32>,
}

impl Norm {
    fn load(f: &Loader, prefix: &str, c: usize) -> Result<Self, ModelError> {
        Ok(Self {
            w: load_f32(f, &format!("{prefix}.weight"), c)?,
            b: load_f32(f, &format!("{prefix}.bias"), c)?,
        })
    }

    /// Block table `t`'s `{norm}.weight` and `{norm}.bias`.
    fn of_block(f: &Loader, t: &BlockTable, norm: &str) -> Result<Self, ModelError> {
        Ok(Self {
            w: t.vector(f, &format!("{norm}.weight"))?,
            b: t.vector(f, &format!("{norm}.bias"))?,
        })
    }

    pub fn forward(&self, x: &[f32], eps: f32, out: &mut [f32]) {
        layernorm(x, &self.w, &self.b, eps, out)
    }
}

pub struct Block {
    attn_norm: Norm,
    attn_qkv: Linear,
    attn_output: Linear,
    ffn_norm: Norm,
    ffn_up: Linear,
    ffn_down: Linear,
}

impl Block {
    pub fn load(f: &Loader, cfg: &Config, i: usize) -> Result<Self, ModelError> {
        let t = cfg.block_table(i);
        Ok(Self {
            attn_norm: Norm::of_block(f, &t, "attn_norm")?,
            attn_qkv: t.linear(f, "attn_qkv")?,
            attn_output: t.linear(f, "attn_output")?,
            ffn_norm: Norm::of_block(f, &t, "ffn_norm")?,
            ffn_up: t.linear(f, "ffn_up")?,
            ffn_down: t.linear(f, "ffn_down")?,
        })
    }

    fn forward(
        &self,
        file: &[u8],
        cfg: &Config,
        s: &mut State,
        l: usize,
        spans: &mut [Span],
        lora: &RowLoras,
    ) {
        let t: usize = spans.iter().map(|sp| sp.len).sum();
        let (c, ff) = (cfg.d_model, cfg.d_ff);
        let (x, h) = (&mut s.x[..t * c], &mut s.h[..t * c]);
        self.attn_norm.forward(x, cfg.norm_eps, h);
        tap(&mut s.taps, l, "attn_norm", h, c);
        // (T, C) -> (T, 3C), split into q, k, v (T, C) each
        let qkv = &mut s.qkv[..t * 3 * c];
        self.attn_qkv.forward(file, h, t, qkv);
        lora.apply(l, Target::Qkv, h, qkv);
        for i in 0..t {
            let row = &qkv[i * 3 * c..(i + 1) * 3 * c];
            s.q[i * c..(i + 1) * c].copy_from_slice(&row[..c]);
            s.k[i * c..(i + 1) * c].copy_from_slice(&row[c..2 * c]);
            s.v[i * c..(i + 1) * c].copy_from_slice(&row[2 * c..]);
        }
        let (q, k, v) = (&mut s.q[..t * c], &mut s.k[..t * c], &s.v[..t * c]);
        let att = &mut s.att[..t * c];
        attend_spans(cfg, None, l, q, k, v, spans, att);
        let proj = &mut s.proj[..t * c];
        self.attn_output.forward(file, att, t, proj);
        lora.apply(l, Target::Output, att, proj);
        tap(&mut s.taps, l, "attn_out", proj, c);
        x.iter_mut().zip(proj.iter()).for_each(|(a, b)| *a += b);

        self.ffn_norm.forward(x, cfg.norm_eps, h);
        let a = &mut s.ff_a[..t * ff];
        self.ffn_up.forward(file, h, t, a);
        lora.apply(l, Target::Up, h, a);
        gelu(a);
        self.ffn_down.forward(file, a, t, proj);
        lora.apply(l, Target::Down, a, proj);
        tap(&mut s.taps, l, "ffn_out", proj, c);
        x.iter_mut().zip(proj.iter()).for_each(|(a, b)| *a += b);
        tap(&mut s.taps, l, "resid", x, c);
    }
}

pub struct Gpt2 {
    pub token_embd: Weight,
    pub position_embd: Weight,
    pub blocks: Vec<Block>,
    pub output_norm: Norm,
    pub output: Weight,
}

impl Gpt2 {
    pub fn load(f: &Loader, cfg: &Config) -> Result<Self, ModelError> {
        let (token_embd, output) = embedding_and_head(f, cfg)?;
        Ok(Self {
            position_embd: Weight::load(f, "position_embd.weight", cfg.d_model, cfg.ctx_train)?,
            blocks: (0..cfg.n_layer)
                .map(|i| Block::load(f, cfg, i))
                .collect::<Result<_, _>>()?,
            output_norm: Norm::load(f, "output_norm", cfg.d_model)?,
            token_embd,
            output,
        })
    }

    /// tokens (T), laid out as `spans` say, each span at its positions -> s.x (T, C).
    pub fn forward_hidden(
        &self,
        file: &[u8],
        cfg: &Config,
        s: &mut State,
        tokens: &[u32],
        spans: &mut [Span],
        lora: &RowLoras,
    ) {
        let c = cfg.d_model;
        let (wte, wpe) = (self.token_embd.qmat(file), self.position_embd.qmat(file));
        let positions = spans.iter().flat_map(|sp| sp.pos0..sp.pos0 + sp.len);
        for ((i, &id), pos) in tokens.iter().enumerate().zip(positions) {
            wte.dequantize_row(id as usize, &mut s.x[i * c..(i + 1) * c]);
            wpe.dequantize_row(pos, &mut s.h[..c]);
            s.x[i * c..(i + 1) * c]
                .iter_mut()
                .zip(&s.h[..c])
                .for_each(|(a, b)| *a += b);
        }
        for (l, b) in self.blocks.iter().enumerate() {
            b.forward(file, cfg, s, l, spans, lora);
        }
    }

    pub fn final_norm(&self, cfg: &Config, s: &mut State, t: usize) {
        let c = cfg.d_model;
        self.output_norm
            .forward(&s.x[..t * c], cfg.norm_eps, &mut s.h[..t * c]);
    }
}
