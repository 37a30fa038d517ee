//! LoRA adapters (Hu et al. 2021, arXiv 2106.09685) as llama.cpp's LoRA GGUF: the format
//! `src/llama-adapter.cpp` (llama.cpp 0c1e570) loads and `convert_lora_to_gguf.py` writes.
//!
//! The file holds the metadata `general.type = "adapter"`, `adapter.type = "lora"`,
//! `adapter.lora.alpha` (f32) and `general.architecture` (the base's), and for each adapted
//! matrix `W` of the base, named as the base names it (`blk.0.attn_q.weight`), two tensors:
//! `<name>.lora_a` with ggml dims `[n_in, r]` and `<name>.lora_b` with dims `[r, n_out]`.
//! With `W` of dims `[n_in, n_out]` (N = n_out rows of K = n_in), llama.cpp computes
//! `y = W x + s · B (A x)` with `s = alpha / r` (`r` = `lora_b`'s dims[0]), or `s = 1` when
//! alpha is 0, times the user's per-adapter scale (`--lora FILE:SCALE`).
//!
//! rsLoRA (Kalajdzievski 2023, arXiv 2312.03732) scales by `alpha / sqrt(r)` instead; the
//! format has no key for it, so a trainer that wants rsLoRA's scale stores
//! `alpha' = alpha · sqrt(r)`, for which `alpha' / r` is the wanted `alpha / sqrt(r)`.
//!
//! Letters: r the rank, K = n_in, N = n_out. `a` is (r, K) row-major == ggml `[K, r]`,
//! `b` is (N, r) row-major == ggml `[r, N]`. toy writes f32; it reads any float or
//! quantized type tinynn can decode (the converter's `--outtype f16/bf16/q8_0`).
//! llama.cpp stores a `token_embd.weight` adapter transposed (`llm_build_inp_embd`); toy
//! rejects those rather than guess. Like llama.cpp, `*_norm.weight` tensors in the file are
//! ignored.

use crate::gguf::{GgufError, GgufFile, GgufWriter, TensorInfo, Value};
use std::path::Path;
use tinynn::quant::{can_dequantize, dequantize, GgmlType, QuantError};

/// One adapted matrix: `W' = W + scale · B A`.
#[derive(Clone, Debug, PartialEq)]
pub struct LoraTensor {
    /// The base tensor's name, e.g. "blk.0.attn_q.weight".
    pub base: String,
    pub n_in: usize,
    pub n_out: usize,
    pub rank: usize,
    /// (rank, n_in) row-major == ggml dims [n_in, rank].
    pub a: Vec<f32>,
    /// (n_out, rank) row-major == ggml dims [rank, n_out].
    pub b: Vec<f32>,
}

/// A LoRA adapter for a base model of architecture `arch`.
#[derive(Clone, Debug, PartialEq)]
pub struct LoraAdapter {
    /// The base's `general.architecture`, e.g. "llama".
    pub arch: String,
    /// `adapter.lora.alpha`; 0 means a scale of 1 (llama.cpp's rule).
    pub alpha: f32,
    pub tensors: Vec<LoraTensor>,
}

#[derive(Debug, thiserror::Error)]
pub enum AdapterError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error("not a lora adapter: general.type is {found}, expected \"adapter\"")]
    NotAdapter { found: String },
    #[error("not a lora adapter: adapter.type is {found}, expected \"lora\"")]
    NotLora { found: String },
    #[error("adapter has no general.architecture")]
    NoArch,
    #[error("adapter is for architecture '{adapter}' but the base model is '{base}'")]
    ArchMismatch { adapter: String, base: String },
    #[error("adapter tensor '{name}' has no matching '{missing}'")]
    MissingPair { name: String, missing: String },
    #[error(
        "adapter tensor '{name}': lora_a has rank {a} (dims[1]) but lora_b has rank {b} (dims[0])"
    )]
    RankMismatch { name: String, a: u64, b: u64 },
    #[error("adapter tensor '{name}': {msg}")]
    BadTensor { name: String, msg: String },
    #[error("adapter targets '{0}', which the base model does not have")]
    MissingBase(String),
    #[error("adapter tensor '{name}': base has dims {base:?}, adapter expects [{n_in}, {n_out}] (lora_a [{n_in}, r], lora_b [r, {n_out}])")]
    ShapeMismatch {
        name: String,
        base: Vec<u64>,
        n_in: usize,
        n_out: usize,
    },
    #[error("base tensor '{name}': {source}")]
    Decode { name: String, source: QuantError },
}

