//! Where the parameter tensors of one qwen35 block are: their names and dims are the family's
//! table (`model::tensors`, as llama.cpp's `src/models/qwen35.cpp`; see docs/qwen35.md), and
//! each starts as its role says (`Layout::push_block`): matrices N(0, 0.02),
//! the residual outputs (`ssm_out`, `attn_output`, `ffn_down`) N(0, 0.02 / sqrt(2 n_layer)),
//! norms 1, the conv U(+-1/sqrt(K)) (PyTorch's Conv1d default), `ssm_dt.bias` so that
//! softplus(dt_bias) is log-uniform in [1e-3, 1e-1] (Mamba), A_log = ln U(1, 16) (Qwen3.5).
//!
//! `blk.N.ssm_a` holds A_log while training (it is what AdamW steps and the state file keeps);
//! the export writes ssm_a = -exp(A_log), as the GGUF stores it.
//! Letters: C width, H / Hkv heads, D head size, F MLP width, Hk / Hv GDN key / value heads,
//! Dk / Dv their sizes, K conv taps, W = 2 Hk Dk + Hv Dv.

use super::params::Layout;
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
    /// Appends block `i` of a qwen35 model (its tensors as the family's table lists them).
    pub(super) fn push_hybrid(
        &mut self,
        cfg: &ModelConfig,
        h: &HybridConfig,
        i: usize,
    ) -> HybridRanges {
        let s = self.push_block(cfg, i);
        let mixer = match h.layers[i] {
            LayerKind::Gdn => MixerRanges::Gdn(GdnRanges {
                qkv: s.req("attn_qkv.weight"),
                gate: s.req("attn_gate.weight"),
                beta: s.req("ssm_beta.weight"),
                alpha: s.req("ssm_alpha.weight"),
                conv: s.req("ssm_conv1d.weight"),
                dt_bias: s.req("ssm_dt.bias"),
                a_log: s.req("ssm_a"),
                norm: s.req("ssm_norm.weight"),
                out: s.req("ssm_out.weight"),
            }),
            LayerKind::Attention => MixerRanges::Attn(AttnRanges {
                qkv: s.product(0),
                q_norm: s.req("attn_q_norm.weight"),
                k_norm: s.req("attn_k_norm.weight"),
                output: s.req("attn_output.weight"),
            }),
        };
        HybridRanges {
            attn_norm: s.req("attn_norm.weight"),
            mixer,
            ffn_norm: s.req("post_attention_norm.weight"),
            ffn_up: s
                .span("ffn_gate.weight", "ffn_up.weight")
                .expect("gate and up"),
            ffn_down: s.req("ffn_down.weight"),
        }
    }
}
