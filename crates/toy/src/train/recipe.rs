//! Training recipes: one TOML file (`recipes/*.toml`) holding the model shape, the data, the
//! optimizer and the schedule, overridable from the command line with `--set key=value`
//! (dotted keys, TOML values: `--set optim.lr=1e-3 --set model.arch=gpt2`).
//! Every section rejects unknown keys, so a typo is an error rather than a silent default.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{Arch, HybridConfig, ModelConfig, ModelSpec, TrainError};

#[derive(Debug, thiserror::Error)]
pub enum RecipeError {
    #[error("reading recipe {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("recipe {what}: {message}")]
    Parse { what: String, message: String },
    #[error("--set {0:?}: expected key=value with a dotted key, e.g. optim.lr=1e-3")]
    BadOverride(String),
    #[error("--set {key}: {why}")]
    OverridePath { key: String, why: String },
    #[error("recipe: {0}")]
    Invalid(String),
}

/// The model's shape (`[model]`); becomes a [`ModelConfig`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSection {
    pub arch: Arch,
    pub vocab: usize,
    pub d_model: usize,
    pub n_head: usize,
    /// Defaults to `n_head` (no grouping).
    #[serde(default)]
    pub n_kv_head: Option<usize>,
    pub d_ff: usize,
    pub n_layer: usize,
    pub ctx: usize,
    #[serde(default = "default_norm_eps")]
    pub norm_eps: f32,
    #[serde(default = "default_rope_base")]
    pub rope_base: f32,
    #[serde(default)]
    pub depth_scale: bool,
    #[serde(default = "yes")]
    pub tied: bool,
    /// Train the function cached inference runs: K/V rounded to f16 as its cache holds them,
    /// GPT-2's GELU as ggml's table (`ModelConfig::inference_rounding`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub inference_rounding: bool,
    /// qwen35: per layer "gdn" or "attn", or every `full_attention_interval`-th layer
    /// attending (default 4); see [`HybridConfig::from_section`] for the other defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layers: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full_attention_interval: Option<usize>,
    /// The attention head size (default d_model / n_head; any RoPE family, e.g. qwen3 with
    /// heads wider than d_model / n_head) and qwen35's rotary dims (head_dim / 4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_dim: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_dim: Option<usize>,
    /// qwen35 Gated DeltaNet heads and sizes (defaults n_head value heads, as many key heads,
    /// head_dim each) and conv taps (4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gdn_key_heads: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gdn_value_heads: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gdn_key_dim: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gdn_value_dim: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conv_kernel: Option<usize>,
}

/// Where the token shards are (`[data]`). When `dir` has no prepared data, `toy train`
/// prepares it from `inputs` (empty: the Rust book from the local Rust documentation).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataSection {
    pub dir: PathBuf,
    #[serde(default)]
    pub inputs: Vec<PathBuf>,
    #[serde(default = "default_val_fraction")]
    pub val_fraction: f64,
}

/// `[train]`: batch shape, length and seed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainSection {
    pub batch: usize,
    #[serde(default = "one")]
    pub grad_accum: usize,
    pub steps: usize,
    #[serde(default)]
    pub seed: u64,
    /// "f32", or "bf16": the matrix products on bf16 operands (`train::precision`).
    #[serde(default)]
    pub precision: super::precision::Precision,
}

/// `[optim]`: AdamW and the learning-rate schedule (linear warm-up, cosine to `min_lr`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OptimSection {
    pub lr: f32,
    pub min_lr: f32,
    pub warmup: usize,
    #[serde(default = "default_weight_decay")]
    pub weight_decay: f32,
    #[serde(default = "default_beta1")]
    pub beta1: f32,
    #[serde(default = "default_beta2")]
    pub beta2: f32,
    #[serde(default = "default_eps")]
    pub eps: f32,
    /// Global-norm clipping threshold; 0 disables clipping.
    #[serde(default = "one_f32")]
    pub grad_clip: f32,
}

/// `[eval]`: validation loss every `interval` steps over `batches` fixed batches, and a
/// sample of `sample_tokens` tokens after `prompt`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvalSection {
    pub interval: usize,
    #[serde(default = "default_eval_batches")]
    pub batches: usize,
    #[serde(default = "default_sample_tokens")]
    pub sample_tokens: usize,
    #[serde(default = "default_prompt")]
    pub prompt: String,
}

