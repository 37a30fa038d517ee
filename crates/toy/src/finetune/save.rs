//! A fine-tuning run's checkpoints: a LoRA run's adapters as llama.cpp's adapter GGUF
//! (`adapter.rs`), a full run's model as an f32 GGUF with the base's tokenizer keys, then the
//! optimizer and sample-order state (`train::checkpoint`), written last as the mark of a
//! complete checkpoint.

use super::adapter::{LoraAdapter, LoraTensor};
use super::load::{run_err, FinetuneError, Loaded};
use super::recipe::{FinetuneRecipe, Method};
use super::sft_batch::SftBatcher;
use crate::gguf::Value;
use crate::train::checkpoint::{self, Fault, StateHeader, StateView};
use crate::train::run::RunDir;
use crate::train::TrainModel;
use std::path::PathBuf;
use tinynn::optim::AdamW;

/// The adapters of a LoRA model, as llama.cpp's adapter file holds them (alpha = s * r, so
/// llama.cpp's alpha / r is the trained scale, rsLoRA included).
pub fn adapter_of(model: &TrainModel, recipe: &FinetuneRecipe, arch: &str) -> LoraAdapter {
    let r = recipe.finetune.rank;
    let tensors = model
        .adapters()
        .map(|l| LoraTensor {
            base: l.base.clone(),
            n_in: l.a.len() / r,
            n_out: l.b.len() / r,
            rank: r,
            a: model.params[l.a.clone()].to_vec(),
            b: model.params[l.b.clone()].to_vec(),
        })
        .collect();
    LoraAdapter {
        arch: arch.to_string(),
        alpha: recipe.lora_scale() * r as f32,
        tensors,
    }
}

/// Writes checkpoint `step`: the adapter (LoRA) or the model (full) as `ckpt-NNNNNN.gguf`,
/// then the optimizer state (`.state`, the mark of a complete checkpoint).
pub(super) fn save(
    run: &RunDir,
    recipe: &FinetuneRecipe,
    d: &Loaded,
    model: &TrainModel,
    opt: &AdamW,
    batcher: &SftBatcher,
    step: usize,
) -> Result<PathBuf, FinetuneError> {
    let gguf = run.path.join(checkpoint::gguf_name(step));
    let arch = d.file.architecture().unwrap_or("llama");
    match recipe.finetune.method {
        Method::Lora => adapter_of(model, recipe, arch).write(&gguf)?,
        Method::Full => {
            let kv: Vec<(String, Value)> = d
                .file
                .metadata
                .iter()
                .filter(|(k, _)| k.starts_with("tokenizer."))
                .cloned()
                .collect();
            crate::train::export::to_gguf(model, &kv, &recipe.name)
                .and_then(|w| w.write_file(&gguf))
                .map_err(run_err)?;
        }
    }
    let (rng, epoch, pos) = batcher.state();
    let header = StateHeader {
        step,
        adam_t: opt.t,
        data_rng: rng,
        n_params: model.params.len() as u64,
        data_epoch: epoch,
        data_pos: pos,
    };
    let view = StateView {
        header,
        params: &model.params,
        m: &opt.m,
        v: &opt.v,
    };
    checkpoint::save_state(
        &run.path.join(checkpoint::state_name(step)),
        &view,
        Fault::None,
    )
    .map_err(run_err)?;
    Ok(gguf)
}
