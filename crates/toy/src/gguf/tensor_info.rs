//! A GGUF tensor's description and the limits the reader and the writer both hold it to
//! (spec: ggml `docs/gguf.md`): below `reader.rs`, `cursor.rs` and `writer.rs`.

use super::error::{tensor_err, GgufError};
use tinynn::quant::GgmlType;

/// The alignment used when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// ggml's `GGML_MAX_DIMS`.
pub const MAX_DIMS: usize = 4;
/// Arrays of arrays deeper than this are rejected (real files nest at most once).
pub const MAX_ARRAY_DEPTH: usize = 8;

/// One tensor's description from the header.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    /// ggml order: `dims[0]` is the row length (fastest-varying).
    pub dims: Vec<u64>,
    pub ty: GgmlType,
    /// Byte offset relative to the start of the data section.
    pub offset: u64,
}

impl TensorInfo {
    /// Product of the dims (1 for a tensor with no dims). Saturates on overflow; the reader
    /// and the writer reject such tensors, so it only saturates for hand-built infos.
    pub fn n_elements(&self) -> u64 {
        self.dims
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .unwrap_or(u64::MAX)
    }

    /// Bytes of data; 0 when the element count is not a whole number of blocks.
    pub fn n_bytes(&self) -> u64 {
        self.ty.row_bytes(self.n_elements()).unwrap_or(0)
    }
}

/// Checks that the element count fits ggml's int64 and rows are whole blocks. Shared with
/// the writer so that it never writes what the reader would refuse.
pub(crate) fn check_shape(name: &str, dims: &[u64], ty: GgmlType) -> Result<(), GgufError> {
    if dims.len() > MAX_DIMS {
        let msg = format!("{} dims: expected at most {MAX_DIMS}", dims.len());
        return Err(tensor_err(name, msg));
    }
    let n = dims.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d));
    let n = match n {
        Some(n) if n <= i64::MAX as u64 => n,
        _ => {
            return Err(tensor_err(
                name,
                format!("element count of dims {dims:?} overflows"),
            ))
        }
    };
    let row = dims.first().copied().unwrap_or(1);
    let bs = ty.block_size() as u64;
    if !row.is_multiple_of(bs) {
        let msg = format!("row length {row} not a multiple of {ty} block size {bs}");
        return Err(tensor_err(name, msg));
    }
    if ty.row_bytes(n).is_none() {
        return Err(tensor_err(
            name,
            format!("byte size of dims {dims:?} overflows"),
        ));
    }
    Ok(())
}
