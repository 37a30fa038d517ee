//! GGUF writer (spec: ggml `docs/gguf.md`), producing llama.cpp's standard layout: header,
//! kvs, tensor infos, zero padding to the alignment, then each tensor's data padded with
//! zeros to the alignment. The writer computes the tensor offsets itself, so a file read with
//! [`GgufFile`] and written back with [`GgufWriter::from_file`] is byte-identical whenever
//! the original used that layout (gguf-py and llama.cpp both do).

use std::borrow::Cow;
use std::io::Write;
use std::path::Path;

use tinynn::quant::GgmlType;

use super::error::{tensor_err, GgufError};
use super::reader::GgufFile;
use super::tensor_info::{check_shape, DEFAULT_ALIGNMENT, MAX_ARRAY_DEPTH};
use super::value::Value;

struct PendingTensor<'a> {
    name: String,
    dims: Vec<u64>,
    ty: GgmlType,
    data: Cow<'a, [u8]>,
}

/// Collects metadata and tensors, then writes them as one GGUF file. Tensor data may be
/// borrowed (`'a`), e.g. straight from a memory-mapped [`GgufFile`], so rewriting a model
/// does not copy its weights into memory.
pub struct GgufWriter<'a> {
    version: u32,
    metadata: Vec<(String, Value)>,
    tensors: Vec<PendingTensor<'a>>,
}

impl Default for GgufWriter<'_> {
    fn default() -> Self {
        Self::new()
    }
}

impl<'a> GgufWriter<'a> {
    /// An empty version-3 file.
    pub fn new() -> Self {
        GgufWriter {
            version: 3,
            metadata: Vec::new(),
            tensors: Vec::new(),
        }
    }

    /// Everything in `f` (version, metadata and tensors in file order), borrowing its data.
    pub fn from_file(f: &'a GgufFile) -> Self {
        let tensors = f.tensors.iter().map(|t| PendingTensor {
            name: t.name.clone(),
            dims: t.dims.clone(),
            ty: t.ty,
            data: Cow::Borrowed(f.tensor_data(t)),
        });
        GgufWriter {
            version: f.version,
            metadata: f.metadata.clone(),
            tensors: tensors.collect(),
        }
    }

    /// 2 or 3 (identical layouts for little-endian files); checked when writing.
    pub fn set_version(&mut self, v: u32) {
        self.version = v;
    }

    /// Sets `general.alignment`, which the format reads as the data alignment.
    pub fn set_alignment(&mut self, alignment: u32) {
        self.add_metadata("general.alignment", Value::U32(alignment));
    }

