//! A ViT training recipe (TOML): the `[vit]` shape, the `[data]` shards of `toy data images`
//! and their augmentation, the `[train]` schedule (AdamW, warm-up and cosine, label
//! smoothing, evaluation and checkpoint intervals). Overridable with `--set key=value` as the
//! language-model recipes are (`train::recipe::parse_toml`).

use super::batch::BatchSpec;
use super::vit::VitConfig;
use std::path::PathBuf;

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VitRecipe {
    pub name: String,
    pub vit: VitConfig,
    pub data: VitData,
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
    pub lr: f32,
    #[serde(default)]
    pub min_lr: f32,
    pub warmup: usize,
    pub weight_decay: f32,
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
        let r: VitRecipe =
            crate::train::recipe::parse_toml(text, what, overrides).map_err(|e| e.to_string())?;
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
        Ok(r)
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
