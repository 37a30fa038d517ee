//! The shape of a trainable model, and the errors training code returns.

use crate::model::tensors::{block_tensors, products, BlockShape, Part, Tensor};
use serde::{Deserialize, Serialize};

pub use super::hybrid_config::{HybridConfig, LayerKind};

/// The families: one enum for inference and training (`model::Arch`).
pub use crate::model::Arch;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelConfig {
    pub arch: Arch,
    pub vocab: usize,
    pub d_model: usize,
    pub n_head: usize,
    pub n_kv_head: usize,
    pub d_ff: usize,
    pub n_layer: usize,
    pub ctx: usize,
    pub norm_eps: f32,
    pub rope_base: f32,
    /// Scale each block's normalised input by 1/sqrt(l+1) (Curse of Depth, arXiv 2502.05795).
    pub depth_scale: bool,
    /// Output head shares the token embedding (llama); gpt2 always ties.
    pub tied: bool,
    /// qwen35 only: the layer kinds and the mixers' shapes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hybrid: Option<HybridConfig>,
    /// Head size D where it is not d_model / n_head (a GGUF's `attention.key_length`, as in
    /// Qwen3); a hybrid's is its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_dim: Option<usize>,
    /// llama3 RoPE scaling: a divisor per rotated pair (the GGUF's `rope_freqs.weight`),
    /// fixed, not trained.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_freqs: Option<Vec<f32>>,
    /// The context the model is for, where longer than the training `ctx` (a fine-tune's
    /// base: its `context_length`, and GPT-2's rows of learned positions), kept on export.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ctx_train: Option<usize>,
    /// The forward rounds as cached inference does (straight through in the backward):
    /// attention sees keys and values rounded to f16, as inference's f16 KV cache holds them,
    /// and GPT-2's GELU goes through f16, as ggml's table. The training pass is then the
    /// cached inference pass's function, not only close to it. Off by default (f32 throughout,
    /// as PyTorch trains).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub inference_rounding: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    #[error("bad model config: {0}")]
    Config(String),
    #[error("params hold {got} values: this model config needs {expected}")]
    ParamCount { got: usize, expected: usize },
    #[error("bad batch: {0}")]
    Batch(String),
    #[error("base model: {0}")]
    Base(String),
}

/// Largest size of any one dimension we accept (bounds every allocation from a config).
pub(crate) const MAX_DIM: usize = 1 << 20;

impl ModelConfig {
    /// Head size D (a hybrid's own, else d_model / n_head).
    pub fn head_dim(&self) -> usize {
        match (&self.hybrid, self.head_dim) {
            (Some(h), _) => h.head_dim,
            (None, Some(d)) => d,
            (None, None) => self.d_model / self.n_head.max(1),
        }
    }

    /// The shape the block products' table reads (`model::tensors`).
    pub fn block_shape(&self) -> BlockShape {
        BlockShape {
            c: self.d_model,
            f: self.d_ff,
            h: self.n_head,
            hkv: self.n_kv_head,
            d: self.head_dim(),
            gdn: self.hybrid.as_ref().map(|h| h.gdn_shape(self.norm_eps)),
        }
    }

    /// What mixes the tokens in layer l.
    pub fn kind(&self, l: usize) -> LayerKind {
        self.hybrid
            .as_ref()
            .map_or(LayerKind::Attention, |h| h.layers[l])
    }

    /// Block l's tensors (`model::tensors::block_tensors`).
    pub fn block_tensors(&self, l: usize) -> Vec<Tensor> {
        block_tensors(self.arch, self.kind(l), &self.block_shape())
    }

    /// Block l's products, each its parts (`model::tensors::products`).
    pub fn products(&self, l: usize) -> Vec<Vec<Part>> {
        products(self.arch, self.kind(l), &self.block_shape())
    }

    /// The context the model is for: `ctx_train`, else the training ctx.
    pub fn context(&self) -> usize {
        self.ctx_train.unwrap_or(self.ctx).max(self.ctx)
    }

    /// Whether the output head is the token embedding.
    pub fn is_tied(&self) -> bool {
        self.tied || self.arch == Arch::Gpt2
    }

    /// Checks the shape is one the layers can run; says what is wrong otherwise.
    pub fn validate(&self) -> Result<(), TrainError> {
        let bad = |m: String| Err(TrainError::Config(m));
        for (name, v) in [
            ("vocab", self.vocab),
            ("d_model", self.d_model),
            ("n_head", self.n_head),
            ("n_kv_head", self.n_kv_head),
            ("d_ff", self.d_ff),
            ("n_layer", self.n_layer),
            ("ctx", self.ctx),
        ] {
            if v == 0 || v > MAX_DIM {
                return bad(format!("{name} = {v}, expected 1..={MAX_DIM}"));
            }
        }
        match (&self.hybrid, self.arch) {
            (Some(h), Arch::Qwen35) => h.validate(self.n_layer)?,
            (None, Arch::Qwen35) => {
                return bad("qwen35 needs the layer kinds and mixer shapes".into())
            }
            (Some(_), arch) => {
                return bad(format!("{} has no hybrid layers", arch.name()));
            }
            (None, _) => {}
        }
        if let Some(d) = self.head_dim {
            if d == 0 || d > MAX_DIM || self.hybrid.is_some() {
                return bad(format!(
                    "head_dim {d}: expected 1..={MAX_DIM}, and none beside a hybrid's own"
                ));
            }
        }
        if self.ctx_train.is_some_and(|c| c < self.ctx || c > MAX_DIM) {
            return bad(format!(
                "ctx_train {:?}: expected ctx ({}) ..= {MAX_DIM}",
                self.ctx_train, self.ctx
            ));
        }
        if let Some(f) = &self.rope_freqs {
            let half = self.head_dim() / 2;
            if f.len() != half
                || self.arch.is_gpt2()
                || f.iter().any(|v| !(*v > 0.0 && v.is_finite()))
            {
                return bad(format!(
                    "rope_freqs: {} divisors, expected {half} positive ones (one per rotated pair) on a RoPE family",
                    f.len()
                ));
            }
        }
        if self.hybrid.is_none()
            && self.head_dim.is_none()
            && !self.d_model.is_multiple_of(self.n_head)
        {
            return bad(format!(
                "n_head {} does not divide d_model {}",
                self.n_head, self.d_model
            ));
        }
        if !self.n_head.is_multiple_of(self.n_kv_head) {
            return bad(format!(
                "n_kv_head {} does not divide n_head {}",
                self.n_kv_head, self.n_head
            ));
        }
        let d = self.head_dim();
        if d > tinynn::layers::attention::MAX_HEAD_DIM {
            return bad(format!(
                "head size {d} is over {}",
                tinynn::layers::attention::MAX_HEAD_DIM
            ));
        }
        match self.arch {
            arch if !arch.is_gpt2() && !d.is_multiple_of(2) => {
                bad(format!("head size {d} must be even for RoPE"))
            }
            Arch::Gpt2 if self.n_kv_head != self.n_head => bad(format!(
                "gpt2 has one kv head per head (fused attn_qkv): n_kv_head {} != n_head {}",
                self.n_kv_head, self.n_head
            )),
            _ if !(self.norm_eps > 0.0 && self.norm_eps.is_finite()) => {
                bad(format!("norm_eps {} must be positive", self.norm_eps))
            }
            _ if !(self.rope_base > 0.0 && self.rope_base.is_finite()) => {
                bad(format!("rope_base {} must be positive", self.rope_base))
            }
            _ => Ok(()),
        }
    }
}
