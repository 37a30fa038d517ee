//! Qwen3.5, as llama.cpp 0c1e570 runs its `qwen35` GGUFs (`src/models/qwen35.cpp`): per
//! layer either a Gated DeltaNet (Yang, Kautz & Hatamizadeh 2024, arXiv 2412.06464) or a
//! gated softmax attention layer, then a SwiGLU MLP:
//!   x = x + mixer(rmsnorm(x, attn_norm));  x = x + mlp(rmsnorm(x, post_attention_norm))
//! Gated attention: `attn_q` gives query and gate interleaved per head ([q (D) | gate (D)]),
//! q and k are RMS-normalised per head, RoPE turns the first `rope_dim` dims (neox), and the
//! attention output is multiplied by sigmoid(gate) before `attn_output`. The GDN layer's
//! projections run here on toy's quantized kernels, its core (conv, delta rule, gated norm)
//! in `tinynn::layers::gdn`, shared with training. Letters: T tokens in the batch, C width,
//! H / Hkv heads, D head size, W = 2 Hk Dk + Hv Dv, V vocabulary.

use super::lora::{RowLoras, Target};
use super::parts::{attend_spans, embed_rows, final_rmsnorm, Mlp};
use super::tap::tap;
use super::tensors::BlockTable;
use super::weights::{embedding_and_head, load_exact, Linear, Loader, Weight};
use super::{Config, LayerKind, ModelError, Span, State};
use tinynn::kernels::norm::{rmsnorm, rmsnorm_inplace};
use tinynn::kernels::rope::Rope;
use tinynn::layers::gdn::{self, GdnParams};

/// A gated attention layer's tensors.
pub struct GatedAttention {
    attn_q: Linear,
    attn_k: Linear,
    attn_v: Linear,
    attn_q_norm: Vec<f32>,
    attn_k_norm: Vec<f32>,
    attn_output: Linear,
}

/// A Gated DeltaNet layer's tensors: four input projections, the core's parameters, W_out.
pub struct GdnMixer {
    attn_qkv: Linear,
    attn_gate: Linear,
    ssm_beta: Linear,
    ssm_alpha: Linear,
    /// (W, K), GGUF `ssm_conv1d` of ne [K, W].
    conv_w: Vec<f32>,
    dt_bias: Vec<f32>,
    /// -exp(A_log) per value head.
    ssm_a: Vec<f32>,
    ssm_norm: Vec<f32>,
    ssm_out: Linear,
}

pub enum Mixer {
    Attention(GatedAttention),
    Gdn(GdnMixer),
}

pub struct Block {
    attn_norm: Vec<f32>,
    pub mixer: Mixer,
    post_attention_norm: Vec<f32>,
    mlp: Mlp,
}

impl GatedAttention {
    fn load(f: &Loader, t: &BlockTable) -> Result<Self, ModelError> {
        Ok(Self {
            attn_q: t.linear(f, "attn_q")?,
            attn_k: t.linear(f, "attn_k")?,
            attn_v: t.linear(f, "attn_v")?,
            attn_q_norm: t.vector(f, "attn_q_norm.weight")?,
            attn_k_norm: t.vector(f, "attn_k_norm.weight")?,
            attn_output: t.linear(f, "attn_output")?,
        })
    }

