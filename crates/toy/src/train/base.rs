//! Training from a model one already has (fine-tuning): its shape from the GGUF's llama.cpp
//! keys (`llama-arch.cpp`), and its weights either dequantized into the flat params (full
//! fine-tune) or left in the file in their stored types as frozen layers with LoRA adapters
//! beside them (`lin.rs`). Every family takes both ways: a base's block tensors are the
//! trainer's own (`params.rs`, from the one table in `model::tensors`), but for a `qwen35`
//! hybrid's `ssm_a`, stored as -exp(A_log) where the trainer keeps A_log.

use super::lin::{FrozenMat, Lin, LoraPart, Part};
use super::params::{Layout, LoraRanges};
use super::{HybridConfig, ModelConfig, TrainError};
use crate::gguf::GgufFile;
use crate::model::tensors::Part as TablePart;
use crate::model::weights::{Loader, Weight};
use crate::model::{Arch, Config};
use std::sync::Arc;
use tinynn::kernels::QMat;
use tinynn::layers::lora::Lora;

fn bad(m: String) -> TrainError {
    TrainError::Base(m)
}

/// The trainer's config of the base model in `file`, for sequences of `ctx` tokens: a
/// llama-family model, or a `qwen35` hybrid (Gated DeltaNet and gated attention layers).
pub fn config_from_gguf(file: &GgufFile, ctx: usize) -> Result<ModelConfig, TrainError> {
    let c = Config::from_gguf(file).map_err(|e| bad(e.to_string()))?;
    let hybrid = match c.arch {
        Arch::Qwen35 => Some(hybrid_config(&c)?),
        _ if c.rope_dim != c.head_dim && !c.arch.is_gpt2() => {
            return Err(bad(format!(
                "RoPE on {} of {} dims of each head: the trainer turns whole heads outside hybrids",
                c.rope_dim, c.head_dim
            )))
        }
        _ => None,
    };
    // GPT-2 learns its positions: the table bounds the context
    if c.arch.is_gpt2() && ctx > c.ctx_train {
        return Err(bad(format!(
            "a gpt2 base has {} learned positions; ctx {ctx} is longer",
            c.ctx_train
        )));
    }
    let rope_freqs = match file.tensor("rope_freqs.weight") {
        None => None,
        Some(_) => Some(dequantized(file, "rope_freqs.weight", c.rope_dim / 2)?),
    };
    let own_head_dim = hybrid.is_none() && c.head_dim * c.n_head != c.d_model;
    Ok(ModelConfig {
        arch: c.arch,
        vocab: c.vocab,
        d_model: c.d_model,
        n_head: c.n_head,
        n_kv_head: c.n_kv_head,
        d_ff: c.d_ff,
        n_layer: c.n_layer,
        ctx,
        norm_eps: c.norm_eps,
        rope_base: c.rope_base,
        depth_scale: false,
        tied: c.arch.is_gpt2() || file.tensor("output.weight").is_none(),
        hybrid,
        head_dim: own_head_dim.then_some(c.head_dim),
        rope_freqs,
        ctx_train: (c.ctx_train > ctx).then_some(c.ctx_train),
        inference_rounding: false,
    })
}

/// Tensor `name` of `file` as `len` f32 values, checked.
fn dequantized(file: &GgufFile, name: &str, len: usize) -> Result<Vec<f32>, TrainError> {
    let t = file
        .tensor(name)
        .ok_or_else(|| bad(format!("the base has no tensor {name}")))?;
    let n: u64 = t.dims.iter().product();
    if n != len as u64 {
        return Err(bad(format!("{name}: {n} values, expected {len}")));
    }
    let q =
        QMat::new(t.ty, 1, len, file.tensor_data(t)).map_err(|e| bad(format!("{name}: {e}")))?;
    let mut out = vec![0f32; len];
    q.dequantize_row(0, &mut out);
    Ok(out)
}

/// The trainer's hybrid shape of an inference config of a qwen35 file.
fn hybrid_config(c: &Config) -> Result<HybridConfig, TrainError> {
    let g = c
        .gdn
        .as_ref()
        .ok_or_else(|| bad("a qwen35 base without its ssm.* shape".into()))?;
    Ok(HybridConfig {
        layers: c.kinds.clone(),
        head_dim: c.head_dim,
        rope_dim: c.rope_dim,
        gdn_key_heads: g.hk,
        gdn_value_heads: g.hv,
        gdn_key_dim: g.dk,
        gdn_value_dim: g.dv,
        conv_kernel: g.kernel,
    })
}

