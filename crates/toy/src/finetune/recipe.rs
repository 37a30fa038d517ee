//! Fine-tuning recipes (`recipes/sft-*.toml`): the base GGUF, the method (LoRA with its
//! targets, rank, alpha, rsLoRA; or full), the SFT data, and the schedule, in the shape of
//! `toy train`'s recipes (same `[optim]`, same `--set key=value` overrides, unknown keys
//! rejected). LoRA's scale is alpha / r, or alpha / sqrt(r) with `rslora` (arXiv 2312.03732).

use super::sft::OnLong;
use crate::model::tensors::part_names;
use crate::model::Arch;
use crate::train::recipe::{parse_toml, OptimSection, RecipeError};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BaseSection {
    /// The GGUF to fine-tune, in any weight type toy reads.
    pub model: PathBuf,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    Lora,
    Full,
}

/// `"all-linear"` or a list of part names.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Targets {
    Named(String),
    List(Vec<String>),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FinetuneSection {
    pub method: Method,
    #[serde(default = "all_linear")]
    pub targets: Targets,
    #[serde(default = "sixteen")]
    pub rank: usize,
    #[serde(default = "thirty_two")]
    pub alpha: f32,
    #[serde(default)]
    pub dropout: f32,
    #[serde(default)]
    pub rslora: bool,
    /// Train the function `toy serve` runs: attention sees keys and values rounded to f16 as
    /// its cache holds them, GPT-2's GELU goes through ggml's f16 table (straight through in
    /// the backward). Off: plain f32, as PyTorch trains.
    #[serde(default)]
    pub inference_rounding: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SftDataSection {
    pub train: PathBuf,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub val: Option<PathBuf>,
    /// Held out from `train` (every 1/fraction-th sample) when `val` is not given.
    #[serde(default = "tenth")]
    pub val_fraction: f64,
    #[serde(default)]
    pub on_long: OnLong,
    /// Several samples to a row of `ctx`, each attending only to itself.
    #[serde(default)]
    pub pack: bool,
    /// Draw the samples in a fresh random order each epoch (true), or in the file's order.
    #[serde(default = "yes")]
    pub shuffle: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FtTrainSection {
    pub ctx: usize,
    pub batch: usize,
    #[serde(default = "one")]
    pub grad_accum: usize,
    pub steps: usize,
    #[serde(default)]
    pub seed: u64,
    /// "f32", or "bf16": the f32 matrix products on bf16 operands (`train::precision`).
    #[serde(default)]
    pub precision: crate::train::precision::Precision,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FtIntervals {
    pub interval: usize,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FinetuneRecipe {
    pub name: String,
    pub base: BaseSection,
    pub finetune: FinetuneSection,
    pub data: SftDataSection,
    pub train: FtTrainSection,
    pub optim: OptimSection,
    pub eval: FtIntervals,
    pub checkpoint: FtIntervals,
}

fn all_linear() -> Targets {
    Targets::Named("all-linear".into())
}
fn sixteen() -> usize {
    16
}
fn thirty_two() -> f32 {
    32.0
}
fn tenth() -> f64 {
    0.1
}
fn yes() -> bool {
    true
}
fn one() -> usize {
    1
}

impl FinetuneRecipe {
    pub fn load(path: &Path, overrides: &[String]) -> Result<Self, RecipeError> {
        let text = std::fs::read_to_string(path).map_err(|source| RecipeError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let r: FinetuneRecipe = parse_toml(&text, &path.display().to_string(), overrides)?;
        r.validate()?;
        Ok(r)
    }

    pub fn to_toml(&self) -> String {
        toml::to_string(self).unwrap_or_else(|e| format!("# cannot serialize recipe: {e}\n"))
    }

    /// The part names LoRA adapts.
    pub fn targets(&self) -> Vec<String> {
        match &self.finetune.targets {
            Targets::Named(n) => vec![n.clone()],
            Targets::List(v) => v.clone(),
        }
    }

    /// s: alpha / r, or alpha / sqrt(r) for rsLoRA.
    pub fn lora_scale(&self) -> f32 {
        let (a, r) = (self.finetune.alpha, self.finetune.rank as f32);
        if self.finetune.rslora {
            a / r.sqrt()
        } else {
            a / r
        }
    }

    fn validate(&self) -> Result<(), RecipeError> {
        let bad = |m: String| Err(RecipeError::Invalid(m));
        let f = &self.finetune;
        if let Targets::Named(n) = &f.targets {
            if n != "all-linear" {
                return bad(format!(
                    "finetune.targets = {n:?}: expected \"all-linear\" or a list of {:?}",
                    part_names(Arch::Llama)
                ));
            }
        }
        let all = [Arch::Llama, Arch::Gpt2, Arch::Qwen35]
            .map(part_names)
            .concat();
        let known = |t: &str| all.contains(&t);
        for t in self.targets() {
            if t != "all-linear" && !known(&t) {
                let why = if t == "token_embd" || t == "output" {
                    " (the embedding and head stay frozen: SmolLM2's head is the tied embedding)"
                } else {
                    ""
                };
                return bad(format!(
                    "finetune.targets: no part {t:?}{why}; expected some of {:?} (llama, qwen2, qwen3), {:?} (gpt2) or {:?} (qwen35)",
                    part_names(Arch::Llama),
                    part_names(Arch::Gpt2),
                    part_names(Arch::Qwen35)
                ));
            }
        }
        if !(0.0..1.0).contains(&f.dropout) {
            return bad(format!(
                "finetune.dropout = {}: expected 0 <= p < 1",
                f.dropout
            ));
        }
        if f.dropout != 0.0 && f.method == Method::Full {
            return bad(format!(
                "finetune.dropout = {}: dropout is on the LoRA adapters' inputs; full \
                 fine-tuning has none (use 0)",
                f.dropout
            ));
        }
        let t = &self.train;
        for (k, v) in [
            ("train.ctx", t.ctx),
            ("train.batch", t.batch),
            ("train.steps", t.steps),
            ("train.grad_accum", t.grad_accum),
            ("eval.interval", self.eval.interval),
            ("checkpoint.interval", self.checkpoint.interval),
        ] {
            if v == 0 {
                return bad(format!("{k} must be at least 1"));
            }
        }
        if !(self.data.val_fraction > 0.0 && self.data.val_fraction < 1.0)
            && self.data.val.is_none()
        {
            return bad(format!(
                "data.val_fraction = {}: expected 0 < f < 1",
                self.data.val_fraction
            ));
        }
        Ok(())
    }
}