    /// h (T, C) -> s.proj (T, C).
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
        let (c, qd, kvd, d) = (cfg.d_model, cfg.q_dim(), cfg.kv_dim(), cfg.head_dim);
        let h = &s.h[..t * c];
        // (T, C) -> (T, H*2D) query and gate, (T, Hkv*D) keys and values
        let (qg, k, v) = (
            &mut s.qg[..2 * t * qd],
            &mut s.k[..t * kvd],
            &mut s.v[..t * kvd],
        );
        Linear::forward_many(
            &[&self.attn_q, &self.attn_k, &self.attn_v],
            file,
            h,
            t,
            &mut [&mut *qg, &mut *k, &mut *v],
        );
        lora.apply(l, Target::Q, h, qg);
        lora.apply(l, Target::K, h, k);
        lora.apply(l, Target::V, h, v);
        // split per head: q to s.q, the gate packed into the front of qg (T, H*D)
        let q = &mut s.q[..t * qd];
        for r in 0..t * cfg.n_head {
            q[r * d..(r + 1) * d].copy_from_slice(&qg[2 * r * d..(2 * r + 1) * d]);
            qg.copy_within((2 * r + 1) * d..(2 * r + 2) * d, r * d);
        }
        rmsnorm_inplace(q, &self.attn_q_norm, cfg.norm_eps);
        rmsnorm_inplace(k, &self.attn_k_norm, cfg.norm_eps);
        let att = &mut s.att[..t * qd];
        attend_spans(cfg, Some(rope), l, q, k, v, spans, att);
        for (a, g) in att.iter_mut().zip(&qg[..t * qd]) {
            *a *= 1.0 / (1.0 + (-g).exp());
        }
        // (T, H*D) -> (T, C)
        let proj = &mut s.proj[..t * c];
        self.attn_output.forward(file, att, t, proj);
        lora.apply(l, Target::Output, att, proj);
    }
}

impl GdnMixer {
    fn load(f: &Loader, t: &BlockTable) -> Result<Self, ModelError> {
        Ok(Self {
            attn_qkv: t.linear(f, "attn_qkv")?,
            attn_gate: t.linear(f, "attn_gate")?,
            ssm_beta: t.linear(f, "ssm_beta")?,
            ssm_alpha: t.linear(f, "ssm_alpha")?,
            conv_w: t.vector(f, "ssm_conv1d.weight")?,
            dt_bias: t.vector(f, "ssm_dt.bias")?,
            ssm_a: t.vector(f, "ssm_a")?,
            ssm_norm: t.vector(f, "ssm_norm.weight")?,
            ssm_out: t.linear(f, "ssm_out")?,
        })
    }

    /// h (T, C) -> s.proj (T, C), each span continuing its cache's recurrent state.
    #[allow(clippy::too_many_arguments)]
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
        let Some(sh) = cfg.gdn else {
            return;
        };
        let (c, w, vw, hv) = (cfg.d_model, sh.conv_channels(), sh.value_width(), sh.hv);
        let (qkv, z) = (&mut s.gdn_qkv[..t * w], &mut s.gdn_z[..t * vw]);
        let (b, a) = (&mut s.gdn_b[..t * hv], &mut s.gdn_a[..t * hv]);
        // (T, C) -> (T, W), (T, Hv*Dv), (T, Hv), (T, Hv)
        Linear::forward_many(
            &[
                &self.attn_qkv,
                &self.attn_gate,
                &self.ssm_beta,
                &self.ssm_alpha,
            ],
            file,
            &s.h[..t * c],
            t,
            &mut [&mut *qkv, &mut *z, &mut *b, &mut *a],
        );
        let h = &s.h[..t * c];
        lora.apply(l, Target::Qkv, h, qkv);
        lora.apply(l, Target::SsmGate, h, z);
        lora.apply(l, Target::SsmBeta, h, b);
        lora.apply(l, Target::SsmAlpha, h, a);
        let p = GdnParams {
            conv_w: &self.conv_w,
            dt_bias: &self.dt_bias,
            ssm_a: &self.ssm_a,
            norm_w: &self.ssm_norm,
        };
        let out = &mut s.gdn_out[..t * vw];
        let mut r0 = 0;
        for sp in spans.iter_mut() {
            let rows = |x: usize| r0 * x..(r0 + sp.len) * x;
            let state = sp.cache.recurrent(l);
            let (o, zz) = (&mut out[rows(vw)], &z[rows(vw)]);
            gdn::forward(
                &sh,
                p,
                &qkv[rows(w)],
                zz,
                &b[rows(hv)],
                &a[rows(hv)],
                state,
                o,
            );
            r0 += sp.len;
        }
        // (T, Hv*Dv) -> (T, C)
        let proj = &mut s.proj[..t * c];
        self.ssm_out.forward(file, out, t, proj);
        lora.apply(l, Target::SsmOut, out, proj);
    }
}