/// `[checkpoint]`: a GGUF + optimizer state every `interval` steps and at the end.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointSection {
    pub interval: usize,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Recipe {
    /// A short name, used in run ids.
    pub name: String,
    pub model: ModelSection,
    pub data: DataSection,
    pub train: TrainSection,
    pub optim: OptimSection,
    pub eval: EvalSection,
    pub checkpoint: CheckpointSection,
}

fn yes() -> bool {
    true
}
fn one() -> usize {
    1
}
fn one_f32() -> f32 {
    1.0
}
fn default_norm_eps() -> f32 {
    1e-5
}
fn default_rope_base() -> f32 {
    10000.0
}
fn default_val_fraction() -> f64 {
    0.05
}
fn default_weight_decay() -> f32 {
    0.1
}
fn default_beta1() -> f32 {
    0.9
}
fn default_beta2() -> f32 {
    0.95
}
fn default_eps() -> f32 {
    1e-8
}
fn default_eval_batches() -> usize {
    4
}
fn default_sample_tokens() -> usize {
    48
}
fn default_prompt() -> String {
    "fn main".into()
}

impl Recipe {
    /// Reads `path` and applies `overrides` ("key=value", dotted keys) in order.
    pub fn load(path: &Path, overrides: &[String]) -> Result<Self, RecipeError> {
        let text = std::fs::read_to_string(path).map_err(|source| RecipeError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text, &path.display().to_string(), overrides)
    }

    /// Parses recipe text (`what` names it in errors) and applies `overrides`.
    pub fn parse(text: &str, what: &str, overrides: &[String]) -> Result<Self, RecipeError> {
        let recipe: Recipe = parse_toml(text, what, overrides)?;
        recipe.validate()?;
        Ok(recipe)
    }

    /// The resolved recipe as TOML (what `runs/<id>/config.toml` holds).
    pub fn to_toml(&self) -> String {
        toml::to_string(self).unwrap_or_else(|e| format!("# cannot serialize recipe: {e}\n"))
    }

    /// The recipe's model, checked: the one config it trains.
    pub fn model_config(&self) -> Result<ModelConfig, TrainError> {
        self.model_spec().try_into()
    }

    /// The recipe's model in a checkpoint's words.
    pub fn model_spec(&self) -> ModelSpec {
        let m = &self.model;
        ModelSpec {
            arch: m.arch,
            vocab: m.vocab,
            d_model: m.d_model,
            n_head: m.n_head,
            n_kv_head: m.n_kv_head.unwrap_or(m.n_head),
            d_ff: m.d_ff,
            n_layer: m.n_layer,
            ctx: m.ctx,
            norm_eps: m.norm_eps,
            rope_base: m.rope_base,
            depth_scale: m.depth_scale,
            // GPT-2 always ties its head to the embedding.
            tied: m.tied || m.arch == Arch::Gpt2,
            // checked by `validate` when the recipe was parsed
            hybrid: HybridConfig::from_section(m).ok().flatten(),
            head_dim: m.head_dim.filter(|_| m.arch != Arch::Qwen35),
            rope_freqs: None,
            ctx_train: None,
            inference_rounding: m.inference_rounding,
            swa: None,
        }
    }

    fn validate(&self) -> Result<(), RecipeError> {
        let bad = |s: String| Err(RecipeError::Invalid(s));
        let m = &self.model;
        for (k, v) in [
            ("model.vocab", m.vocab),
            ("model.d_model", m.d_model),
            ("model.n_head", m.n_head),
            ("model.d_ff", m.d_ff),
            ("model.n_layer", m.n_layer),
            ("model.ctx", m.ctx),
            ("train.batch", self.train.batch),
            ("train.grad_accum", self.train.grad_accum),
            ("train.steps", self.train.steps),
            ("eval.interval", self.eval.interval),
            ("checkpoint.interval", self.checkpoint.interval),
        ] {
            if v == 0 {
                return bad(format!("{k} is 0, expected at least 1"));
            }
        }
        HybridConfig::from_section(m).map_err(RecipeError::Invalid)?;
        if m.head_dim.is_none() && !m.d_model.is_multiple_of(m.n_head) {
            return bad(format!(
                "model.n_head {} does not divide model.d_model {}",
                m.n_head, m.d_model
            ));
        }
        let kv = m.n_kv_head.unwrap_or(m.n_head);
        if kv == 0 || !m.n_head.is_multiple_of(kv) {
            return bad(format!(
                "model.n_kv_head {kv} must divide model.n_head {}",
                m.n_head
            ));
        }
        if m.arch == Arch::Gpt2 && kv != m.n_head {
            return bad("gpt2 has no grouped-query attention: n_kv_head must equal n_head".into());
        }
        if !(0.0..1.0).contains(&self.data.val_fraction) {
            return bad(format!(
                "data.val_fraction {} is outside [0, 1)",
                self.data.val_fraction
            ));
        }
        if !(self.optim.lr.is_finite() && self.optim.min_lr.is_finite()) {
            return bad("optim.lr and optim.min_lr must be finite".into());
        }
        if self.name.is_empty() || self.name.contains(['/', '\\']) {
            return bad(format!(
                "name {:?} must be non-empty, without slashes",
                self.name
            ));
        }
        // what the layers take (head size, eps, ...), as the trainer checks it
        let spec = self.model_spec().validate();
        spec.map_err(|e| RecipeError::Invalid(e.to_string()))
    }
}