/// Fills every tensor of `layout` that the base has (dequantized to f32) into `params`;
/// tensors the base lacks (LoRA adapters) keep what they hold. Shapes must match.
pub(crate) fn import(
    file: &GgufFile,
    layout: &Layout,
    params: &mut [f32],
) -> Result<(), TrainError> {
    for info in &layout.infos {
        let Some(t) = file.tensor(&info.name) else {
            if info.name.ends_with(".lora_a") || info.name.ends_with(".lora_b") {
                continue;
            }
            return Err(bad(format!("the base has no tensor {}", info.name)));
        };
        if t.dims != info.dims {
            return Err(bad(format!(
                "{}: the base has dims {:?}, the config needs {:?}",
                info.name, t.dims, info.dims
            )));
        }
        let (rows, cols) = (
            t.dims.iter().skip(1).product::<u64>() as usize,
            t.dims[0] as usize,
        );
        let q = QMat::new(t.ty, rows, cols, file.tensor_data(t))
            .map_err(|e| bad(format!("{}: {e}", info.name)))?;
        let dst = &mut params[info.range.clone()];
        for (r, row) in dst.chunks_exact_mut(cols).enumerate() {
            q.dequantize_row(r, row);
        }
        // a hybrid trains A_log where the GGUF stores ssm_a = -exp(A_log) (see export)
        if info.name.ends_with(".ssm_a") {
            for a in dst.iter_mut() {
                if a.is_nan() || *a >= 0.0 {
                    return Err(bad(format!(
                        "{}: {a} where -exp(A_log) < 0 was expected",
                        info.name
                    )));
                }
                *a = (-*a).ln();
            }
        }
    }
    Ok(())
}

/// Matrix `name` of the base as a frozen (rows, cols) layer, checked.
pub(crate) fn frozen_mat(
    f: &Loader,
    file: &Arc<GgufFile>,
    name: &str,
    rows: usize,
    cols: usize,
) -> Result<FrozenMat, TrainError> {
    let w = Weight::load(f, name, cols, rows).map_err(|e| bad(format!("the base's {e}")))?;
    let file = file.clone();
    Ok(FrozenMat { file, w })
}

/// One product of block l as a frozen layer of the base: its parts (GGUF part name, rows,
/// cols) stacked on the output side, with the adapters `lora` on the parts they name.
pub(crate) fn frozen_lin(
    f: &Loader,
    file: &Arc<GgufFile>,
    l: usize,
    parts: &[TablePart],
    lora: &[LoraRanges],
    scale: f32,
) -> Result<Lin, TrainError> {
    let mut out = Vec::with_capacity(parts.len());
    for &TablePart { name, rows, cols } in parts {
        let full = format!("blk.{l}.{name}.weight");
        let mat = frozen_mat(f, file, &full, rows, cols)?;
        let lora = lora.iter().find(|a| a.base == full).map(|a| LoraPart {
            lora: Lora {
                n_in: cols,
                n_out: rows,
                rank: a.a.len() / cols,
                scale,
            },
            a: a.a.clone(),
            b: a.b.clone(),
        });
        out.push(Part { mat, lora });
    }
    Ok(Lin::Frozen {
        parts: out,
        n_in: parts[0].cols,
        n_out: parts.iter().map(|p| p.rows).sum(),
    })
}

/// Block l's products (`ModelConfig::products`, the table every family's blocks read) as
/// frozen layers of the base, with the adapters `lora` on the parts they name, each scaled by
/// `scale`.
pub(crate) fn frozen_lins(
    f: &Loader,
    file: &Arc<GgufFile>,
    cfg: &ModelConfig,
    l: usize,
    lora: &[LoraRanges],
    scale: f32,
) -> Result<Vec<Lin>, TrainError> {
    cfg.products(l)
        .iter()
        .map(|parts| frozen_lin(f, file, l, parts, lora, scale))
        .collect()
}
