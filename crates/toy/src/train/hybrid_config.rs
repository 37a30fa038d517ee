//! The shape of a trainable Qwen3.5-style hybrid: which layers are Gated DeltaNet and which
//! softmax attention (llama.cpp's `qwen35.attention.recurrent_layers`, or every
//! `full_attention_interval`-th layer attending, default 4, as HF's `layer_types`), the
//! attention head size and partial rotary size (Qwen3.5: a quarter of the head), and the GDN
//! shape (`qwen35.ssm.*`). Built from a recipe's `[model]` keys, checked before any allocation.

use super::recipe::ModelSection;
use super::MAX_DIM;
use super::{Arch, TrainError};
pub use crate::model::LayerKind;
use serde::{Deserialize, Serialize};
use tinynn::layers::gdn::GdnShape;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HybridConfig {
    /// One per layer.
    pub layers: Vec<LayerKind>,
    /// Attention head size D (Qwen3.5: not d_model / n_head).
    pub head_dim: usize,
    /// Dims of each q / k head that RoPE turns (neox pairs (i, i + rope_dim/2)).
    pub rope_dim: usize,
    /// GDN key heads Hk, value heads Hv (a multiple of Hk), their sizes Dk, Dv, conv taps K.
    pub gdn_key_heads: usize,
    pub gdn_value_heads: usize,
    pub gdn_key_dim: usize,
    pub gdn_value_dim: usize,
    pub conv_kernel: usize,
}

impl HybridConfig {
    /// The GDN core's shape (its norms use the model's RMS eps, as llama.cpp's graph does).
    pub fn gdn_shape(&self, eps: f32) -> GdnShape {
        GdnShape::new(
            self.gdn_key_heads,
            self.gdn_value_heads,
            self.gdn_key_dim,
            self.gdn_value_dim,
            self.conv_kernel,
            eps,
        )
    }

    /// `full_attention_interval` when the layers follow it exactly (for the GGUF key).
    pub fn interval(&self) -> Option<usize> {
        (1..=self.layers.len()).find(|&every| self.layers == kinds_every(self.layers.len(), every))
    }

    pub fn validate(&self, n_layer: usize) -> Result<(), TrainError> {
        let bad = |m: String| Err(TrainError::Config(m));
        if self.layers.len() != n_layer {
            return bad(format!(
                "{} layer kinds for n_layer = {n_layer}",
                self.layers.len()
            ));
        }
        for (name, v) in [
            ("head_dim", self.head_dim),
            ("rope_dim", self.rope_dim),
            ("gdn_key_heads", self.gdn_key_heads),
            ("gdn_value_heads", self.gdn_value_heads),
            ("gdn_key_dim", self.gdn_key_dim),
            ("gdn_value_dim", self.gdn_value_dim),
            ("conv_kernel", self.conv_kernel),
        ] {
            if v == 0 || v > MAX_DIM {
                return bad(format!("{name} = {v}, expected 1..={MAX_DIM}"));
            }
        }
        if !self.rope_dim.is_multiple_of(2) || self.rope_dim > self.head_dim {
            return bad(format!(
                "rope_dim {} must be even and at most head_dim {}",
                self.rope_dim, self.head_dim
            ));
        }
        if !self.gdn_value_heads.is_multiple_of(self.gdn_key_heads) {
            return bad(format!(
                "gdn_key_heads {} must divide gdn_value_heads {}",
                self.gdn_key_heads, self.gdn_value_heads
            ));
        }
        if self.gdn_key_dim != self.gdn_value_dim {
            return bad(format!(
                "gdn_key_dim {} != gdn_value_dim {}: llama.cpp's qwen35 needs them equal",
                self.gdn_key_dim, self.gdn_value_dim
            ));
        }
        if self.conv_kernel > 64 {
            return bad(format!("conv_kernel {} is over 64", self.conv_kernel));
        }
        Ok(())
    }

