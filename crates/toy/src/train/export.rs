//! Writing a [`TrainModel`]'s weights as a GGUF model that toy and llama.cpp load: f32
//! tensors under their GGUF names, the hyperparameters as llama.cpp's standard
//! `{arch}.*` keys (`llama-arch.cpp`), and the tokenizer's `tokenizer.ggml.*` keys.
//!
//! Depth scaling (each block's normalised input times 1/sqrt(l+1), "The Curse of Depth",
//! arXiv 2502.05795) has no GGUF key, so it is folded into the norms: for block l the
//! attn_norm / ffn_norm weight (and LayerNorm bias) are multiplied by 1/sqrt(l+1), which
//! gives the same function exactly in real arithmetic.
//!
//! A qwen35 hybrid is written as llama.cpp's `qwen35` (docs/hybrids.md, `src/models/qwen35.cpp`):
//! the `ssm.*` shape keys, `attention.recurrent_layers`, `key_length` / `value_length`, the
//! partial `rope.dimension_count` and the `rope.dimension_sections` llama.cpp requires; the
//! trained A_log goes out as `ssm_a` = -exp(A_log); depth scaling folds into attn_norm and
//! post_attention_norm.

use std::path::Path;

use tinynn::quant::GgmlType;

use super::{Arch, HybridConfig, LayerKind, ModelConfig, TrainModel};
use crate::gguf::{GgufError, GgufWriter, Value, ValueType};
use crate::model::ops::{BlockDef, Op};
use crate::tokenizer::TokenizerSpec;

