//! GGUF reader (spec: ggml `docs/gguf.md`, versions 2 and 3, little-endian).
//!
//! Layout: magic "GGUF", u32 version, u64 tensor count, u64 kv count, the kvs
//! (string key, u32 type, value), the tensor infos (string name, u32 n_dims, u64 dims,
//! u32 ggml type, u64 offset), zero padding to `general.alignment` (default 32), then the
//! tensor data. The file is memory-mapped and every size in it is checked against the bytes
//! that remain before anything is allocated, so a hostile file gives an error, not a panic
//! or a huge allocation. All tensor ranges are validated at open, so `tensor_data` cannot fail.

use std::collections::HashMap;
use std::path::Path;

use super::cursor::Cursor;
use super::error::{tensor_err, GgufError};
use super::tensor_info::{TensorInfo, DEFAULT_ALIGNMENT};
use super::value::Value;

enum Backing {
    Mmap(memmap2::Mmap),
    Bytes(Vec<u8>),
}

/// A parsed GGUF file; the tensor data stays in the backing bytes.
pub struct GgufFile {
    pub version: u32,
    /// In file order.
    pub metadata: Vec<(String, Value)>,
    /// In file order.
    pub tensors: Vec<TensorInfo>,
    pub alignment: u64,
    /// Absolute file offset of the data section.
    pub data_offset: u64,
    backing: Backing,
    kv_index: HashMap<String, usize>,
    tensor_index: HashMap<String, usize>,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("version", &self.version)
            .field("n_metadata", &self.metadata.len())
            .field("n_tensors", &self.tensors.len())
            .field("alignment", &self.alignment)
            .field("data_offset", &self.data_offset)
            .field("len", &self.bytes().len())
            .finish()
    }
}

impl GgufFile {
    /// Memory-maps and parses the file at `path`.
    pub fn open(path: &Path) -> Result<Self, GgufError> {
        let io = |source| GgufError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        let backing = if len == 0 {
            Backing::Bytes(Vec::new()) // mapping an empty file fails on some platforms
        } else {
            // SAFETY: the map is read-only; like every mmap reader (llama.cpp included) we
            // assume nobody truncates or rewrites the model file while it is open.
            Backing::Mmap(unsafe { memmap2::Mmap::map(&file) }.map_err(io)?)
        };
        let f = Self::parse(backing)?;
        // the header's values now live in `metadata`: its pages need not stay mapped
        f.release(0..(f.data_offset as usize).min(f.bytes().len()));
        Ok(f)
    }

    /// Parses a GGUF file held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self, GgufError> {
        Self::parse(Backing::Bytes(bytes))
    }

    /// The whole file.
    /// Tell the OS the bytes in `range` will not be read soon (their content lives on in a
    /// repacked copy), so their pages may leave memory. A later read faults them back in from
    /// the file; in-memory files ignore this.
    pub fn release(&self, range: std::ops::Range<usize>) {
        if let Backing::Mmap(m) = &self.backing {
            if range.end <= m.len() {
                // SAFETY: the map is read-only and backed by the file, so MADV_DONTNEED only
                // drops pages; any later read sees the file's bytes again, unchanged.
                let _ = unsafe {
                    m.unchecked_advise_range(
                        memmap2::UncheckedAdvice::DontNeed,
                        range.start,
                        range.len(),
                    )
                };
            }
        }
    }

    pub fn bytes(&self) -> &[u8] {
        match &self.backing {
            Backing::Mmap(m) => m,
            Backing::Bytes(b) => b,
        }
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.kv_index.get(key).map(|&i| &self.metadata[i].1)
    }
    pub fn get_u64(&self, key: &str) -> Option<u64> {
        self.get(key)?.as_u64()
    }
    pub fn get_f32(&self, key: &str) -> Option<f32> {
        self.get(key)?.as_f32()
    }
    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.get(key)?.as_str()
    }
    pub fn get_bool(&self, key: &str) -> Option<bool> {
        self.get(key)?.as_bool()
    }

    /// `general.architecture`, e.g. "llama".
    pub fn architecture(&self) -> Option<&str> {
        self.get_str("general.architecture")
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    /// The raw bytes of tensor `t`. Infos from this file were range-checked at open; an info
    /// that does not fit (one built by hand) yields an empty slice rather than a panic.
    pub fn tensor_data(&self, t: &TensorInfo) -> &[u8] {
        let range = self
            .data_offset
            .checked_add(t.offset)
            .and_then(|s| Some((s, s.checked_add(t.n_bytes())?)));
        match range {
            Some((s, e)) => usize::try_from(s)
                .ok()
                .zip(usize::try_from(e).ok())
                .and_then(|(s, e)| self.bytes().get(s..e))
                .unwrap_or(&[]),
            None => &[],
        }
    }

    fn parse(backing: Backing) -> Result<Self, GgufError> {
        let buf: &[u8] = match &backing {
            Backing::Mmap(m) => m,
            Backing::Bytes(b) => b,
        };
        let h = parse_header(buf)?;
        Ok(GgufFile {
            version: h.version,
            metadata: h.metadata,
            tensors: h.tensors,
            alignment: h.alignment,
            data_offset: h.data_offset,
            kv_index: h.kv_index,
            tensor_index: h.tensor_index,
            backing,
        })
    }
}

