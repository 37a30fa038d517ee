//! Pieces the Llama family and the Qwen3.5 hybrid share, written once: the SwiGLU MLP
//! (Shazeer 2020, "GLU Variants Improve Transformer") and causal attention over the spans of
//! a batch (RoPE, the KV cache, llama.cpp's two attention regimes). Letters: T tokens in the
//! batch, C width, H / Hkv heads, D head size, F MLP width.

use super::kv_cache::{f16_attention, round_queries};
use super::lora::{RowLoras, Target};
use super::tensors::BlockTable;
use super::weights::{Linear, Loader, Weight};
use super::{Config, ModelError, Span, State};
use tinynn::kernels::act::swiglu;
use tinynn::kernels::attention::{causal_attention, AttnShape};
use tinynn::kernels::norm::rmsnorm;
use tinynn::kernels::rope::Rope;

/// `ffn_down(silu(ffn_gate x) * ffn_up x)`.
pub struct Mlp {
    pub ffn_gate: Linear,
    pub ffn_up: Linear,
    pub ffn_down: Linear,
}

impl Mlp {
    pub fn load(f: &Loader, t: &BlockTable) -> Result<Self, ModelError> {
        Ok(Self {
            ffn_gate: t.linear(f, "ffn_gate")?,
            ffn_up: t.linear(f, "ffn_up")?,
            ffn_down: t.linear(f, "ffn_down")?,
        })
    }

    /// h (T, C) -> out (T, C), through a (T, F) and b (T, F); layer `l`'s adapters of
    /// `lora` beside each product.
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &self,
        file: &[u8],
        h: &[f32],
        t: usize,
        a: &mut [f32],
        b: &mut [f32],
        out: &mut [f32],
        lora: &RowLoras,
        l: usize,
    ) {
        Linear::forward_many(
            &[&self.ffn_gate, &self.ffn_up],
            file,
            h,
            t,
            &mut [&mut *a, &mut *b],
        );
        lora.apply(l, Target::Gate, h, a);
        lora.apply(l, Target::Up, h, b);
        swiglu(a, b);
        self.ffn_down.forward(file, a, t, out);
        lora.apply(l, Target::Down, a, out);
    }
}

/// Causal attention of layer `l` for every span: q (T, H*D), k and v (T, Hkv*D) in, RoPE (if
/// the family has it; GPT-2 learns positions instead) on q and k at each span's positions, k
/// and v stored in the span's cache, out (T, H*D).
#[allow(clippy::too_many_arguments)]
pub fn attend_spans(
    cfg: &Config,
    rope: Option<&Rope>,
    l: usize,
    q: &mut [f32],
    k: &mut [f32],
    v: &[f32],
    spans: &mut [Span],
    out: &mut [f32],
) {
    let (qd, kvd, d) = (cfg.q_dim(), cfg.kv_dim(), cfg.head_dim);
    let mut r0 = 0;
    for sp in spans.iter_mut() {
        let (n, pos0) = (sp.len, sp.pos0);
        let rows = |w: usize| r0 * w..(r0 + n) * w;
        let (q, k, v) = (&mut q[rows(qd)], &mut k[rows(kvd)], &v[rows(kvd)]);
        if let Some(rope) = rope {
            for i in 0..n {
                rope.apply(&mut q[i * qd..(i + 1) * qd], d, pos0 + i);
                rope.apply(&mut k[i * kvd..(i + 1) * kvd], d, pos0 + i);
            }
        }
        sp.cache.store(l, pos0, k, v);
        if f16_attention(n) {
            round_queries(q);
        }
        let shape = AttnShape {
            n_head: cfg.n_head,
            n_kv_head: cfg.n_kv_head,
            head_dim: d,
            ctx: sp.cache.ctx,
            f16_accumulate: f16_attention(n),
        };
        let (kc, vc) = sp.cache.kv(l);
        causal_attention(q, kc, vc, shape, pos0, &mut out[rows(qd)]);
        r0 += n;
    }
}

/// tokens (T) -> x (T, C): their rows of the embedding `w`, dequantized.
pub fn embed_rows(file: &[u8], w: &Weight, c: usize, tokens: &[u32], x: &mut [f32]) {
    let emb = w.qmat(file);
    for (i, &id) in tokens.iter().enumerate() {
        emb.dequantize_row(id as usize, &mut x[i * c..(i + 1) * c]);
    }
}

/// The final RMSNorm (T, C) of s.x into s.h.
pub fn final_rmsnorm(cfg: &Config, w: &[f32], s: &mut State, t: usize) {
    let c = cfg.d_model;
    rmsnorm(&s.x[..t * c], w, cfg.norm_eps, &mut s.h[..t * c]);
}
