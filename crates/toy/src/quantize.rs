//! Rewriting a model in another weight type, as llama.cpp's `llama-quantize`: every matrix
//! (`*.weight` with two dims) is decoded to f32 and encoded in the target type; vectors
//! (norms, biases) stay as they are. A matrix whose rows are not a whole number of the
//! target's blocks falls back to a legacy type, as llama.cpp does (Q4_K -> Q5_0,
//! Q6_K -> Q8_0, ...). `general.file_type` is set to llama.cpp's `llama_ftype` number.

use crate::gguf::{GgufError, GgufFile, GgufWriter, Value};
use rayon::prelude::*;
use tinynn::quant::{can_dequantize, can_quantize, dequantize, quantize, GgmlType, QuantError};

#[derive(Debug, thiserror::Error)]
pub enum QuantizeError {
    #[error("cannot quantize to {0}: supported targets are F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K")]
    Target(GgmlType),
    #[error("tensor '{name}': {source}")]
    Tensor { name: String, source: QuantError },
    #[error(transparent)]
    Gguf(#[from] GgufError),
}

/// llama.cpp's `llama_ftype` for a file whose matrices are mostly `ty`.
pub fn file_type(ty: GgmlType) -> u32 {
    use GgmlType::*;
    match ty {
        F32 => 0,
        F16 => 1,
        Q4_0 => 2,
        Q4_1 => 3,
        Q8_0 => 7,
        Q5_0 => 8,
        Q5_1 => 9,
        Q2_K => 10,
        Q4_K => 15,
        Q5_K => 17,
        Q6_K => 18,
        BF16 => 32,
        _ => 0,
    }
}

fn fallback(ty: GgmlType, cols: u64) -> GgmlType {
    if cols.is_multiple_of(ty.block_size() as u64) {
        return ty;
    }
    let alt = match ty {
        GgmlType::Q4_K | GgmlType::Q2_K | GgmlType::Q3_K => GgmlType::Q5_0,
        GgmlType::Q5_K => GgmlType::Q5_1,
        _ => GgmlType::Q8_0,
    };
    if cols.is_multiple_of(alt.block_size() as u64) {
        alt
    } else {
        GgmlType::F16
    }
}

/// Decode `data` of type `from` and encode it as `to`, row by row of `cols` (in parallel
/// chunks of rows, so no f32 copy of the whole matrix is made).
pub fn convert(
    from: GgmlType,
    to: GgmlType,
    data: &[u8],
    n: usize,
    cols: usize,
) -> Result<Vec<u8>, QuantError> {
    const ROWS: usize = 64;
    let rows = |t: GgmlType| {
        t.row_bytes(cols as u64)
            .filter(|&b| b > 0)
            .map(|b| b as usize)
    };
    if let (Some(rf), Some(rt)) = (rows(from), rows(to)) {
        let mut out = vec![0u8; rt * (n / cols)];
        out.par_chunks_mut(rt * ROWS)
            .zip(data.par_chunks(rf * ROWS))
            .try_for_each(|(dst, src)| {
                let mut x = vec![0f32; cols];
                for (s, d) in src.chunks_exact(rf).zip(dst.chunks_exact_mut(rt)) {
                    dequantize(from, s, &mut x)?;
                    quantize(to, &x, d)?;
                }
                Ok(())
            })?;
        return Ok(out);
    }
    let mut f = vec![0f32; n];
    dequantize(from, data, &mut f)?;
    let rb = to.row_bytes(cols as u64).unwrap_or(0) as usize;
    let mut out = vec![0u8; rb * (n / cols.max(1))];
    if rb == 0 {
        return quantize(to, &f, &mut out).map(|_| out);
    }
    for (src, dst) in f.chunks_exact(cols).zip(out.chunks_exact_mut(rb)) {
        quantize(to, src, dst)?;
    }
    Ok(out)
}

/// A writer holding `src` with its matrices converted to `ty`.
pub fn quantize_model(src: &GgufFile, ty: GgmlType) -> Result<GgufWriter<'_>, QuantizeError> {
    if !can_quantize(ty) {
        return Err(QuantizeError::Target(ty));
    }
    let converted: Vec<(GgmlType, Option<Vec<u8>>)> = src
        .tensors
        .par_iter()
        .map(|t| {
            // a GDN layer's conv taps stay as stored, as llama.cpp keeps them: its ssm_conv
            // reads them as f32
            let is_matrix = t.name.ends_with(".weight")
                && !t.name.ends_with(".ssm_conv1d.weight")
                && t.dims.len() == 2
                && can_dequantize(t.ty);
            let target = fallback(ty, t.dims[0]);
            if !is_matrix || target == t.ty || !can_quantize(target) {
                return Ok((t.ty, None));
            }
            let data = convert(
                t.ty,
                target,
                src.tensor_data(t),
                t.n_elements() as usize,
                t.dims[0] as usize,
            )
            .map_err(|source| QuantizeError::Tensor {
                name: t.name.clone(),
                source,
            })?;
            Ok((target, Some(data)))
        })
        .collect::<Result<_, QuantizeError>>()?;
    let mut w = GgufWriter::new();
    w.set_version(src.version);
    for (k, v) in &src.metadata {
        w.add_metadata(k.clone(), v.clone());
    }
    w.add_metadata("general.file_type", Value::U32(file_type(ty)));
    for (t, (nty, data)) in src.tensors.iter().zip(converted) {
        match data {
            Some(d) => w.add_tensor(t.name.clone(), t.dims.clone(), nty, d)?,
            None => w.add_tensor(t.name.clone(), t.dims.clone(), t.ty, src.tensor_data(t))?,
        }
    }
    Ok(w)
}