    /// From a recipe's `[model]`: None for the other families (which must not set these
    /// keys), the qwen35 defaults filled in otherwise. Errors name the key.
    pub fn from_section(m: &ModelSection) -> Result<Option<Self>, String> {
        let given = [
            ("layers", m.layers.is_some()),
            (
                "full_attention_interval",
                m.full_attention_interval.is_some(),
            ),
            ("head_dim", m.head_dim.is_some()),
            ("rope_dim", m.rope_dim.is_some()),
            ("gdn_key_heads", m.gdn_key_heads.is_some()),
            ("gdn_value_heads", m.gdn_value_heads.is_some()),
            ("gdn_key_dim", m.gdn_key_dim.is_some()),
            ("gdn_value_dim", m.gdn_value_dim.is_some()),
            ("conv_kernel", m.conv_kernel.is_some()),
        ];
        if m.arch != Arch::Qwen35 {
            // a head size of its own is any RoPE family's (Qwen3's); the rest is the hybrid's
            let own_head = |k: &str| k == "head_dim" && !m.arch.is_gpt2();
            return match given.iter().find(|(k, set)| *set && !own_head(k)) {
                Some((k, _)) => Err(format!(
                    "model.{k} is for arch = \"qwen35\", not {:?}",
                    m.arch.name()
                )),
                None => Ok(None),
            };
        }
        let layers = match (&m.layers, m.full_attention_interval) {
            (Some(_), Some(_)) => {
                return Err("give model.layers or model.full_attention_interval, not both".into())
            }
            (Some(list), None) => parse_layers(list, m.n_layer)?,
            (None, every) => {
                let every = every.unwrap_or(4);
                if every == 0 {
                    return Err("model.full_attention_interval is 0, expected at least 1".into());
                }
                kinds_every(m.n_layer, every)
            }
        };
        let head_dim = match m.head_dim {
            Some(d) => d,
            None if m.n_head > 0 && m.d_model.is_multiple_of(m.n_head) => m.d_model / m.n_head,
            None => {
                return Err(format!(
                    "model.n_head {} does not divide model.d_model {} (or set model.head_dim)",
                    m.n_head, m.d_model
                ))
            }
        };
        // Qwen3.5 turns a quarter of each head (64 of 256), kept even and at least one pair
        let rope_dim = m.rope_dim.unwrap_or(((head_dim / 4) & !1).max(2));
        let value_heads = m.gdn_value_heads.unwrap_or(m.n_head);
        let c = HybridConfig {
            layers,
            head_dim,
            rope_dim,
            gdn_key_heads: m.gdn_key_heads.unwrap_or(value_heads),
            gdn_value_heads: value_heads,
            gdn_key_dim: m.gdn_key_dim.unwrap_or(head_dim),
            gdn_value_dim: m.gdn_value_dim.unwrap_or(head_dim),
            conv_kernel: m.conv_kernel.unwrap_or(4),
        };
        c.validate(m.n_layer).map_err(|e| match e {
            TrainError::Config(s) => format!("model: {s}"),
            other => other.to_string(),
        })?;
        Ok(Some(c))
    }
}

/// Layer l attends when (l + 1) is a multiple of `every`, else is GDN (llama.cpp, HF).
fn kinds_every(n_layer: usize, every: usize) -> Vec<LayerKind> {
    (0..n_layer)
        .map(|l| {
            if (l + 1).is_multiple_of(every) {
                LayerKind::Attention
            } else {
                LayerKind::Gdn
            }
        })
        .collect()
}

fn parse_layers(list: &[String], n_layer: usize) -> Result<Vec<LayerKind>, String> {
    if list.len() != n_layer {
        return Err(format!(
            "model.layers has {} entries for model.n_layer = {n_layer}",
            list.len()
        ));
    }
    list.iter()
        .enumerate()
        .map(|(i, s)| match s.as_str() {
            "gdn" => Ok(LayerKind::Gdn),
            "attn" => Ok(LayerKind::Attention),
            other => Err(format!(
                "model.layers[{i}] = {other:?}: expected \"gdn\" or \"attn\""
            )),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interval_is_found_only_when_the_layers_follow_it() {
        let mut h = HybridConfig {
            layers: kinds_every(8, 4),
            head_dim: 16,
            rope_dim: 4,
            gdn_key_heads: 2,
            gdn_value_heads: 4,
            gdn_key_dim: 16,
            gdn_value_dim: 16,
            conv_kernel: 4,
        };
        assert_eq!(h.interval(), Some(4));
        h.layers[0] = LayerKind::Attention;
        assert_eq!(h.interval(), None);
        assert_eq!(kinds_every(3, 4), vec![LayerKind::Gdn; 3]);
    }
}