fn bad(name: &str, msg: impl Into<String>) -> AdapterError {
    AdapterError::BadTensor {
        name: name.into(),
        msg: msg.into(),
    }
}

impl LoraTensor {
    /// Checks that `a` and `b` hold (rank, n_in) and (n_out, rank) values.
    fn check_lengths(&self) -> Result<(), AdapterError> {
        if self.rank == 0 || self.n_in == 0 || self.n_out == 0 {
            return Err(bad(&self.base, "rank, n_in and n_out must be nonzero"));
        }
        let (na, nb) = (self.rank * self.n_in, self.n_out * self.rank);
        if self.a.len() != na || self.b.len() != nb {
            let msg = format!(
                "a has {} values, b has {}: expected {na} (rank {} x n_in {}) and {nb} (n_out {} x rank)",
                self.a.len(),
                self.b.len(),
                self.rank,
                self.n_in,
                self.n_out
            );
            return Err(bad(&self.base, msg));
        }
        Ok(())
    }
}

impl LoraAdapter {
    /// The factor on `B A` for `t`: alpha / rank, or 1 when alpha is 0, as llama.cpp's
    /// `llama_adapter_lora_weight::get_scale`.
    pub fn scale(&self, t: &LoraTensor) -> f32 {
        if self.alpha == 0.0 {
            1.0
        } else {
            self.alpha / t.rank as f32
        }
    }

