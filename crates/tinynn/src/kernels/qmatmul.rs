//! Matrix products against weights stored in any ggml type, without a whole-matrix f32 copy.
//! A weight matrix is N rows of K elements (GGUF dims `[K, N]`), each row quantized on its own.
//!
//! The entry points pick a kernel per weight type and width:
//! - weights repacked at load (`repack`: Q4_0, Q4_1, Q5_0, Q8_0 on AVX-512 VNNI, all but
//!   Q5_0 on AVX2 too; Q4_K on AVX-512 VNNI or AVX2; Q6_K on AVX-512 VNNI; F16 on AVX-512
//!   F16C): the interleaved-row kernels, decode and prefill alike;
//! - decode (T = 1) otherwise: integer row dots on x quantized once to 8 bits (`rowdot`), for
//!   Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K and Q6_K;
//! - prefill (T > 1) otherwise: AVX-512 VNNI tiles for the legacy types (`qgemm`), which sum
//!   in the row dots' order, so a batch gives the bits of token-by-token decoding; for Q5_K and
//!   Q6_K the interleaved k-quant kernels on rows packed per call (`repack_k`, `repack_q6k`,
//!   on AVX-512 VNNI or AVX2);
//!   batches under 64 tokens of any of these on decode's row dots (four tokens a call for
//!   Q4_K and Q6_K), so that they get the bits of token-by-token decoding;
//! - anything else: dequantized rows or panels and f32 products (`fallback`).
//!
//! On CPUs with AMX-BF16, batches of 64 tokens or more of the k-quants go to `qmatmul_amx`
//! instead (bf16 tiles, W dequantized a chunk of rows at a time).

use super::act_quant::round_for;
use super::fallback::{matmul_f32, matvec_f32};
use super::qgemm;
use super::qmatmul_amx;
use super::repack::Packed;
use super::rowdot::{
    int8_many, k_tiles, k_tiles_many, matvec_int8, packed_many, RowDot, ROW_DOT_BATCH,
};
use crate::quant::{can_dequantize, dequantize, GgmlType};

/// A borrowed weight matrix: `rows` (N) rows of `cols` (K) elements in type `ty`.
#[derive(Clone, Copy, Debug)]
pub struct QMat<'a> {
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    pub data: &'a [u8],
    /// The same weights repacked for an interleaved-row kernel (Q4_0, Q4_1, Q5_0, Q8_0, F16),
    /// when the owner made it.
    pub packed: Option<&'a Packed>,
}

/// Why a byte slice cannot be used as a weight matrix.
#[derive(Debug, thiserror::Error)]
pub enum QMatError {
    #[error("weight type {0} has no dequantizer")]
    Unsupported(GgmlType),
    #[error("{ty} row of {cols} elements is not a whole number of blocks")]
    NotWholeBlocks { ty: GgmlType, cols: usize },
    #[error("{rows}x{cols} {ty} matrix needs {expected} bytes, got {got}")]
    ByteLength {
        ty: GgmlType,
        rows: usize,
        cols: usize,
        expected: usize,
        got: usize,
    },
}

impl<'a> QMat<'a> {
    pub fn new(ty: GgmlType, rows: usize, cols: usize, data: &'a [u8]) -> Result<Self, QMatError> {
        if !can_dequantize(ty) {
            return Err(QMatError::Unsupported(ty));
        }
        let row = ty
            .row_bytes(cols as u64)
            .ok_or(QMatError::NotWholeBlocks { ty, cols })? as usize;
        let expected = row * rows;
        if data.len() != expected {
            return Err(QMatError::ByteLength {
                ty,
                rows,
                cols,
                expected,
                got: data.len(),
            });
        }
        Ok(Self {
            ty,
            rows,
            cols,
            data,
            packed: None,
        })
    }

    pub fn row_bytes(&self) -> usize {
        self.data.len() / self.rows.max(1)
    }

    /// The bytes of row `r`.
    pub fn row(&self, r: usize) -> &'a [u8] {
        let rb = self.row_bytes();
        &self.data[r * rb..(r + 1) * rb]
    }

    /// Dequantize row `r` into `out` (`cols` elements), from the repacked copy when there is
    /// one (the model has released the original's pages).
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        if let Some(p) = self.packed {
            return p.dequantize_row(r, out);
        }
        // The matrix was validated in `new`, so this cannot fail.
        dequantize(self.ty, self.row(r), &mut out[..self.cols]).expect("validated QMat");
    }
}

