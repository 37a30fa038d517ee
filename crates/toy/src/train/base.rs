//! Training from a model one already has (fine-tuning): its shape from the GGUF's llama.cpp
//! keys (`llama-arch.cpp`), and its weights either dequantized into the flat params (full
//! fine-tune) or left in the file in their stored types as frozen layers with LoRA adapters
//! beside them (`lin.rs`). Every family takes both ways: a base's block tensors are the
//! trainer's own (`params.rs`, from the one table in `model::tensors`), but for a `qwen35`
//! hybrid's `ssm_a`, stored as -exp(A_log) where the trainer keeps A_log.

use super::lin::{FrozenMat, Lin, LoraPart, Part};
use super::params::{Layout, LoraRanges};
use super::{ModelConfig, TrainError};
use crate::gguf::GgufFile;
use crate::model::tensors::Part as TablePart;
use crate::model::weights::{Loader, Weight};
use crate::model::Config;
use std::sync::Arc;
use tinynn::kernels::QMat;
use tinynn::layers::lora::Lora;

fn bad(m: String) -> TrainError {
    TrainError::Base(m)
}

/// The trainer's config of the base model in `file`, for sequences of `ctx` tokens: a
/// llama-family model, or a `qwen35` hybrid (Gated DeltaNet and gated attention layers).
pub fn config_from_gguf(file: &GgufFile, ctx: usize) -> Result<ModelConfig, TrainError> {
    let mut shape = Config::from_gguf(file).map_err(|e| bad(e.to_string()))?;
    if shape.rope_dim != shape.head_dim && !shape.arch.is_gpt2() && shape.gdn.is_none() {
        return Err(bad(format!(
            "RoPE on {} of {} dims of each head: the trainer turns whole heads outside hybrids",
            shape.rope_dim, shape.head_dim
        )));
    }
    // GPT-2 learns its positions: the table bounds the context
    if shape.arch.is_gpt2() && ctx > shape.ctx_train {
        return Err(bad(format!(
            "a gpt2 base has {} learned positions; ctx {ctx} is longer",
            shape.ctx_train
        )));
    }
    shape.ctx_train = shape.ctx_train.max(ctx);
    Ok(ModelConfig {
        shape,
        ctx,
        depth_scale: false,
        inference_rounding: false,
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
