//! Merging LoRA adapters into their base, as llama.cpp's `llama-export-lora`:
//! `W' = W + S · s · B A` for each adapted matrix, on `W` decoded to f32, where `s` is the
//! adapter's own scale (`alpha / r`, see `adapter.rs`) and `S` the user's (`--scale`,
//! `--lora FILE:SCALE`). The merged matrices are written F32 and every other tensor keeps
//! its stored type and bytes; `toy merge --type T` re-quantizes the result with
//! [`crate::quantize::quantize_model`]. Loading a model with `--lora` is this merge done in
//! memory, so the two give the same logits by construction. On a quantized base the adapted
//! matrices then run through the f32 kernel instead of the integer one (which rounds the
//! activations to q8), so even a scale of 0 moves a Q4_1 SmolLM2's log-probs by ~0.1.
//!
//! Letters: r the rank, K = n_in, N = n_out; W is (N, K) row-major == ggml dims [K, N].

use super::adapter::{AdapterError, LoraAdapter, LoraTensor};
use crate::gguf::{GgufFile, GgufWriter};
use rayon::prelude::*;
use std::collections::HashMap;
use tinynn::quant::{dequantize, GgmlType, QuantError};

/// A writer holding `base` with every adapter of `loras` (each with the user's scale)
/// added to the matrices it targets. Each adapter is checked against `base` first.
pub fn merge_into<'a>(
    base: &'a GgufFile,
    loras: &[(&LoraAdapter, f32)],
) -> Result<GgufWriter<'a>, AdapterError> {
    // base tensor name -> the adapter matrices on it, each with its whole scale S · s
    let mut deltas: HashMap<&str, Vec<(&LoraTensor, f32)>> = HashMap::new();
    for (adapter, user_scale) in loras {
        adapter.check_base(base)?;
        for t in &adapter.tensors {
            let s = user_scale * adapter.scale(t);
            deltas.entry(t.base.as_str()).or_default().push((t, s));
        }
    }
    let mut w = GgufWriter::new();
    w.set_version(base.version);
    for (k, v) in &base.metadata {
        w.add_metadata(k.clone(), v.clone());
    }
    for t in &base.tensors {
        let Some(ds) = deltas.get(t.name.as_str()) else {
            w.add_tensor(t.name.clone(), t.dims.clone(), t.ty, base.tensor_data(t))?;
            continue;
        };
        let decode_err = |source: QuantError| AdapterError::Decode {
            name: t.name.clone(),
            source,
        };
        // check_base made this a [K, N] matrix whose size the file bounds
        let mut m = vec![0f32; t.n_elements() as usize];
        dequantize(t.ty, base.tensor_data(t), &mut m).map_err(decode_err)?;
        for (lt, s) in ds {
            add_delta(&mut m, lt, *s);
        }
        let bytes: Vec<u8> = m.iter().flat_map(|x| x.to_le_bytes()).collect();
        w.add_tensor(t.name.clone(), t.dims.clone(), GgmlType::F32, bytes)?;
    }
    Ok(w)
}

/// [`merge_into`], parsed back as an in-memory GGUF file: what `--lora` loads a model from.
pub fn merged_gguf(
    base: &GgufFile,
    loras: &[(&LoraAdapter, f32)],
) -> Result<GgufFile, AdapterError> {
    let w = merge_into(base, loras)?;
    let mut bytes = Vec::new();
    w.write_to(&mut bytes)?;
    drop(w);
    Ok(GgufFile::from_bytes(bytes)?)
}

/// w (N, K) += s · b (N, r) · a (r, K).
pub fn add_delta(w: &mut [f32], t: &LoraTensor, s: f32) {
    let (k, r) = (t.n_in, t.rank);
    w.par_chunks_mut(k)
        .zip(t.b.par_chunks(r))
        .for_each(|(row, b_row)| {
            for (bj, a_row) in b_row.iter().zip(t.a.chunks_exact(k)) {
                let c = s * bj;
                row.iter_mut().zip(a_row).for_each(|(x, ai)| *x += c * ai);
            }
        });
}