/// `y = W x`: x (K) -> y (N).
pub fn matvec(w: &QMat, x: &[f32], y: &mut [f32]) {
    assert_eq!(x.len(), w.cols, "matvec input width");
    assert_eq!(y.len(), w.rows, "matvec output height");
    if w.packed.is_some() {
        return packed_many(&[*w], x, 1, &mut [y]);
    }
    if let Some(dot) = RowDot::for_matrix(w) {
        return matvec_int8(w, x, y, dot);
    }
    matvec_f32(w, x, y)
}

/// `Y = X W^T`: X (T, K) -> Y (T, N), row-major.
pub fn matmul(w: &QMat, x: &[f32], t: usize, y: &mut [f32]) {
    let (n, k) = (w.rows, w.cols);
    assert_eq!(x.len(), t * k, "matmul input is (T, K)");
    assert_eq!(y.len(), t * n, "matmul output is (T, N)");
    if t == 1 {
        return matvec(w, x, y);
    }
    if qmatmul_amx::applies(&[*w], t) {
        return qmatmul_amx::many(&[*w], x, t, &mut [y]);
    }
    if w.packed.is_some() {
        return packed_many(&[*w], x, t, &mut [y]);
    }
    if let Some(dots) = small_batch_dots(&[*w], t) {
        return int8_many(&[*w], x, t, &mut [y], &dots);
    }
    if qgemm::supports(w.ty, k) {
        return matmul_int8(w, x, t, y);
    }
    if k_tiles(w) {
        return k_tiles_many(&[*w], x, t, &mut [y]);
    }
    matmul_f32(w, x, t, y)
}

/// Prefill's product for the legacy types: X quantized to Q8_1 once, VNNI tiles over row chunks.
fn matmul_int8(w: &QMat, x: &[f32], t: usize, y: &mut [f32]) {
    int8_many(&[*w], x, t, &mut [y], &[])
}

/// `ys[i] = X ws[i]^T` for matrices that share the input width: X (T, K) -> ys[i] (T, N_i).
pub fn matmul_many(ws: &[QMat], x: &[f32], t: usize, ys: &mut [&mut [f32]]) {
    assert_eq!(ws.len(), ys.len(), "one output per matrix");
    for (w, y) in ws.iter().zip(ys.iter()) {
        assert_eq!(x.len(), t * w.cols, "matmul input is (T, K)");
        assert_eq!(y.len(), t * w.rows, "matmul output is (T, N)");
    }
    if qmatmul_amx::applies(ws, t) {
        return qmatmul_amx::many(ws, x, t, ys);
    }
    if ws.iter().all(|w| w.packed.is_some()) {
        return packed_many(ws, x, t, ys);
    }
    if ws.iter().any(|w| w.packed.is_some()) {
        // a set that mixes repacked and plain matrices: each on its own kernel (the row dots
        // would read a repacked matrix's released original back from the file)
        for (w, y) in ws.iter().zip(ys.iter_mut()) {
            matmul(w, x, t, y);
        }
        return;
    }
    if t == 1 {
        if let Some(dots) = ws
            .iter()
            .map(RowDot::for_matrix)
            .collect::<Option<Vec<_>>>()
        {
            return int8_many(ws, x, t, ys, &dots);
        }
    } else if let Some(dots) = small_batch_dots(ws, t) {
        return int8_many(ws, x, t, ys, &dots);
    } else if ws.iter().all(|w| qgemm::supports(w.ty, w.cols)) {
        return int8_many(ws, x, t, ys, &[]);
    } else if ws.iter().all(k_tiles) {
        return k_tiles_many(ws, x, t, ys);
    }
    for (w, y) in ws.iter().zip(ys.iter_mut()) {
        matmul(w, x, t, y);
    }
}

