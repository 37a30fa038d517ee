//! Importance matrices as llama.cpp makes and reads them (tools/imatrix/imatrix.cpp,
//! common/imatrix-loader.cpp, llama.cpp 0c1e570): the mean squared activation at the input
//! of each block matrix, per input column, over some text.
//!
//! [`compute`] runs the text as llama-imatrix does: the whole text tokenized once (with BOS
//! where the model adds one), cut into chunks of `ctx` tokens, each evaluated from an empty
//! cache with its first token replaced by BOS; every block matrix's input rows are summed
//! (`model::activations`). [`write_gguf`] writes llama-imatrix's GGUF format: per matrix
//! `NAME.in_sum2` (F32, (cols, 1): the sums of squares) and `NAME.counts` (F32, (1, 1): the
//! rows), `general.type = "imatrix"`, `imatrix.datasets`, `imatrix.chunk_count`,
//! `imatrix.chunk_size`. [`Imatrix::read`] takes that format and the legacy `.dat` one.

use super::QuantizeError;
use crate::gguf::{GgufFile, GgufWriter, Value, ValueType};
use crate::model::activations::{collect, Collected};
use crate::model::{Logits, Model, ModelError};
use std::collections::BTreeMap;
use std::path::Path;
use tinynn::quant::GgmlType;

/// Per-column importance of each matrix's inputs, keyed by weight name
/// (`blk.0.attn_q.weight`), as llama-quantize uses them: sums divided by counts.
#[derive(Clone, Debug, Default)]
pub struct Imatrix {
    pub entries: BTreeMap<String, Vec<f32>>,
    pub datasets: Vec<String>,
    pub chunks: u32,
}

impl Imatrix {
    /// Reads a GGUF imatrix (`.in_sum2` / `.counts` pairs) or, when the file is not GGUF,
    /// the legacy binary format.
    pub fn read(path: &Path) -> Result<Self, QuantizeError> {
        let bad = |why: String| QuantizeError::Imatrix(format!("'{}': {why}", path.display()));
        let bytes = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
        Self::from_bytes(bytes).map_err(bad)
    }

    /// [`Imatrix::read`] on the file's bytes; the error says what was wrong.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self, String> {
        let m = if bytes.starts_with(b"GGUF") {
            Self::from_gguf(&GgufFile::from_bytes(bytes).map_err(|e| e.to_string())?)?
        } else {
            Self::from_legacy(&bytes).map_err(|e| {
                format!("not an importance matrix (neither GGUF nor llama-imatrix's legacy format: {e})")
            })?
        };
        match m
            .entries
            .iter()
            .find(|(_, v)| v.iter().any(|x| !x.is_finite()))
        {
            Some((name, _)) => Err(format!("entry '{name}' holds a non-finite value")),
            None => Ok(m),
        }
    }

    fn from_gguf(f: &GgufFile) -> Result<Self, String> {
        let f32s = |name: &str| -> Result<Vec<f32>, String> {
            let t = f.tensor(name).ok_or(format!("'{name}' is missing"))?;
            if t.ty != GgmlType::F32 {
                return Err(format!("'{name}' is {}, expected F32", t.ty));
            }
            let d = f.tensor_data(t);
            Ok(d.chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect())
        };
        let mut entries = BTreeMap::new();
        for t in &f.tensors {
            let Some(name) = t.name.strip_suffix(".in_sum2") else {
                continue;
            };
            let sums = f32s(&t.name)?;
            let counts = f32s(&format!("{name}.counts"))?;
            if counts.is_empty() || !sums.len().is_multiple_of(counts.len()) {
                return Err(format!(
                    "'{name}': {} sums for {} counts",
                    sums.len(),
                    counts.len()
                ));
            }
            let ne0 = sums.len() / counts.len();
            let mut e = vec![1f32; sums.len()];
            for (j, &c) in counts.iter().enumerate() {
                let c = c.round();
                if c > 0.0 {
                    for i in j * ne0..(j + 1) * ne0 {
                        e[i] = sums[i] / c;
                    }
                }
            }
            entries.insert(name.to_string(), e);
        }
        if entries.is_empty() {
            return Err("no '.in_sum2' tensors: not an importance matrix".into());
        }
        let datasets = match f.get("imatrix.datasets") {
            Some(Value::Array(_, v)) => v
                .iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect(),
            _ => Vec::new(),
        };
        let chunks = f.get_u64("imatrix.chunk_count").unwrap_or(0) as u32;
        Ok(Self {
            entries,
            datasets,
            chunks,
        })
    }

    /// llama-imatrix's `--output-format dat`: i32 entries; per entry i32 name length, the
    /// name, i32 calls, i32 values, f32 values (sum / count * calls); then optionally i32
    /// chunks, i32 length and the dataset's name.
    fn from_legacy(b: &[u8]) -> Result<Self, String> {
        let mut at = 0usize;
        let i32_at = |at: &mut usize| -> Result<i32, String> {
            let v = b.get(*at..*at + 4).ok_or("truncated file")?;
            *at += 4;
            Ok(i32::from_le_bytes([v[0], v[1], v[2], v[3]]))
        };
        let n = i32_at(&mut at)?;
        if n < 1 {
            return Err("no entries (neither GGUF nor a legacy imatrix)".into());
        }
        let mut entries = BTreeMap::new();
        for _ in 0..n {
            let len = usize::try_from(i32_at(&mut at)?).map_err(|_| "negative name length")?;
            let name = b.get(at..at + len).ok_or("truncated name")?;
            let name = String::from_utf8_lossy(name).into_owned();
            at += len;
            let ncall = i32_at(&mut at)?;
            let nval = usize::try_from(i32_at(&mut at)?).map_err(|_| "negative value count")?;
            let end = nval
                .checked_mul(4)
                .and_then(|x| x.checked_add(at))
                .ok_or("bad count")?;
            let vals = b
                .get(at..end)
                .ok_or(format!("'{name}': truncated values"))?;
            at = end;
            let div = if ncall > 0 { ncall as f32 } else { 1.0 };
            let e = vals
                .chunks_exact(4)
                .map(|v| f32::from_le_bytes([v[0], v[1], v[2], v[3]]) / div)
                .collect();
            entries.insert(name, e);
        }
        let chunks = i32_at(&mut at).map(|c| c.max(0) as u32).unwrap_or(0);
        let mut datasets = Vec::new();
        if let Ok(len) = i32_at(&mut at) {
            if let Some(d) = usize::try_from(len).ok().and_then(|l| b.get(at..at + l)) {
                datasets.push(String::from_utf8_lossy(d).into_owned());
            }
        }
        Ok(Self {
            entries,
            datasets,
            chunks,
        })
    }

    /// The weights for matrix `name` of `cols` columns; an error when the entry has another
    /// size (the imatrix is for another model).
    pub fn weights(&self, name: &str, cols: usize) -> Result<Option<&[f32]>, QuantizeError> {
        match self.entries.get(name) {
            None => Ok(None),
            Some(e) if e.len() == cols => Ok(Some(e)),
            Some(e) => Err(QuantizeError::Imatrix(format!(
                "entry '{name}' has {} values, the tensor has {cols} columns: an importance \
                 matrix of another model?",
                e.len()
            ))),
        }
    }
}