struct Header {
    version: u32,
    metadata: Vec<(String, Value)>,
    tensors: Vec<TensorInfo>,
    alignment: u64,
    data_offset: u64,
    kv_index: HashMap<String, usize>,
    tensor_index: HashMap<String, usize>,
}

fn parse_header(buf: &[u8]) -> Result<Header, GgufError> {
    let mut c = Cursor { buf, pos: 0 };
    let magic = c.take(4, "magic")?;
    if magic != b"GGUF" {
        return Err(GgufError::BadMagic {
            found: magic.escape_ascii().to_string(),
        });
    }
    let version = c.u32("version")?;
    if version != 2 && version != 3 {
        return Err(GgufError::UnsupportedVersion(version));
    }
    let n_tensors = c.u64("tensor count")?;
    let n_kv = c.u64("kv count")?;
    // A kv is at least an 8-byte key length, a 4-byte type and a 1-byte value; a tensor info
    // at least an 8-byte name length, a 4-byte n_dims, a 4-byte type and an 8-byte offset.
    c.check_count("kv", n_kv, 13)?;
    c.check_count("tensor", n_tensors, 24)?;

    // Counts are bounded by the file size; the capacity is capped further because the parsed
    // structs are larger than their smallest on-disk form.
    let cap = (n_kv as usize).min(1 << 12);
    let mut metadata = Vec::with_capacity(cap);
    let mut kv_index = HashMap::with_capacity(cap);
    for i in 0..n_kv {
        let at = c.pos as u64;
        let key = c.string(&format!("key of kv {i}"))?;
        let what = format!("value of '{key}'");
        let ty = c.value_type(&what)?;
        let value = c.value(ty, &what, 0)?;
        if kv_index.insert(key.clone(), metadata.len()).is_some() {
            return Err(GgufError::DuplicateKey { key, offset: at });
        }
        metadata.push((key, value));
    }
    let alignment = match kv_index.get("general.alignment").map(|&i| &metadata[i].1) {
        None => DEFAULT_ALIGNMENT,
        Some(Value::U32(a)) if *a != 0 && a.is_power_of_two() => u64::from(*a),
        Some(v) => {
            return Err(GgufError::BadMetadata {
                key: "general.alignment".into(),
                found: format!("{v:?}"),
                expected: "a nonzero power of two of type u32".into(),
            })
        }
    };

    let cap = (n_tensors as usize).min(1 << 12);
    let mut tensors = Vec::with_capacity(cap);
    let mut tensor_index = HashMap::with_capacity(cap);
    for i in 0..n_tensors {
        let t = c.tensor_info(i, alignment)?;
        if tensor_index.insert(t.name.clone(), tensors.len()).is_some() {
            return Err(tensor_err(&t.name, "duplicate tensor name"));
        }
        tensors.push(t);
    }
    let data_offset = (c.pos as u64).div_ceil(alignment) * alignment;
    let len = buf.len() as u64;
    for t in &tensors {
        let end = data_offset
            .checked_add(t.offset)
            .and_then(|s| Some((s, s.checked_add(t.n_bytes())?)));
        match end {
            Some((s, e)) if e <= len => debug_assert!(s <= e),
            _ => {
                let s = data_offset as u128 + t.offset as u128;
                let msg = format!(
                    "data [{s}, {}) past end of file ({len} bytes)",
                    s + t.n_bytes() as u128
                );
                return Err(tensor_err(&t.name, msg));
            }
        }
    }
    Ok(Header {
        version,
        metadata,
        tensors,
        alignment,
        data_offset,
        kv_index,
        tensor_index,
    })
}
