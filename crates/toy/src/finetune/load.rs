//! Loading a fine-tune: the base GGUF, its tokenizer and chat template, the SFT data, and
//! the model to train on it (LoRA or full), with the errors a fine-tune returns. `run.rs`
//! drives the run, `task.rs` its steps, `save.rs` its checkpoints; each reads this file.

use super::recipe::{FinetuneRecipe, Method};
use super::sft::{load_jsonl, SftSet, IGNORE};
use crate::chat_template::ChatTemplate;
use crate::gguf::GgufFile;
use crate::tokenizer::Tokenizer;
use crate::train::trainer::TrainRunError;
use crate::train::{LoraSpec, TrainModel};
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum FinetuneError {
    #[error(transparent)]
    Run(#[from] TrainRunError),
    #[error(transparent)]
    Sft(#[from] super::sft::SftError),
    #[error(transparent)]
    Adapter(#[from] super::adapter::AdapterError),
    #[error("base model {path}: {why}")]
    Base { path: PathBuf, why: String },
    #[error("{what}: no samples left to {use_}")]
    Empty { what: String, use_: &'static str },
}

pub(super) fn run_err(e: impl Into<TrainRunError>) -> FinetuneError {
    FinetuneError::Run(e.into())
}

/// The base, its tokenizer and template, and the train / validation sets of a recipe.
pub struct Loaded {
    pub file: Arc<GgufFile>,
    pub tok: Tokenizer,
    pub train: SftSet,
    pub val: SftSet,
}

pub fn load(recipe: &FinetuneRecipe) -> Result<Loaded, FinetuneError> {
    let path = &recipe.base.model;
    let base = |why: String| FinetuneError::Base {
        path: path.clone(),
        why,
    };
    let file = Arc::new(GgufFile::open(path).map_err(|e| base(e.to_string()))?);
    let tok = Tokenizer::from_gguf(&file).map_err(|e| base(e.to_string()))?;
    let template = ChatTemplate::from_gguf(&file, None).ok();
    let (ctx, on_long) = (recipe.train.ctx, recipe.data.on_long);
    let mut train = load_jsonl(&recipe.data.train, &tok, template.as_ref(), ctx, on_long)?;
    let val = match &recipe.data.val {
        Some(v) => load_jsonl(v, &tok, template.as_ref(), ctx, on_long)?,
        None => {
            let every = (1.0 / recipe.data.val_fraction).round().max(2.0) as usize;
            let all = std::mem::take(&mut train.samples);
            let (mut tr, mut va) = (Vec::new(), Vec::new());
            for (i, s) in all.into_iter().enumerate() {
                if i % every == every - 1 {
                    va.push(s)
                } else {
                    tr.push(s)
                }
            }
            train.samples = tr;
            SftSet {
                samples: va,
                skipped_long: 0,
                truncated: 0,
                trainable_tokens: 0,
            }
        }
    };
    for (set, what) in [(&train, "train"), (&val, "validation")] {
        if set.samples.is_empty() {
            return Err(FinetuneError::Empty {
                what: format!("{} ({what})", recipe.data.train.display()),
                use_: "train on",
            });
        }
    }
    Ok(Loaded {
        file,
        tok,
        train,
        val,
    })
}

/// The model a recipe fine-tunes, fresh or holding `params`.
pub fn model(
    recipe: &FinetuneRecipe,
    file: &Arc<GgufFile>,
    params: Option<Vec<f32>>,
) -> Result<TrainModel, FinetuneError> {
    let (ctx, b) = (recipe.train.ctx, recipe.train.batch);
    let rounding = recipe.finetune.inference_rounding;
    let m = match recipe.finetune.method {
        Method::Lora => {
            let spec = LoraSpec {
                targets: recipe.targets(),
                rank: recipe.finetune.rank,
                scale: recipe.lora_scale(),
                seed: recipe.train.seed,
                inference_rounding: rounding,
            };
            TrainModel::lora_on_base(file, ctx, b, &spec, params)
        }
        Method::Full => crate::train::base_config(file, ctx).and_then(|mut c| {
            c.inference_rounding = rounding;
            match params {
                None => TrainModel::from_base_as(file, c, b),
                Some(p) => TrainModel::from_params(c, b, p),
            }
        }),
    };
    let m = m.map_err(run_err)?;
    if recipe.data.pack {
        m.check_packing().map_err(run_err)?;
    }
    Ok(m)
}

/// Cuts the (B, T) batch to (B, T') with T' just past the last trained target of any row
/// (the rest is padding, which carries no loss and, causally, changes nothing before it);
/// returns T'. `pos`, when packed, is cut alike.
pub(super) fn compact(x: &mut [u32], y: &mut [u32], pos: &mut [u32], b: usize, t: usize) -> usize {
    let last = |r: usize| y[r * t..(r + 1) * t].iter().rposition(|&v| v != IGNORE);
    let te = (0..b).filter_map(last).max().map_or(1, |i| i + 1);
    for r in 1..b {
        x.copy_within(r * t..r * t + te, r * te);
        y.copy_within(r * t..r * t + te, r * te);
        if !pos.is_empty() {
            pos.copy_within(r * t..r * t + te, r * te);
        }
    }
    te
}
