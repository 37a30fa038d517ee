//! Rewriting a model in other weight types, as llama.cpp's `llama-quantize`: a file type
//! (`mix::FileType`, e.g. Q4_K_M) picks each matrix's type by llama.cpp's per-tensor rules
//! (`mix`), every matrix is decoded to f32 and encoded in its type row by row (with an
//! importance matrix where one is given: `imatrix`, `tinynn::quant::quantize_row`), and the
//! rest (norms, biases, conv taps) is copied. `general.file_type` is set to the `llama_ftype`
//! number.

pub mod file_type;
pub mod imatrix;
pub mod mix;

use crate::gguf::{GgufError, GgufFile, GgufWriter, Value};
use imatrix::Imatrix;
use mix::{FileType, Hparams, MixOptions};
use rayon::prelude::*;
use tinynn::quant::{can_dequantize, can_quantize, dequantize, quantize_row, GgmlType, QuantError};

#[derive(Debug, thiserror::Error)]
pub enum QuantizeError {
    #[error("cannot quantize to {0}: toy writes F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K, IQ4_NL and IQ4_XS")]
    Target(GgmlType),
    #[error("unknown type '{0}': expected one of {1}")]
    UnknownType(String, String),
    #[error("{0} is llama-quantize's, but toy cannot write it yet: choose one of {1}")]
    NotYet(String, String),
    #[error("{0} needs an importance matrix: make one with `toy imatrix -m MODEL -f TEXT -o imatrix.gguf` and pass --imatrix imatrix.gguf")]
    NeedsImatrix(String),
    #[error("importance matrix {0}")]
    Imatrix(String),
    #[error("tensor '{name}': {source}")]
    Tensor { name: String, source: QuantError },
    #[error(transparent)]
    Gguf(#[from] GgufError),
}

/// Everything `toy quantize` is told.
#[derive(Clone, Debug)]
pub struct QuantizeOptions {
    pub mix: MixOptions,
    pub imatrix: Option<Imatrix>,
}

impl QuantizeOptions {
    /// File type `ftype` with its mix and nothing else.
    pub fn new(ftype: FileType) -> Self {
        let mix = MixOptions {
            ftype,
            output_type: None,
            token_embedding_type: None,
            leave_output: false,
            pure: false,
            has_imatrix: false,
        };
        Self { mix, imatrix: None }
    }
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
        Q3_K => 12,
        Q4_K => 15,
        Q5_K => 17,
        Q6_K => 18,
        IQ4_NL => 25,
        IQ4_XS => 30,
        BF16 => 32,
        _ => 0,
    }
}

/// Decode `data` of type `from` and encode it as `to`, row by row of `cols` (in parallel
/// chunks of rows, so no f32 copy of the whole matrix is made), under importance weights
/// `imatrix` (one per column) when given.
pub fn convert(
    from: GgmlType,
    to: GgmlType,
    data: &[u8],
    n: usize,
    cols: usize,
    imatrix: Option<&[f32]>,
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
                    quantize_row(to, &x, d, imatrix)?;
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
        return quantize_row(to, &f, &mut out, imatrix).map(|_| out);
    }
    for (src, dst) in f.chunks_exact(cols).zip(out.chunks_exact_mut(rb)) {
        quantize_row(to, src, dst, imatrix)?;
    }
    Ok(out)
}

/// A writer holding `src` with every matrix in `ty` (llama-quantize `--pure`).
pub fn quantize_model(src: &GgufFile, ty: GgmlType) -> Result<GgufWriter<'_>, QuantizeError> {
    let ftype = FileType::ALL
        .into_iter()
        .find(|f| f.default_type() == ty && !f.name().ends_with("_S") && !f.name().ends_with("_L"))
        .ok_or(QuantizeError::Target(ty))?;
    let mut o = QuantizeOptions::new(ftype);
    o.mix.pure = true;
    quantize_with(src, &o)
}

/// The type each tensor of `src` gets under `o`, in file order.
pub fn plan(src: &GgufFile, o: &QuantizeOptions) -> Result<Vec<GgmlType>, QuantizeError> {
    let mut mix = o.mix.clone();
    mix.has_imatrix = o.imatrix.is_some();
    let list: Vec<(&str, &[u64], GgmlType)> = src
        .tensors
        .iter()
        .map(|t| (t.name.as_str(), t.dims.as_slice(), t.ty))
        .collect();
    let mut types = mix::plan(&list, &Hparams::from_gguf(src), &mix)?;
    for (t, ty) in src.tensors.iter().zip(types.iter_mut()) {
        // what toy cannot decode stays as it is
        if *ty != t.ty && (!can_dequantize(t.ty) || !can_quantize(*ty)) {
            if !can_quantize(*ty) {
                return Err(QuantizeError::Target(*ty));
            }
            *ty = t.ty;
        }
    }
    Ok(types)
}

/// A writer holding `src` quantized as `o` says.
pub fn quantize_with<'a>(
    src: &'a GgufFile,
    o: &QuantizeOptions,
) -> Result<GgufWriter<'a>, QuantizeError> {
    quantize_with_progress(src, o, &|_, _| {})
}

/// [`quantize_with`], calling `progress(done, total)` (in elements of the matrices that are
/// converted) as each tensor is done.
pub fn quantize_with_progress<'a>(
    src: &'a GgufFile,
    o: &QuantizeOptions,
    progress: &(dyn Fn(u64, u64) + Sync),
) -> Result<GgufWriter<'a>, QuantizeError> {
    let types = plan(src, o)?;
    let total: u64 = (src.tensors.iter().zip(&types))
        .filter(|(t, ty)| t.ty != **ty)
        .map(|(t, _)| t.n_elements())
        .sum();
    let done = std::sync::atomic::AtomicU64::new(0);
    let converted: Vec<Option<Vec<u8>>> = src
        .tensors
        .par_iter()
        .zip(&types)
        .map(|(t, &to)| {
            if to == t.ty {
                return Ok(None);
            }
            let cols = t.dims[0] as usize;
            let qw = match &o.imatrix {
                Some(m) if t.name != "token_embd.weight" => m.weights(&t.name, cols)?,
                _ => None,
            };
            let (n, data) = (t.n_elements() as usize, src.tensor_data(t));
            let out =
                convert(t.ty, to, data, n, cols, qw).map_err(|source| QuantizeError::Tensor {
                    name: t.name.clone(),
                    source,
                })?;
            let d = done.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed) + n as u64;
            progress(d, total);
            Ok(Some(out))
        })
        .collect::<Result<_, QuantizeError>>()?;
    let mut w = GgufWriter::new();
    w.set_version(src.version);
    for (k, v) in &src.metadata {
        w.add_metadata(k.clone(), v.clone());
    }
    w.add_metadata("general.quantization_version", Value::U32(2));
    w.add_metadata("general.file_type", Value::U32(o.mix.ftype.id()));
    if let Some(m) = &o.imatrix {
        w.add_metadata(
            "quantize.imatrix.entries_count",
            Value::U32(m.entries.len() as u32),
        );
        w.add_metadata("quantize.imatrix.chunks_count", Value::U32(m.chunks));
        if let Some(d) = m.datasets.first() {
            w.add_metadata("quantize.imatrix.dataset", Value::String(d.clone()));
        }
    }
    for ((t, &ty), data) in src.tensors.iter().zip(&types).zip(converted) {
        match data {
            Some(d) => w.add_tensor(t.name.clone(), t.dims.clone(), ty, d)?,
            None => w.add_tensor(t.name.clone(), t.dims.clone(), t.ty, src.tensor_data(t))?,
        }
    }
    Ok(w)
}
