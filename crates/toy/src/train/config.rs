//! The shape of a trainable model, and the errors training code returns. The shape is
//! inference's `model::Config`, the one config of a model: filled from a GGUF's keys for a
//! base (`train::base_config`) or from a recipe's `[model]`. A [`ModelConfig`] adds what
//! only training asks (its context, depth scaling, rounding as inference does) and reads as
//! that config (`Deref`). Checkpoints and run folders keep it in the recipe's words, a
//! [`ModelSpec`], as earlier runs wrote it.

use super::MAX_DIM;
use serde::{Deserialize, Serialize};
use std::ops::{Deref, DerefMut};

pub use super::hybrid_config::{HybridConfig, LayerKind};

/// The families: one enum for inference and training (`model::Arch`).
pub use crate::model::Arch;

/// A model to train: its one config (`model::Config`) and training's own settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "ModelSpec", into = "ModelSpec")]
pub struct ModelConfig {
    /// The model's shape and constants, as inference reads them.
    pub shape: crate::model::Config,
    /// The training context (sequence length).
    pub ctx: usize,
    /// Scale each block's normalised input by 1/sqrt(l+1) (Curse of Depth, arXiv 2502.05795).
    pub depth_scale: bool,
    /// The forward rounds as cached inference does (straight through in the backward):
    /// attention sees keys and values rounded to f16, as inference's f16 KV cache holds them,
    /// and GPT-2's GELU goes through f16, as ggml's table. The training pass is then the
    /// cached inference pass's function, not only close to it. Off by default (f32 throughout,
    /// as PyTorch trains).
    pub inference_rounding: bool,
}

impl Deref for ModelConfig {
    type Target = crate::model::Config;
    fn deref(&self) -> &Self::Target {
        &self.shape
    }
}

impl DerefMut for ModelConfig {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.shape
    }
}

/// A [`ModelConfig`] in a recipe's words: what checkpoints and run folders store.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelSpec {
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
    /// See [`ModelConfig::inference_rounding`].
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub inference_rounding: bool,
    /// Sliding-window attention (Gemma 3's local layers), from the base.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swa: Option<crate::model::Swa>,
}

impl TryFrom<ModelSpec> for ModelConfig {
    type Error = TrainError;

    /// The spec checked ([`ModelSpec::validate`]) and read as the one config.
    fn try_from(s: ModelSpec) -> Result<Self, TrainError> {
        s.validate()?;
        let h = s.hybrid.as_ref();
        let head_dim = s.head_size();
        let shape = crate::model::Config {
            arch: s.arch,
            n_layer: s.n_layer,
            d_model: s.d_model,
            n_head: s.n_head,
            n_kv_head: s.n_kv_head,
            head_dim,
            d_ff: s.d_ff,
            vocab: s.vocab,
            ctx_train: s.ctx_train.unwrap_or(s.ctx).max(s.ctx),
            norm_eps: s.norm_eps,
            rope_base: s.rope_base,
            rope_dim: h.map_or(head_dim, |h| h.rope_dim),
            rope_neox: s.arch.rope_neox(),
            kinds: h.map_or(vec![LayerKind::Attention; s.n_layer], |h| h.layers.clone()),
            gdn: h.map(|h| h.gdn_shape(s.norm_eps)),
            tied: s.tied,
            rope_freqs: s.rope_freqs,
            // Gemma's embeddings enter scaled by sqrt(C)
            embd_scale: (s.arch == Arch::Gemma3).then(|| (s.d_model as f32).sqrt()),
            swa: s.swa.clone(),
        };
        Ok(Self {
            shape,
            ctx: s.ctx,
            depth_scale: s.depth_scale,
            inference_rounding: s.inference_rounding,
        })
    }
}

impl From<ModelConfig> for ModelSpec {
    fn from(c: ModelConfig) -> Self {
        let hybrid = c.hybrid();
        let own_head = hybrid.is_none() && c.head_dim * c.n_head != c.d_model;
        let m = c.shape;
        ModelSpec {
            arch: m.arch,
            vocab: m.vocab,
            d_model: m.d_model,
            n_head: m.n_head,
            n_kv_head: m.n_kv_head,
            d_ff: m.d_ff,
            n_layer: m.n_layer,
            ctx: c.ctx,
            norm_eps: m.norm_eps,
            rope_base: m.rope_base,
            depth_scale: c.depth_scale,
            tied: m.tied,
            hybrid,
            head_dim: own_head.then_some(m.head_dim),
            rope_freqs: m.rope_freqs,
            ctx_train: (m.ctx_train > c.ctx).then_some(m.ctx_train),
            inference_rounding: c.inference_rounding,
            swa: m.swa,
        }
    }
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

impl ModelConfig {
    /// A hybrid's layer kinds and mixer shapes, in a recipe's words.
    pub fn hybrid(&self) -> Option<HybridConfig> {
        let g = self.gdn.as_ref()?;
        Some(HybridConfig {
            layers: self.kinds.clone(),
            head_dim: self.head_dim,
            rope_dim: self.rope_dim,
            gdn_key_heads: g.hk,
            gdn_value_heads: g.hv,
            gdn_key_dim: g.dk,
            gdn_value_dim: g.dv,
            conv_kernel: g.kernel,
        })
    }

    /// The context the model is for: the base's, or the training ctx where longer.
    pub fn context(&self) -> usize {
        self.ctx_train.max(self.ctx)
    }

    /// Whether the output head is the token embedding.
    pub fn is_tied(&self) -> bool {
        self.tied || self.arch == Arch::Gpt2
    }

    /// Checks the shape is one the layers can run (after changes to its fields); says what
    /// is wrong otherwise.
    pub fn validate(&self) -> Result<(), TrainError> {
        ModelSpec::from(self.clone()).validate()
    }
}

impl ModelSpec {
    /// Head size D: a hybrid's own, the given one, else d_model / n_head.
    fn head_size(&self) -> usize {
        match (&self.hybrid, self.head_dim) {
            (Some(h), _) => h.head_dim,
            (None, Some(d)) => d,
            (None, None) => self.d_model / self.n_head.max(1),
        }
    }

    /// Checks the shape is one the layers can run; says what is wrong otherwise.
    pub fn validate(&self) -> Result<(), TrainError> {
        let head_dim = self.head_size();
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
        if let Some(w) = &self.swa {
            if w.window == 0 || w.layers.len() != self.n_layer {
                return bad(format!(
                    "sliding window {} over {} layers: expected a window of 1 or more and one flag per layer ({})",
                    w.window,
                    w.layers.len(),
                    self.n_layer
                ));
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
            let half = head_dim / 2;
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
        let d = head_dim;
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