    /// The adapter as a GGUF writer (f32 tensors, `lora_a` then `lora_b` per matrix).
    pub fn to_writer(&self) -> Result<GgufWriter<'static>, AdapterError> {
        let mut w = GgufWriter::new();
        w.add_metadata("general.architecture", Value::String(self.arch.clone()));
        w.add_metadata("general.type", Value::String("adapter".into()));
        w.add_metadata("adapter.type", Value::String("lora".into()));
        w.add_metadata("adapter.lora.alpha", Value::F32(self.alpha));
        for t in &self.tensors {
            t.check_lengths()?;
            if t.base.ends_with("token_embd.weight") {
                return Err(bad(&t.base, "token_embd adapters are not supported"));
            }
            let (k, n, r) = (t.n_in as u64, t.n_out as u64, t.rank as u64);
            let bytes = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
            w.add_tensor(
                format!("{}.lora_a", t.base),
                vec![k, r],
                GgmlType::F32,
                bytes(&t.a),
            )?;
            w.add_tensor(
                format!("{}.lora_b", t.base),
                vec![r, n],
                GgmlType::F32,
                bytes(&t.b),
            )?;
        }
        Ok(w)
    }

    /// Writes the adapter to `path` durably: a temporary name, fsync, rename, folder fsync
    /// (see [`crate::durable`]).
    pub fn write(&self, path: &Path) -> Result<(), AdapterError> {
        Ok(self.to_writer()?.write_file(path)?)
    }

    /// Reads an adapter file, checking what llama.cpp checks at load.
    pub fn read(path: &Path) -> Result<Self, AdapterError> {
        Self::from_gguf(&GgufFile::open(path)?)
    }

    /// The adapter held in a parsed GGUF file.
    pub fn from_gguf(f: &GgufFile) -> Result<Self, AdapterError> {
        let describe = |key: &str| match f.get(key) {
            None => "absent".to_string(),
            Some(v) => match v.as_str() {
                Some(s) => format!("{s:?}"),
                None => format!("{v:?}"),
            },
        };
        if f.get_str("general.type") != Some("adapter") {
            let found = describe("general.type");
            return Err(AdapterError::NotAdapter { found });
        }
        if f.get_str("adapter.type") != Some("lora") {
            let found = describe("adapter.type");
            return Err(AdapterError::NotLora { found });
        }
        let arch = f.architecture().ok_or(AdapterError::NoArch)?.to_string();
        let alpha = f.get_f32("adapter.lora.alpha").unwrap_or(0.0);
        let mut tensors = Vec::new();
        for t in &f.tensors {
            let name = &t.name;
            if let Some(base) = name.strip_suffix(".lora_a") {
                let b_name = format!("{base}.lora_b");
                let tb = f.tensor(&b_name).ok_or_else(|| AdapterError::MissingPair {
                    name: name.clone(),
                    missing: b_name.clone(),
                })?;
                tensors.push(pair(f, base, t, tb)?);
            } else if let Some(base) = name.strip_suffix(".lora_b") {
                let a_name = format!("{base}.lora_a");
                if f.tensor(&a_name).is_none() {
                    return Err(AdapterError::MissingPair {
                        name: name.clone(),
                        missing: a_name,
                    });
                }
            } else if !name.ends_with("_norm.weight") {
                return Err(bad(name, "unexpected suffix: expected .lora_a or .lora_b"));
            }
        }
        Ok(Self {
            arch,
            alpha,
            tensors,
        })
    }

    /// Checks the adapter fits `base`: same architecture, and every adapted tensor exists in
    /// the base as a matrix of dims [n_in, n_out].
    pub fn check_base(&self, base: &GgufFile) -> Result<(), AdapterError> {
        let base_arch = base.architecture().unwrap_or("");
        if self.arch != base_arch {
            return Err(AdapterError::ArchMismatch {
                adapter: self.arch.clone(),
                base: base_arch.into(),
            });
        }
        for t in &self.tensors {
            t.check_lengths()?;
            let w = base
                .tensor(&t.base)
                .ok_or_else(|| AdapterError::MissingBase(t.base.clone()))?;
            if w.dims != [t.n_in as u64, t.n_out as u64] {
                return Err(AdapterError::ShapeMismatch {
                    name: t.base.clone(),
                    base: w.dims.clone(),
                    n_in: t.n_in,
                    n_out: t.n_out,
                });
            }
        }
        Ok(())
    }
}

/// The pair `<base>.lora_a` (`ta`, dims [K, r]) and `<base>.lora_b` (`tb`, dims [r, N]).
fn pair(
    f: &GgufFile,
    base: &str,
    ta: &TensorInfo,
    tb: &TensorInfo,
) -> Result<LoraTensor, AdapterError> {
    if base.ends_with("token_embd.weight") {
        return Err(bad(
            base,
            "token_embd adapters (stored transposed by llama.cpp) are not supported",
        ));
    }
    for t in [ta, tb] {
        if t.dims.len() != 2 {
            return Err(bad(&t.name, format!("dims {:?}: expected 2 dims", t.dims)));
        }
    }
    if ta.dims[1] != tb.dims[0] {
        return Err(AdapterError::RankMismatch {
            name: base.into(),
            a: ta.dims[1],
            b: tb.dims[0],
        });
    }
    Ok(LoraTensor {
        base: base.into(),
        n_in: ta.dims[0] as usize,
        n_out: tb.dims[1] as usize,
        rank: ta.dims[1] as usize,
        a: decode(f, ta)?,
        b: decode(f, tb)?,
    })
}

fn decode(f: &GgufFile, t: &TensorInfo) -> Result<Vec<f32>, AdapterError> {
    if !can_dequantize(t.ty) {
        return Err(bad(&t.name, format!("type {} cannot be read as f32", t.ty)));
    }
    // the reader bounded the data by the file size, so this allocation is bounded too
    let mut out = vec![0f32; t.n_elements() as usize];
    dequantize(t.ty, f.tensor_data(t), &mut out).map_err(|e| bad(&t.name, e.to_string()))?;
    Ok(out)
}