impl Block {
    pub fn load(f: &Loader, cfg: &Config, i: usize) -> Result<Self, ModelError> {
        let t = cfg.block_table(i);
        let mixer = match cfg.kinds[i] {
            LayerKind::Gdn => Mixer::Gdn(GdnMixer::load(f, &t)?),
            LayerKind::Attention => Mixer::Attention(GatedAttention::load(f, &t)?),
        };
        Ok(Self {
            attn_norm: t.vector(f, "attn_norm.weight")?,
            mixer,
            post_attention_norm: t.vector(f, "post_attention_norm.weight")?,
            mlp: Mlp::load(f, &t)?,
        })
    }

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
        let (c, ff) = (cfg.d_model, cfg.d_ff);
        rmsnorm(
            &s.x[..t * c],
            &self.attn_norm,
            cfg.norm_eps,
            &mut s.h[..t * c],
        );
        tap(&mut s.taps, l, "attn_norm", &s.h[..t * c], c);
        match &self.mixer {
            Mixer::Attention(m) => m.forward(file, cfg, rope, s, l, spans, lora),
            Mixer::Gdn(m) => {
                m.forward(file, cfg, s, l, spans, lora);
                if s.taps.is_some() {
                    // one row per sequence of the batch
                    let norms: Vec<f32> = spans
                        .iter_mut()
                        .flat_map(|sp| state_norms(cfg, &sp.cache.recurrent(l).s))
                        .collect();
                    let hv = cfg.gdn.map_or(1, |g| g.hv);
                    tap(&mut s.taps, l, "gdn_state", &norms, hv);
                }
            }
        }
        let (x, h, proj) = (&mut s.x[..t * c], &mut s.h[..t * c], &mut s.proj[..t * c]);
        tap(&mut s.taps, l, "attn_out", proj, c);
        x.iter_mut().zip(proj.iter()).for_each(|(a, b)| *a += b);
        rmsnorm(x, &self.post_attention_norm, cfg.norm_eps, h);
        let (a, b) = (&mut s.ff_a[..t * ff], &mut s.ff_b[..t * ff]);
        self.mlp.forward(file, h, t, a, b, proj, lora, l);
        tap(&mut s.taps, l, "ffn_out", proj, c);
        x.iter_mut().zip(proj.iter()).for_each(|(a, b)| *a += b);
        tap(&mut s.taps, l, "resid", x, c);
    }
}

/// The Frobenius norm of each value head's state (Hv, Dk, Dv).
fn state_norms(cfg: &Config, s: &[f32]) -> Vec<f32> {
    let g = cfg.gdn.expect("a GDN layer has a GDN shape");
    s[..g.ssm_state_len()]
        .chunks_exact(g.dk * g.dv)
        .map(|h| h.iter().map(|v| v * v).sum::<f32>().sqrt())
        .collect()
}

/// A Qwen3.5 model: embedding, hybrid blocks, final norm and head.
pub struct Qwen35 {
    pub token_embd: Weight,
    pub blocks: Vec<Block>,
    pub output_norm: Vec<f32>,
    /// `output.weight`, or the embedding when tied.
    pub output: Weight,
    pub rope: Rope,
}

impl Qwen35 {
    pub fn load(f: &Loader, cfg: &Config) -> Result<Self, ModelError> {
        let (token_embd, output) = embedding_and_head(f, cfg)?;
        Ok(Self {
            blocks: (0..cfg.n_layer)
                .map(|i| Block::load(f, cfg, i))
                .collect::<Result<_, _>>()?,
            output_norm: load_exact(f, "output_norm.weight", &[cfg.d_model as u64])?,
            rope: Rope::new(cfg.rope_dim, cfg.rope_base, true, None),
            token_embd,
            output,
        })
    }

    /// tokens (T), laid out as `spans` say -> s.x (T, C) of the final residual stream.
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
