//! A ViT training recipe (TOML): the `[vit]` shape, the `[data]` shards of `toy data images`
//! and their augmentation, the `[optim]` section the language-model recipes have (AdamW,
//! warm-up and cosine, global-norm clipping: `train::recipe::OptimSection`, one type), and
//! the `[train]` run (batch, steps, gradient accumulation, label smoothing, evaluation and
//! checkpoint intervals). Overridable with `--set key=value` as the language-model recipes
//! are (`train::recipe::parse_toml`). The optimizer keys older recipes kept under `[train]`
//! (`lr`, `min_lr`, `warmup`, `weight_decay`) are still read, with a warning naming the new
//! key; such a recipe keeps its old AdamW (beta2 0.999) and no clipping.

use super::batch::BatchSpec;
use super::vit::VitConfig;
use crate::train::recipe::OptimSection;
use std::path::PathBuf;

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VitRecipe {
    pub name: String,
    pub vit: VitConfig,
    pub data: VitData,
    /// AdamW and its schedule; None only in a recipe of the old form, until `parse` fills
    /// it from the `[train]` keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optim: Option<OptimSection>,
    pub train: VitTrain,
}

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VitData {
    /// Shards written by `toy data images`.
    pub dir: PathBuf,
    pub mean: Vec<f32>,
    pub std: Vec<f32>,
    #[serde(default)]
    pub crop_pad: usize,
    #[serde(default)]
    pub flip: bool,
}

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VitTrain {
    pub batch: usize,
    pub steps: usize,
    /// Batches whose gradients one optimizer step sums (each of `batch` images).
    #[serde(default = "one")]
    pub grad_accum: usize,
    /// The old home of `[optim]`'s keys, read with a warning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lr: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_lr: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight_decay: Option<f32>,
    #[serde(default)]
    pub label_smoothing: f32,
    pub eval_every: usize,
    /// Evaluate on the first this many validation images (0 = all of them).
    #[serde(default)]
    pub eval_images: usize,
    /// Steps between checkpoints (`ckpt-NNNNNN.gguf` + `.state`); 0 = at each evaluation.
    #[serde(default)]
    pub checkpoint_every: usize,
    #[serde(default)]
    pub seed: u64,
    /// "f32", or "bf16": the matrix products on bf16 operands (`train::precision`).
    #[serde(default)]
    pub precision: crate::train::precision::Precision,
}

fn one() -> usize {
    1
}

/// Whether a recipe's TOML trains the image classifier (it has a `[vit]` table).
pub fn is_vit_recipe(text: &str) -> bool {
    text.parse::<toml::Table>()
        .is_ok_and(|t| t.contains_key("vit"))
}

impl VitRecipe {
    pub fn from_toml(text: &str) -> Result<Self, String> {
        Self::parse(text, "recipe", &[])
    }

    /// The recipe in `text` with `overrides` ("train.lr=1e-3", dotted keys) applied, checked.
    pub fn parse(text: &str, what: &str, overrides: &[String]) -> Result<Self, String> {
        let mut r: VitRecipe =
            crate::train::recipe::parse_toml(text, what, overrides).map_err(|e| e.to_string())?;
        r.move_old_optim_keys(what)?;
        r.vit.check()?;
        let ch = r.vit.channels;
        if r.data.mean.len() != ch || r.data.std.len() != ch {
            return Err(format!(
                "data.mean and data.std need {ch} entries (one per channel)"
            ));
        }
        if r.train.batch == 0 || r.train.steps == 0 || r.train.eval_every == 0 {
            return Err("train.batch, train.steps and train.eval_every must be at least 1".into());
        }
        if r.train.grad_accum == 0 || r.train.grad_accum > 1 << 16 {
            return Err(format!(
                "train.grad_accum = {}, expected 1..=65536",
                r.train.grad_accum
            ));
        }
        let o = r.optim();
        if !(o.lr.is_finite() && o.min_lr.is_finite() && o.grad_clip >= 0.0) {
            return Err("optim.lr and optim.min_lr must be finite, optim.grad_clip >= 0".into());
        }
        Ok(r)
    }

    /// `[train] lr, min_lr, warmup, weight_decay` (the old form) moved into `[optim]`, with a
    /// warning for each; both forms at once is an error naming the key.
    fn move_old_optim_keys(&mut self, what: &str) -> Result<(), String> {
        let t = &mut self.train;
        let old = [
            ("lr", t.lr.is_some()),
            ("min_lr", t.min_lr.is_some()),
            ("warmup", t.warmup.is_some()),
            ("weight_decay", t.weight_decay.is_some()),
        ];
        let given: Vec<&str> = old.iter().filter(|k| k.1).map(|k| k.0).collect();
        match (&self.optim, given.is_empty()) {
            (Some(_), true) => return Ok(()),
            (Some(_), false) => {
                return Err(format!(
                    "{what}: train.{} is the old name of optim.{0}; give it under [optim] only",
                    given[0]
                ))
            }
            (None, true) => return Err(format!("{what}: missing [optim] (lr, min_lr, warmup)")),
            (None, false) => {}
        }
        for k in &given {
            eprintln!("warning: {what}: train.{k} is read as optim.{k}; write it under [optim]");
        }
        let lr =
            t.lr.take()
                .ok_or_else(|| format!("{what}: missing optim.lr"))?;
        self.optim = Some(OptimSection {
            lr,
            min_lr: t.min_lr.take().unwrap_or(0.0),
            warmup: t
                .warmup
                .take()
                .ok_or_else(|| format!("{what}: missing optim.warmup"))?,
            weight_decay: t.weight_decay.take().unwrap_or(0.0),
            // what the old form trained with: AdamW (0.9, 0.999), no clipping
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            grad_clip: 0.0,
        });
        Ok(())
    }

    /// The optimizer section (filled by `parse`).
    pub fn optim(&self) -> &OptimSection {
        self.optim.as_ref().expect("parse fills [optim]")
    }

    /// The resolved recipe as TOML (a run folder's `config.toml`).
    pub fn to_toml(&self) -> String {
        toml::to_string(self).unwrap_or_default()
    }

    /// Steps between checkpoints.
    pub fn checkpoint_every(&self) -> usize {
        match self.train.checkpoint_every {
            0 => self.train.eval_every,
            n => n,
        }
    }

    pub fn batch_spec(&self, augment: bool) -> BatchSpec {
        BatchSpec {
            size: self.vit.image,
            channels: self.vit.channels,
            mean: self.data.mean.clone(),
            std: self.data.std.clone(),
            crop_pad: if augment { self.data.crop_pad } else { 0 },
            flip: augment && self.data.flip,
        }
    }
}
