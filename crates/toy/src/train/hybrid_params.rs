//! The parameter tensors of one qwen35 block, under llama.cpp's names and dims
//! (`src/models/qwen35.cpp`; see docs/qwen35.md), and how each starts: matrices N(0, 0.02),
//! the residual outputs (`ssm_out`, `attn_output`, `ffn_down`) N(0, 0.02 / sqrt(2 n_layer)),
//! norms 1, the conv U(+-1/sqrt(K)) (PyTorch's Conv1d default), `ssm_dt.bias` so that
//! softplus(dt_bias) is log-uniform in [1e-3, 1e-1] (Mamba), A_log = ln U(1, 16) (Qwen3.5).
//!
//! `blk.N.ssm_a` holds A_log while training (it is what AdamW steps and the state file keeps);
//! the export writes ssm_a = -exp(A_log), as the GGUF stores it.
//! Letters: C width, H / Hkv heads, D head size, F MLP width, Hk / Hv GDN key / value heads,
//! Dk / Dv their sizes, K conv taps, W = 2 Hk Dk + Hv Dv.

use super::params::{Init, Layout};
use super::{HybridConfig, LayerKind, ModelConfig};
use std::ops::Range;

/// A GDN mixer's ranges.
#[derive(Clone, Debug)]
pub(crate) struct GdnRanges {
    /// attn_qkv (W, C), attn_gate (Hv Dv, C), ssm_beta (Hv, C), ssm_alpha (Hv, C).
    pub qkv: Range<usize>,
    pub gate: Range<usize>,
    pub beta: Range<usize>,
    pub alpha: Range<usize>,
    /// ssm_conv1d (W, K), ssm_dt.bias (Hv), A_log (Hv), ssm_norm (Dv).
    pub conv: Range<usize>,
    pub dt_bias: Range<usize>,
    pub a_log: Range<usize>,
    pub norm: Range<usize>,
    /// ssm_out (C, Hv Dv).
    pub out: Range<usize>,
}

/// A gated attention mixer's ranges.
#[derive(Clone, Debug)]
pub(crate) struct AttnRanges {
    /// attn_q (2 H D, C: query and gate per head), attn_k, attn_v (Hkv D, C), one range.
    pub qkv: Range<usize>,
    /// attn_q_norm, attn_k_norm (D).
    pub q_norm: Range<usize>,
    pub k_norm: Range<usize>,
    /// attn_output (C, H D).
    pub output: Range<usize>,
}

#[derive(Clone, Debug)]
pub(crate) enum MixerRanges {
    Gdn(GdnRanges),
    Attn(AttnRanges),
}

#[derive(Clone, Debug)]
pub(crate) struct HybridRanges {
    pub attn_norm: Range<usize>,
    pub mixer: MixerRanges,
    /// post_attention_norm (C): the norm before the MLP.
    pub ffn_norm: Range<usize>,
    /// ffn_gate then ffn_up (2F, C), ffn_down (C, F).
    pub ffn_up: Range<usize>,
    pub ffn_down: Range<usize>,
}

impl Layout {
    /// Appends block `i` of a qwen35 model.
    pub(super) fn push_hybrid(
        &mut self,
        cfg: &ModelConfig,
        h: &HybridConfig,
        i: usize,
    ) -> HybridRanges {
        let (c, f) = (cfg.d_model as u64, cfg.d_ff as u64);
        let std = Init::Normal(0.02);
        let resid = Init::Normal(0.02 / (2.0 * cfg.n_layer as f32).sqrt());
        let n = |s: &str| format!("blk.{i}.{s}");
        let attn_norm = self.push(n("attn_norm.weight"), vec![c], false, Init::Ones);
        let mixer = match h.layers[i] {
            LayerKind::Gdn => {
                let (hk, hv) = (h.gdn_key_heads as u64, h.gdn_value_heads as u64);
                let (dk, dv, k) = (
                    h.gdn_key_dim as u64,
                    h.gdn_value_dim as u64,
                    h.conv_kernel as u64,
                );
                let (w, vw) = (2 * hk * dk + hv * dv, hv * dv);
                let conv = Init::Uniform(1.0 / (k as f32).sqrt());
                MixerRanges::Gdn(GdnRanges {
                    qkv: self.push(n("attn_qkv.weight"), vec![c, w], true, std),
                    gate: self.push(n("attn_gate.weight"), vec![c, vw], true, std),
                    beta: self.push(n("ssm_beta.weight"), vec![c, hv], true, std),
                    alpha: self.push(n("ssm_alpha.weight"), vec![c, hv], true, std),
                    conv: self.push(n("ssm_conv1d.weight"), vec![k, w], true, conv),
                    dt_bias: self.push(n("ssm_dt.bias"), vec![hv], false, Init::DtBias),
                    a_log: self.push(n("ssm_a"), vec![hv], false, Init::ALog),
                    norm: self.push(n("ssm_norm.weight"), vec![dv], false, Init::Ones),
                    out: self.push(n("ssm_out.weight"), vec![vw, c], true, resid),
                })
            }
            LayerKind::Attention => {
                let d = h.head_dim as u64;
                let (q, kv) = (cfg.n_head as u64 * d, cfg.n_kv_head as u64 * d);
                let wq = self.push(n("attn_q.weight"), vec![c, 2 * q], true, std);
                self.push(n("attn_k.weight"), vec![c, kv], true, std);
                let wv = self.push(n("attn_v.weight"), vec![c, kv], true, std);
                MixerRanges::Attn(AttnRanges {
                    qkv: wq.start..wv.end,
                    q_norm: self.push(n("attn_q_norm.weight"), vec![d], false, Init::Ones),
                    k_norm: self.push(n("attn_k_norm.weight"), vec![d], false, Init::Ones),
                    output: self.push(n("attn_output.weight"), vec![q, c], true, resid),
                })
            }
        };
        let ffn_norm = self.push(n("post_attention_norm.weight"), vec![c], false, Init::Ones);
        let g = self.push(n("ffn_gate.weight"), vec![c, f], true, std);
        let u = self.push(n("ffn_up.weight"), vec![c, f], true, std);
        let ffn_down = self.push(n("ffn_down.weight"), vec![f, c], true, resid);
        HybridRanges {
            attn_norm,
            mixer,
            ffn_norm,
            ffn_up: g.start..u.end,
            ffn_down,
        }
    }
}
