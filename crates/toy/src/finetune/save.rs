//! A fine-tuning run's checkpoints: a LoRA run's adapters as llama.cpp's adapter GGUF
//! (`adapter.rs`), a full run's model as an f32 GGUF with the base's tokenizer keys, then the
//! optimizer and sample-order state (`train::checkpoint`), written last as the mark of a
//! complete checkpoint.

use super::adapter::{LoraAdapter, LoraTensor};
use super::recipe::{FinetuneRecipe, Method};
use super::run::{run_err, FinetuneError, Loaded};
use super::sft::SftBatcher;
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
    let infos = model.params_info();
    let mut tensors = Vec::new();
    for a in infos.iter().filter(|i| i.name.ends_with(".lora_a")) {
        let base = a.name.trim_end_matches(".lora_a").to_string();
        let b = infos
            .iter()
            .find(|i| i.name == format!("{base}.lora_b"))
            .expect("lora_b beside lora_a");
        tensors.push(LoraTensor {
            base,
            n_in: a.dims[0] as usize,
            n_out: b.dims[1] as usize,
            rank: r,
            a: model.params[a.range.clone()].to_vec(),
            b: model.params[b.range.clone()].to_vec(),
        });
    }
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