/// Sets `a.b.c = value` in `table`; the value is read as TOML (`3`, `1e-3`, `true`,
/// `"x"`, `[1, 2]`), or taken as a plain string when it is not valid TOML (`arch=gpt2`).
/// Any recipe type from TOML text (`what` names it in errors) with `overrides` applied
/// ("key=value", dotted keys, in order); errors quote the offending line.
pub fn parse_toml<T: serde::de::DeserializeOwned>(
    text: &str,
    what: &str,
    overrides: &[String],
) -> Result<T, RecipeError> {
    let parse_err = |message: String| RecipeError::Parse {
        what: what.to_string(),
        message,
    };
    let mut table: toml::Table = toml::from_str(text).map_err(|e| parse_err(e.to_string()))?;
    for o in overrides {
        apply_override(&mut table, o)?;
    }
    // Deserialized from text so the error has a span, to quote the offending line.
    let resolved = toml::to_string(&table).map_err(|e| parse_err(e.to_string()))?;
    toml::from_str(&resolved).map_err(|e: toml::de::Error| {
        let at = e
            .span()
            .map(|s| where_in(&resolved, s.start))
            .unwrap_or_default();
        parse_err(format!("{}{at}", e.message().trim()))
    })
}

pub fn apply_override(table: &mut toml::Table, o: &str) -> Result<(), RecipeError> {
    let (key, raw) = o
        .split_once('=')
        .ok_or_else(|| RecipeError::BadOverride(o.to_string()))?;
    let key = key.trim();
    let parts: Vec<&str> = key.split('.').collect();
    if key.is_empty() || parts.iter().any(|p| p.is_empty()) {
        return Err(RecipeError::BadOverride(o.to_string()));
    }
    let value = parse_value(raw.trim());
    let path_err = |why: String| RecipeError::OverridePath {
        key: key.to_string(),
        why,
    };
    let (last, parents) = parts.split_last().expect("split of a non-empty key");
    let mut t = table;
    for (i, p) in parents.iter().enumerate() {
        let entry = t
            .entry(p.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        t = match entry {
            toml::Value::Table(inner) => inner,
            other => {
                let at = parts[..=i].join(".");
                return Err(path_err(format!(
                    "{at} is a {}, not a table",
                    other.type_str()
                )));
            }
        };
    }
    t.insert(last.to_string(), value);
    Ok(())
}

/// " (at [section] line)" for byte `pos` of TOML `text`.
fn where_in(text: &str, pos: usize) -> String {
    let before = &text[..pos.min(text.len())];
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[line_start..]
        .find('\n')
        .map_or(text.len(), |i| line_start + i);
    let line = text[line_start..line_end].trim();
    let section = before
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('['))
        .map(|l| format!("{} ", l.trim()))
        .unwrap_or_default();
    format!(" (at {section}{line})")
}

fn parse_value(raw: &str) -> toml::Value {
    let doc = format!("v = {raw}");
    match toml::from_str::<toml::Table>(&doc) {
        Ok(mut t) => t
            .remove("v")
            .unwrap_or_else(|| toml::Value::String(raw.into())),
        Err(_) => toml::Value::String(raw.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_parse_as_toml_or_fall_back_to_strings() {
        assert_eq!(parse_value("3"), toml::Value::Integer(3));
        assert_eq!(parse_value("1e-3"), toml::Value::Float(1e-3));
        assert_eq!(parse_value("true"), toml::Value::Boolean(true));
        assert_eq!(parse_value("gpt2"), toml::Value::String("gpt2".into()));
        assert_eq!(parse_value("\"a b\""), toml::Value::String("a b".into()));
    }
}