/// Sums of every block matrix's input over `tokens` in chunks of `ctx` (the rest dropped,
/// as llama-imatrix; it asks for two chunks at least); `progress(done, total)` per chunk.
pub fn compute(
    model: &Model,
    tokens: &[u32],
    ctx: usize,
    bos: Option<u32>,
    mut progress: impl FnMut(usize, usize),
) -> Result<(Collected, usize), ModelError> {
    let chunks = tokens.len() / ctx.max(1);
    if ctx < 16 || chunks == 0 {
        return Err(ModelError::ContextOverflow {
            pos: 0,
            n: tokens.len(),
            ctx,
        });
    }
    let mut state = model.new_state(ctx, ctx);
    let mut stats = Collected::new();
    for (i, chunk) in tokens.chunks_exact(ctx).take(chunks).enumerate() {
        let mut input = chunk.to_vec();
        if let Some(b) = bos {
            input[0] = b;
        }
        state.reset();
        let (r, s) = collect(stats, || {
            model.forward(&mut state, &input, Logits::Last).map(|_| ())
        });
        stats = s;
        r?;
        progress(i + 1, chunks);
    }
    Ok((stats, chunks))
}

/// `stats` as llama-imatrix's GGUF file, names sorted; written atomically.
pub fn write_gguf(
    path: &Path,
    stats: &Collected,
    dataset: &str,
    chunks: usize,
    ctx: usize,
) -> Result<(), QuantizeError> {
    let mut w = GgufWriter::new();
    w.add_metadata("general.type", Value::String("imatrix".into()));
    let ds = vec![Value::String(dataset.to_string())];
    w.add_metadata("imatrix.datasets", Value::Array(ValueType::String, ds));
    w.add_metadata("imatrix.chunk_count", Value::U32(chunks as u32));
    w.add_metadata("imatrix.chunk_size", Value::U32(ctx as u32));
    for (name, s) in stats {
        let sums: Vec<u8> = s.sums.iter().flat_map(|v| v.to_le_bytes()).collect();
        let cols = s.sums.len() as u64;
        w.add_tensor(
            format!("{name}.in_sum2"),
            vec![cols, 1],
            GgmlType::F32,
            sums,
        )?;
        let count = (s.rows as f32).to_le_bytes().to_vec();
        w.add_tensor(format!("{name}.counts"), vec![1, 1], GgmlType::F32, count)?;
    }
    Ok(w.write_file(path)?)
}