/// The factor folded into tensor `name` for depth scaling (1 when none applies): the block's
/// Norm ops' weights and biases (`model::ops`) carry their layer's scale.
pub fn depth_factor(cfg: &ModelConfig, name: &str) -> f32 {
    if !cfg.depth_scale {
        return 1.0;
    }
    let Some(rest) = name.strip_prefix("blk.") else {
        return 1.0;
    };
    let Some((l, tensor)) = rest.split_once('.') else {
        return 1.0;
    };
    let Some(l) = l.parse::<usize>().ok().filter(|&l| l < cfg.n_layer) else {
        return 1.0;
    };
    let (norm, _) = tensor.rsplit_once('.').unwrap_or((tensor, ""));
    let def = BlockDef::new(cfg.arch, cfg.kinds[l]);
    let normed = |o: &Op| matches!(o, Op::Norm { name } if *name == norm);
    match def.ops.iter().any(normed) {
        true => tinynn::layers::depth_scale(l),
        false => 1.0,
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
    w.add_metadata(k("context_length"), u32v(cfg.context()));
    w.add_metadata(k("embedding_length"), u32v(cfg.d_model));
    w.add_metadata(k("block_count"), u32v(cfg.n_layer));
    w.add_metadata(k("feed_forward_length"), u32v(cfg.d_ff));
    w.add_metadata(k("attention.head_count"), u32v(cfg.n_head));
    match cfg.arch {
        // gemma3 never gets here: the trainer refuses it (`ModelSpec::validate`)
        Arch::Llama | Arch::Qwen2 | Arch::Qwen3 | Arch::Gemma3 => {
            w.add_metadata(k("attention.head_count_kv"), u32v(cfg.n_kv_head));
            w.add_metadata(
                k("attention.layer_norm_rms_epsilon"),
                Value::F32(cfg.norm_eps),
            );
            w.add_metadata(k("rope.freq_base"), Value::F32(cfg.rope_base));
            w.add_metadata(k("rope.dimension_count"), u32v(cfg.head_dim));
            if cfg.head_dim * cfg.n_head != cfg.d_model {
                w.add_metadata(k("attention.key_length"), u32v(cfg.head_dim));
                w.add_metadata(k("attention.value_length"), u32v(cfg.head_dim));
            }
            w.add_metadata(k("vocab_size"), u32v(cfg.vocab));
        }
        Arch::Gpt2 => {
            w.add_metadata(k("attention.layer_norm_epsilon"), Value::F32(cfg.norm_eps));
            w.add_metadata(k("vocab_size"), u32v(cfg.vocab));
        }
        Arch::Qwen35 => {
            w.add_metadata(k("attention.head_count_kv"), u32v(cfg.n_kv_head));
            w.add_metadata(
                k("attention.layer_norm_rms_epsilon"),
                Value::F32(cfg.norm_eps),
            );
            w.add_metadata(k("rope.freq_base"), Value::F32(cfg.rope_base));
            w.add_metadata(k("vocab_size"), u32v(cfg.vocab));
            if let Some(h) = &cfg.hybrid() {
                qwen35_metadata(&mut w, h);
            }
        }
    }
    if let Some(sw) = &cfg.swa {
        swa_metadata(&mut w, arch, sw);
    }
    for (key, v) in tokenizer {
        w.add_metadata(key.clone(), v.clone());
    }
    for p in model.params_info() {
        let f = depth_factor(cfg, &p.name);
        // a hybrid trains A_log under the name of the ssm_a = -exp(A_log) the GGUF stores
        let a_log = cfg.arch == Arch::Qwen35 && p.name.ends_with(".ssm_a");
        let mut bytes = Vec::with_capacity(4 * p.range.len());
        for &x in &model.params[p.range.clone()] {
            let x = match (a_log, f == 1.0) {
                (true, _) => -x.exp(),
                (false, true) => x,
                (false, false) => x * f,
            };
            bytes.extend_from_slice(&x.to_le_bytes());
        }
        w.add_tensor(p.name.clone(), p.dims.clone(), GgmlType::F32, bytes)?;
    }
    // llama3 RoPE scaling: fixed divisors, written back as the base had them
    if let Some(f) = &cfg.rope_freqs {
        let bytes: Vec<u8> = f.iter().flat_map(|x| x.to_le_bytes()).collect();
        w.add_tensor(
            "rope_freqs.weight",
            vec![f.len() as u64],
            GgmlType::F32,
            bytes,
        )?;
    }
    Ok(w)
}

/// The `qwen35.*` keys of the hybrid shape `h`.
fn qwen35_metadata(w: &mut GgufWriter<'static>, h: &HybridConfig) {
    let k = |s: &str| format!("qwen35.{s}");
    let u32v = |x: usize| Value::U32(x as u32);
    w.add_metadata(k("attention.key_length"), u32v(h.head_dim));
    w.add_metadata(k("attention.value_length"), u32v(h.head_dim));
    w.add_metadata(k("rope.dimension_count"), u32v(h.rope_dim));
    // M-RoPE sections over the rope_dim / 2 pairs, split as Qwen's [11, 11, 10, 0] splits 32;
    // for text the three position streams are equal, so any split is plain neox
    let pairs = h.rope_dim / 2;
    let s0 = pairs.div_ceil(3);
    let s1 = s0.min(pairs - s0);
    let sections = [s0, s1, pairs - s0 - s1, 0];
    let sections = sections.iter().map(|&x| Value::I32(x as i32)).collect();
    w.add_metadata(
        k("rope.dimension_sections"),
        Value::Array(ValueType::I32, sections),
    );
    w.add_metadata(k("ssm.conv_kernel"), u32v(h.conv_kernel));
    w.add_metadata(k("ssm.state_size"), u32v(h.gdn_key_dim));
    w.add_metadata(k("ssm.group_count"), u32v(h.gdn_key_heads));
    w.add_metadata(k("ssm.time_step_rank"), u32v(h.gdn_value_heads));
    w.add_metadata(
        k("ssm.inner_size"),
        u32v(h.gdn_value_heads * h.gdn_value_dim),
    );
    let rec = h
        .layers
        .iter()
        .map(|&m| Value::Bool(m == LayerKind::Gdn))
        .collect();
    w.add_metadata(
        k("attention.recurrent_layers"),
        Value::Array(ValueType::Bool, rec),
    );
    if let Some(every) = h.interval() {
        w.add_metadata(k("full_attention_interval"), u32v(every));
    }
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

/// Gemma 3's sliding window as llama.cpp reads it: the window, the pattern (n when every
/// n-th layer is the global one, else a flag per layer) and the local layers' RoPE base.
pub(super) fn swa_metadata(w: &mut GgufWriter, arch: &str, sw: &crate::model::Swa) {
    let k = |s: &str| format!("{arch}.{s}");
    w.add_metadata(k("attention.sliding_window"), Value::U32(sw.window as u32));
    let every = (1..=sw.layers.len().max(1) as u32).find(|&n| {
        let n = n as usize;
        (sw.layers.iter().enumerate()).all(|(l, &local)| local == (l % n < n - 1))
    });
    let pattern = match every {
        Some(n) => Value::U32(n),
        None => Value::Array(
            ValueType::Bool,
            sw.layers.iter().map(|&b| Value::Bool(b)).collect(),
        ),
    };
    w.add_metadata(k("attention.sliding_window_pattern"), pattern);
    w.add_metadata(k("rope.freq_base_swa"), Value::F32(sw.rope_base));
}