    /// Appends `key`, or replaces its value in place if it is already present.
    pub fn add_metadata(&mut self, key: impl Into<String>, value: Value) {
        let key = key.into();
        match self.metadata.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => *v = value,
            None => self.metadata.push((key, value)),
        }
    }

    /// Appends a tensor. `data` must hold exactly the bytes `dims` and `ty` call for.
    pub fn add_tensor(
        &mut self,
        name: impl Into<String>,
        dims: Vec<u64>,
        ty: GgmlType,
        data: impl Into<Cow<'a, [u8]>>,
    ) -> Result<(), GgufError> {
        let name = name.into();
        let data = data.into();
        check_shape(&name, &dims, ty)?;
        if self.tensors.iter().any(|t| t.name == name) {
            return Err(tensor_err(&name, "duplicate tensor name"));
        }
        let n: u64 = dims.iter().product();
        let need = ty.row_bytes(n).unwrap_or(u64::MAX);
        if data.len() as u64 != need {
            let got = data.len();
            let msg = format!("{got} data bytes: expected {need} for {ty} dims {dims:?}");
            return Err(tensor_err(&name, msg));
        }
        self.tensors.push(PendingTensor {
            name,
            dims,
            ty,
            data,
        });
        Ok(())
    }

    /// The data alignment: `general.alignment` if set (checked), else 32.
    fn alignment(&self) -> Result<u64, GgufError> {
        match self.metadata.iter().find(|(k, _)| k == "general.alignment") {
            None => Ok(DEFAULT_ALIGNMENT),
            Some((_, Value::U32(a))) if *a != 0 && a.is_power_of_two() => Ok(u64::from(*a)),
            Some((k, v)) => Err(GgufError::BadMetadata {
                key: k.clone(),
                found: format!("{v:?}"),
                expected: "a nonzero power of two of type u32".into(),
            }),
        }
    }

    /// Serializes everything before the data section, including its padding.
    fn header(&self, alignment: u64) -> Result<Vec<u8>, GgufError> {
        if self.version != 2 && self.version != 3 {
            return Err(GgufError::UnsupportedVersion(self.version));
        }
        let mut h = Vec::new();
        h.extend_from_slice(b"GGUF");
        h.extend_from_slice(&self.version.to_le_bytes());
        h.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        h.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (key, value) in &self.metadata {
            put_str(&mut h, key);
            h.extend_from_slice(&(value.value_type() as u32).to_le_bytes());
            put_value(&mut h, key, value, 0)?;
        }
        let mut offset = 0u64;
        for t in &self.tensors {
            put_str(&mut h, &t.name);
            h.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                h.extend_from_slice(&d.to_le_bytes());
            }
            h.extend_from_slice(&t.ty.id().to_le_bytes());
            h.extend_from_slice(&offset.to_le_bytes());
            offset += padded(t.data.len() as u64, alignment);
        }
        h.resize(padded(h.len() as u64, alignment) as usize, 0);
        Ok(h)
    }

    /// Writes the whole file to `w`. Nothing is written if the metadata is invalid.
    pub fn write_to(&self, w: &mut impl Write) -> Result<(), GgufError> {
        let alignment = self.alignment()?;
        let header = self.header(alignment)?;
        w.write_all(&header).map_err(GgufError::Write)?;
        let zeros = vec![0u8; alignment as usize];
        for t in &self.tensors {
            w.write_all(&t.data).map_err(GgufError::Write)?;
            let pad = padded(t.data.len() as u64, alignment) - t.data.len() as u64;
            w.write_all(&zeros[..pad as usize])
                .map_err(GgufError::Write)?;
        }
        Ok(())
    }

    /// Writes atomically: to `<path>.tmp-<pid>`, flushed and fsynced, then renamed over
    /// `path` and the directory fsynced, so a crash leaves either the old file or the new.
    pub fn write_file(&self, path: &Path) -> Result<(), GgufError> {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(format!(".tmp-{}", std::process::id()));
        let tmp = std::path::PathBuf::from(tmp);
        let result = self.write_tmp(&tmp, path);
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result
    }

    fn write_tmp(&self, tmp: &Path, path: &Path) -> Result<(), GgufError> {
        let io = |p: &Path| {
            let p = p.to_path_buf();
            move |source| GgufError::Io { path: p, source }
        };
        let file = std::fs::File::create(tmp).map_err(io(tmp))?;
        let mut w = std::io::BufWriter::new(file);
        self.write_to(&mut w).map_err(|e| match e {
            GgufError::Write(source) => io(tmp)(source),
            e => e,
        })?;
        let file = w.into_inner().map_err(|e| io(tmp)(e.into_error()))?;
        file.sync_all().map_err(io(tmp))?;
        drop(file);
        std::fs::rename(tmp, path).map_err(io(path))?;
        crate::durable::sync_parent_dir(path).map_err(io(crate::durable::parent_dir(path)))
    }
}

fn padded(n: u64, alignment: u64) -> u64 {
    n.div_ceil(alignment) * alignment
}

fn put_str(h: &mut Vec<u8>, s: &str) {
    h.extend_from_slice(&(s.len() as u64).to_le_bytes());
    h.extend_from_slice(s.as_bytes());
}

/// Appends `v` (without its type tag); arrays must be homogeneous and nested at most
/// `MAX_ARRAY_DEPTH` deep, the limits the reader enforces.
fn put_value(h: &mut Vec<u8>, key: &str, v: &Value, depth: usize) -> Result<(), GgufError> {
    match v {
        Value::U8(x) => h.push(*x),
        Value::I8(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::U16(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => h.push(u8::from(*x)),
        Value::String(s) => put_str(h, s),
        Value::U64(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => h.extend_from_slice(&x.to_le_bytes()),
        Value::Array(ty, items) => {
            if depth >= MAX_ARRAY_DEPTH {
                let msg = format!("'{key}': arrays nested deeper than {MAX_ARRAY_DEPTH}");
                return Err(GgufError::Invalid(msg));
            }
            h.extend_from_slice(&(*ty as u32).to_le_bytes());
            h.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for item in items {
                if item.value_type() != *ty {
                    let msg = format!("'{key}': array of {ty:?} holds a {:?}", item.value_type());
                    return Err(GgufError::Invalid(msg));
                }
                put_value(h, key, item, depth + 1)?;
            }
        }
    }
    Ok(())
}
