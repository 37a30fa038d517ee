//! Writing a [`TrainModel`]'s weights as a GGUF model that toy and llama.cpp load: f32
//! tensors under their GGUF names, the hyperparameters as llama.cpp's standard
//! `{arch}.*` keys (`llama-arch.cpp`), and the tokenizer's `tokenizer.ggml.*` keys.
//!
//! Depth scaling (each block's normalised input times 1/sqrt(l+1), "The Curse of Depth",
//! arXiv 2502.05795) has no GGUF key, so it is folded into the norms: for block l the
//! attn_norm / ffn_norm weight (and LayerNorm bias) are multiplied by 1/sqrt(l+1), which
//! gives the same function exactly in real arithmetic.

use std::path::Path;

use tinynn::quant::GgmlType;

use super::{ModelConfig, TrainArch, TrainModel};
use crate::gguf::{GgufError, GgufWriter, Value};
use crate::tokenizer::TokenizerSpec;

/// The factor folded into tensor `name` for depth scaling (1 when none applies).
pub fn depth_factor(cfg: &ModelConfig, name: &str) -> f32 {
    if !cfg.depth_scale {
        return 1.0;
    }
    let Some(rest) = name.strip_prefix("blk.") else {
        return 1.0;
    };
    let Some((layer, tensor)) = rest.split_once('.') else {
        return 1.0;
    };
    let folded = matches!(
        tensor,
        "attn_norm.weight" | "attn_norm.bias" | "ffn_norm.weight" | "ffn_norm.bias"
    );
    match (folded, layer.parse::<usize>()) {
        (true, Ok(l)) => tinynn::layers::depth_scale(l),
        _ => 1.0,
    }
}

/// The metadata and tensors of `model` as a GGUF writer (weights copied out as f32 bytes).
pub fn to_gguf(
    model: &TrainModel,
    tokenizer: &[(String, Value)],
    name: &str,
) -> Result<GgufWriter<'static>, GgufError> {
    let cfg = &model.cfg;
    let arch = cfg.arch.name();
    let mut w = GgufWriter::new();
    let k = |s: &str| format!("{arch}.{s}");
    let u32v = |x: usize| Value::U32(x as u32);
    w.add_metadata("general.architecture", Value::String(arch.into()));
    w.add_metadata("general.name", Value::String(name.into()));
    w.add_metadata("general.file_type", Value::U32(0)); // all f32
    w.add_metadata(k("context_length"), u32v(cfg.ctx));
    w.add_metadata(k("embedding_length"), u32v(cfg.d_model));
    w.add_metadata(k("block_count"), u32v(cfg.n_layer));
    w.add_metadata(k("feed_forward_length"), u32v(cfg.d_ff));
    w.add_metadata(k("attention.head_count"), u32v(cfg.n_head));
    match cfg.arch {
        TrainArch::Llama => {
            w.add_metadata(k("attention.head_count_kv"), u32v(cfg.n_kv_head));
            w.add_metadata(
                k("attention.layer_norm_rms_epsilon"),
                Value::F32(cfg.norm_eps),
            );
            w.add_metadata(k("rope.freq_base"), Value::F32(cfg.rope_base));
            w.add_metadata(k("rope.dimension_count"), u32v(cfg.d_model / cfg.n_head));
            w.add_metadata(k("vocab_size"), u32v(cfg.vocab));
        }
        TrainArch::Gpt2 => {
            w.add_metadata(k("attention.layer_norm_epsilon"), Value::F32(cfg.norm_eps));
        }
    }
    for (key, v) in tokenizer {
        w.add_metadata(key.clone(), v.clone());
    }
    for p in model.params_info() {
        let f = depth_factor(cfg, &p.name);
        let mut bytes = Vec::with_capacity(4 * p.range.len());
        for &x in &model.params[p.range.clone()] {
            let x = if f == 1.0 { x } else { x * f };
            bytes.extend_from_slice(&x.to_le_bytes());
        }
        w.add_tensor(p.name.clone(), p.dims.clone(), GgmlType::F32, bytes)?;
    }
    Ok(w)
}

/// Writes `model` to `path` atomically (see [`GgufWriter::write_file`]).
pub fn export_gguf(
    model: &TrainModel,
    tokenizer: &TokenizerSpec,
    name: &str,
    path: &Path,
) -> Result<(), GgufError> {
    let kv = super::bpe::tokenizer_metadata(tokenizer);
    to_gguf(model, &kv, name)?.write_file(path)
}
