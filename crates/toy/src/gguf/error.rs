//! Errors from reading and writing GGUF files (spec: ggml `docs/gguf.md`).
//!
//! Every message is lowercase and says where (byte offset, key or tensor name), what was
//! expected and what was seen, so a corrupt file can be diagnosed from the message alone.

use std::path::PathBuf;

/// Anything that can go wrong reading or writing a GGUF file.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    /// The file could not be opened, mapped, written or renamed.
    #[error("i/o error on {path:?}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Writing to a caller-supplied `std::io::Write` failed.
    #[error("i/o error while writing gguf: {0}")]
    Write(#[source] std::io::Error),
    #[error("truncated at offset {offset}: need {need} bytes for {what}, file has {len}")]
    Truncated {
        offset: u64,
        need: u64,
        what: String,
        len: u64,
    },
    #[error("bad magic {found:?} at offset 0: expected \"GGUF\"")]
    BadMagic { found: String },
    #[error("unsupported gguf version {0}: expected 2 or 3")]
    UnsupportedVersion(u32),
    /// A count read from the file (tensors, kvs, array elements) cannot fit in what is left.
    #[error(
        "{what} count {count} at offset {offset} cannot fit: {remaining} bytes left hold at most {max}"
    )]
    CountTooLarge {
        what: String,
        count: u64,
        offset: u64,
        remaining: u64,
        max: u64,
    },
    #[error("{what}: unknown value type {id} at offset {offset}: expected 0..=12")]
    BadValueType { what: String, id: u32, offset: u64 },
    #[error("{what}: arrays nested deeper than {max} at offset {offset}")]
    TooDeep {
        what: String,
        max: usize,
        offset: u64,
    },
    #[error("{what}: invalid utf-8 at offset {offset}")]
    BadUtf8 { what: String, offset: u64 },
    #[error("{what}: bool byte {found} at offset {offset}: expected 0 or 1")]
    BadBool {
        what: String,
        found: u8,
        offset: u64,
    },
    #[error("duplicate metadata key '{key}' at offset {offset}")]
    DuplicateKey { key: String, offset: u64 },
    /// Metadata that the format itself interprets (`general.alignment`) holds a bad value.
    #[error("metadata '{key}': {found}: expected {expected}")]
    BadMetadata {
        key: String,
        found: String,
        expected: String,
    },
    /// A tensor's description is inconsistent (dims, type, offset, data range, name).
    #[error("tensor '{name}': {msg}")]
    Tensor { name: String, msg: String },
    /// The writer was asked to write something the format cannot hold.
    #[error("cannot write gguf: {0}")]
    Invalid(String),
}

pub(crate) fn tensor_err(name: &str, msg: impl Into<String>) -> GgufError {
    GgufError::Tensor {
        name: name.to_string(),
        msg: msg.into(),
    }
}