/// Decode's row dots for a batch of fewer than `ROW_DOT_BATCH` tokens, when every matrix is
/// of a type the row dots take: a legacy type or a k-quant (Q5_K and Q6_K too, whose
/// interleaved tiles sum in another order). Repacked matrices have their own kernel,
/// the same for decode and batches, checked first. A speculative verify step then scores its
/// drafted tokens with the bits of token-by-token decoding, so greedy output does not change,
/// without dequantizing the model to f32 or packing rows per call for a handful of tokens.
fn small_batch_dots(ws: &[QMat], t: usize) -> Option<Vec<RowDot>> {
    if t >= ROW_DOT_BATCH {
        return None;
    }
    ws.iter()
        .map(|w| RowDot::for_matrix(w).filter(|d| !matches!(d, RowDot::F16 | RowDot::BF16)))
        .collect()
}

/// `(matrix, first row)` of every chunk of `rows` rows of every matrix: the tasks of a
/// product that splits each matrix's rows.
pub(super) fn row_chunks(ws: &[QMat], rows: usize) -> Vec<(usize, usize)> {
    ws.iter()
        .enumerate()
        .flat_map(|(i, w)| (0..w.rows).step_by(rows).map(move |r| (i, r)))
        .collect()
}

/// The kernels `matvec` and `matmul` choose for `w` on this CPU: (decode, prefill).
pub fn kernel_names(w: &QMat) -> (&'static str, &'static str) {
    // what `Packed::new` would make of w, by the same predicates
    let (rows, cols) = (w.rows, w.cols);
    let packed = if super::repack::PackedQ4::bytes_for(w.ty, rows, cols).is_some() {
        Some(if qgemm::has_vnni() {
            "int8, 16 interleaved rows (AVX-512 VNNI)"
        } else {
            "int8, 16 interleaved rows (AVX2)"
        })
    } else if super::repack_f16::PackedF16::bytes_for(w.ty, rows, cols).is_some() {
        Some("f16, 16 interleaved rows (AVX-512 F16C)")
    } else if super::repack_k::PackedK::bytes_for(w.ty, rows, cols).is_some() {
        Some(if qgemm::has_vnni() {
            "int8 Q4_K, 16 interleaved rows (AVX-512 VNNI)"
        } else {
            "int8 Q4_K, 16 interleaved rows (AVX2)"
        })
    } else if super::repack_q6k::PackedQ6K::bytes_for(w.ty, rows, cols).is_some() {
        Some("int8 Q6_K, 16 interleaved rows (AVX-512 VNNI)")
    } else {
        None
    };
    const AMX: &str =
        "as decode under 64 tokens, else bf16 tiles (AMX), W dequantized 64 rows at a time";
    let amx = qmatmul_amx::applies(&[*w], qmatmul_amx::AMX_BATCH);
    if let Some(k) = packed {
        return (k, if amx { AMX } else { k });
    }
    let decode = if let Some(RowDot::BF16) = RowDot::for_matrix(w) {
        "bf16 row dot, x rounded to bf16 (AVX-512)"
    } else if RowDot::for_matrix(w).is_some() {
        "int8 row dot (AVX2)"
    } else {
        "dequantize + f32 dot"
    };
    let prefill = if amx {
        AMX
    } else if qgemm::supports(w.ty, w.cols) {
        "int8 tiles (AVX-512 VNNI)"
    } else if k_tiles(w) && qgemm::has_vnni() {
        "int8 row dots under 64 tokens (AVX2), else 16 rows interleaved per call (AVX-512 VNNI)"
    } else if k_tiles(w) {
        "int8 row dots under 64 tokens, else 16 rows interleaved per call (AVX2)"
    } else if RowDot::for_matrix(w).is_some_and(|d| matches!(d, RowDot::Q8K(..))) {
        "int8 row dots under 64 tokens (AVX2), else dequantize + f32 gemm"
    } else {
        "dequantize + f32 gemm"
    };
    (decode, prefill)
}

/// Reference: dequantize everything and multiply sequentially.
pub fn matmul_ref(w: &QMat, x: &[f32], t: usize) -> Vec<f32> {
    let (n, k) = (w.rows, w.cols);
    let mut x = x.to_vec();
    round_for(w.ty, &mut x, k);
    let mut row = vec![0f32; k];
    let mut y = vec![0f32; t * n];
    for r in 0..n {
        w.dequantize_row(r, &mut row);
        for i in 0..t {
            y[i * n + r] = super::dot::dot_ref(&row, &x[i * k..(i + 1) * k]);
        }
    }
    y
}

#[cfg(test)]
#[path = "qmatmul_tests.rs"]
mod tests;
