//! Matrix products against weights stored in any ggml type, without a whole-matrix f32 copy.
//!
//! A weight matrix is N rows of K elements (GGUF dims `[K, N]`), each row quantized on its own.
//! Decode (one token) streams each row once: dequantize it into a per-thread scratch row and
//! take the dot product. Prefill (T tokens) dequantizes a panel of rows into scratch and hands
//! the panel to the `gemm` crate, so each weight is decoded once per batch, not once per token.
//! Rows are split across the rayon pool.
//!
//! Decode of Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and the k-quants Q4_K, Q5_K, Q6_K takes integer
//! row dots instead (`qdot`, `qdot_q5`, `qdot_k`): x is quantized once to 8 bits, as ggml's
//! `vec_dot_type`. Prefill of the legacy types takes `qgemm`'s VNNI tiles where the CPU has
//! them, which sum in the row dots' order.

use super::act_quant::{block_mins, has_min_term, q8_1_sum_corrections, round_for, vec_dot_type};
use super::dot::dot;
use super::qdot::{dot_q4_0, dot_q4_1, dot_q8_0, has_fast_q4_1, Q8_1Act, Q8_1Row};
use super::qdot_k::{dot_q4_k, dot_q5_k, dot_q6_k, has_fast_k_quants, Q8KAct, Q8KRow};
use super::qdot_q5::{dot_q5_0, dot_q5_1};
use super::qgemm;
use crate::quant::{can_dequantize, dequantize, GgmlType, QK_K};
use rayon::prelude::*;
use std::cell::RefCell;

/// A borrowed weight matrix: `rows` (N) rows of `cols` (K) elements in type `ty`.
#[derive(Clone, Copy, Debug)]
pub struct QMat<'a> {
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    pub data: &'a [u8],
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

    /// Dequantize row `r` into `out` (`cols` elements).
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        // The matrix was validated in `new`, so this cannot fail.
        dequantize(self.ty, self.row(r), &mut out[..self.cols]).expect("validated QMat");
    }
}

thread_local! {
    static SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

fn with_scratch<R>(len: usize, f: impl FnOnce(&mut [f32]) -> R) -> R {
    SCRATCH.with(|s| {
        let mut s = s.borrow_mut();
        if s.len() < len {
            s.resize(len, 0.0);
        }
        f(&mut s[..len])
    })
}

thread_local! {
    static XQ: RefCell<(Vec<f32>, Vec<f32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// Run `f` on `x` rounded as llama.cpp rounds activations for weights of type `ty`, and the
/// per-block min-term corrections for Q4_1 / Q5_1 (see `act_quant`; empty otherwise).
fn with_rounded<R>(ty: GgmlType, x: &[f32], k: usize, f: impl FnOnce(&[f32], &[f32]) -> R) -> R {
    if vec_dot_type(ty).is_none() {
        return f(x, &[]);
    }
    XQ.with(|buf| {
        let (xr, corr) = &mut *buf.borrow_mut();
        corr.clear();
        if has_min_term(ty) && k.is_multiple_of(32) {
            q8_1_sum_corrections(x, corr);
        }
        xr.clear();
        xr.extend_from_slice(x);
        round_for(ty, xr, k);
        f(xr, corr)
    })
}

/// Decode's integer row dot for a weight type: which 8-bit form of x it reads, and the kernel.
#[derive(Clone, Copy)]
enum RowDot {
    Q8_1(fn(&[u8], &Q8_1Row) -> f32),
    Q8K(fn(&[u8], &Q8KRow) -> f32),
}

impl RowDot {
    /// The kernel for `w`, if this CPU has one for its type and width (K must be whole blocks
    /// of the activation type; other shapes take the dequantize + f32 path).
    fn for_matrix(w: &QMat) -> Option<Self> {
        use GgmlType::*;
        let (q8_1, q8k) = (
            w.cols.is_multiple_of(32) && has_fast_q4_1(),
            w.cols.is_multiple_of(QK_K) && has_fast_k_quants(),
        );
        match w.ty {
            Q4_0 if q8_1 => Some(Self::Q8_1(dot_q4_0)),
            Q4_1 if q8_1 => Some(Self::Q8_1(dot_q4_1)),
            Q5_0 if q8_1 => Some(Self::Q8_1(dot_q5_0)),
            Q5_1 if q8_1 => Some(Self::Q8_1(dot_q5_1)),
            Q8_0 if q8_1 => Some(Self::Q8_1(dot_q8_0)),
            Q4_K if q8k => Some(Self::Q8K(dot_q4_k)),
            Q5_K if q8k => Some(Self::Q8K(dot_q5_k)),
            Q6_K if q8k => Some(Self::Q8K(dot_q6_k)),
            _ => None,
        }
    }

    fn run(self, row: &[u8], a: &Q8_1Act, ak: &Q8KAct) -> f32 {
        match self {
            Self::Q8_1(f) => f(row, &a.row()),
            Self::Q8K(f) => f(row, &ak.row()),
        }
    }
}

/// `y = W x`: x (K) -> y (N).
pub fn matvec(w: &QMat, x: &[f32], y: &mut [f32]) {
    assert_eq!(x.len(), w.cols, "matvec input width");
    assert_eq!(y.len(), w.rows, "matvec output height");
    if let Some(dot) = RowDot::for_matrix(w) {
        return matvec_int8(w, x, y, dot);
    }
    with_rounded(w.ty, x, w.cols, |x, corr| matvec_exact(w, x, corr, y))
}

thread_local! {
    static ACT: RefCell<Q8_1Act> = RefCell::new(Q8_1Act::default());
    static ACT_K: RefCell<Q8KAct> = RefCell::new(Q8KAct::default());
}

/// Run `f` on x quantized to Q8_1 (if `q8_1`) and to Q8_K (if `q8k`); the other is stale.
fn with_acts<R>(x: &[f32], q8_1: bool, q8k: bool, f: impl FnOnce(&Q8_1Act, &Q8KAct) -> R) -> R {
    ACT.with(|a| {
        ACT_K.with(|ak| {
            let (mut a, mut ak) = (a.borrow_mut(), ak.borrow_mut());
            if q8_1 {
                a.quantize(x);
            }
            if q8k {
                ak.quantize(x);
            }
            f(&a, &ak)
        })
    })
}

/// Decode's integer product: quantize x to 8 bits once, then an integer dot per row.
fn matvec_int8(w: &QMat, x: &[f32], y: &mut [f32], dot: RowDot) {
    let q8k = matches!(dot, RowDot::Q8K(_));
    with_acts(x, !q8k, q8k, |a, ak| {
        let chunk = (w.rows / (rayon::current_num_threads() * 4)).clamp(8, 256);
        y.par_chunks_mut(chunk).enumerate().for_each(|(c, ys)| {
            for (i, yi) in ys.iter_mut().enumerate() {
                *yi = dot.run(w.row(c * chunk + i), a, ak);
            }
        });
    })
}

/// `y = W x` on `x` as given, plus the min-term corrections `corr` (K/32) if any.
fn matvec_exact(w: &QMat, x: &[f32], corr: &[f32], y: &mut [f32]) {
    let chunk = (w.rows / (rayon::current_num_threads() * 4)).clamp(8, 256);
    let nb = corr.len();
    y.par_chunks_mut(chunk).enumerate().for_each(|(c, ys)| {
        with_scratch(w.cols + nb, |buf| {
            let (row, mins) = buf.split_at_mut(w.cols);
            for (i, yi) in ys.iter_mut().enumerate() {
                let r = c * chunk + i;
                w.dequantize_row(r, row);
                *yi = dot(row, x);
                if nb > 0 {
                    block_mins(w.ty, w.row(r), mins);
                    *yi += dot(mins, corr);
                }
            }
        })
    });
}

/// Raw pointer that may cross into rayon tasks writing disjoint columns.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);
unsafe impl Send for OutPtr {}
unsafe impl Sync for OutPtr {}

impl OutPtr {
    /// A method call captures the whole wrapper (not its raw field) in closures.
    fn at(self, i: usize) -> *mut f32 {
        self.0.wrapping_add(i)
    }
}

/// `Y = X W^T`: X (T, K) -> Y (T, N), row-major.
pub fn matmul(w: &QMat, x: &[f32], t: usize, y: &mut [f32]) {
    let (n, k) = (w.rows, w.cols);
    assert_eq!(x.len(), t * k, "matmul input is (T, K)");
    assert_eq!(y.len(), t * n, "matmul output is (T, N)");
    if t == 1 {
        return matvec(w, x, y);
    }
    if qgemm::supports(w.ty, k) {
        return matmul_int8(w, x, t, y);
    }
    with_rounded(w.ty, x, k, |x, corr| matmul_exact(w, x, corr, t, y))
}

/// Prefill's product for the legacy types: X quantized to Q8_1 once, VNNI tiles over row chunks.
fn matmul_int8(w: &QMat, x: &[f32], t: usize, y: &mut [f32]) {
    int8_many(&[*w], x, t, &mut [y], &[])
}

/// Several products of the same X (fused q/k/v, gate/up): X is quantized once (per 8-bit
/// form), and one parallel loop covers the rows of every matrix, so there is one
/// synchronisation, not three. Decode (T = 1) takes `dots`, one per matrix; prefill the tiles.
fn int8_many(ws: &[QMat], x: &[f32], t: usize, ys: &mut [&mut [f32]], dots: &[RowDot]) {
    const CHUNK: usize = 16;
    let q8k = dots.iter().any(|d| matches!(d, RowDot::Q8K(_)));
    let q8_1 = t > 1 || dots.iter().any(|d| matches!(d, RowDot::Q8_1(_)));
    with_acts(x, q8_1, q8k, |act, act_k| {
        let outs: Vec<OutPtr> = ys.iter_mut().map(|y| OutPtr(y.as_mut_ptr())).collect();
        let tasks: Vec<(usize, usize)> = ws
            .iter()
            .enumerate()
            .flat_map(|(i, w)| (0..w.rows).step_by(CHUNK).map(move |r| (i, r)))
            .collect();
        tasks.into_par_iter().for_each(|(i, r0)| {
            let (w, out) = (&ws[i], outs[i]);
            let nr = CHUNK.min(w.rows - r0);
            if t == 1 {
                for r in r0..r0 + nr {
                    // SAFETY: this task alone writes rows r0..r0+nr of this output.
                    unsafe { *out.at(r) = dots[i].run(w.row(r), act, act_k) };
                }
            } else {
                // SAFETY: this task alone writes columns r0..r0+nr of this Y (T, N).
                unsafe { qgemm::gemm_rows(w, r0, nr, act, t, out.at(r0), w.rows) };
            }
        });
    })
}

/// `ys[i] = X ws[i]^T` for matrices that share the input width: X (T, K) -> ys[i] (T, N_i).
pub fn matmul_many(ws: &[QMat], x: &[f32], t: usize, ys: &mut [&mut [f32]]) {
    assert_eq!(ws.len(), ys.len(), "one output per matrix");
    for (w, y) in ws.iter().zip(ys.iter()) {
        assert_eq!(x.len(), t * w.cols, "matmul input is (T, K)");
        assert_eq!(y.len(), t * w.rows, "matmul output is (T, N)");
    }
    if t == 1 {
        if let Some(dots) = ws
            .iter()
            .map(RowDot::for_matrix)
            .collect::<Option<Vec<_>>>()
        {
            return int8_many(ws, x, t, ys, &dots);
        }
    } else if ws.iter().all(|w| qgemm::supports(w.ty, w.cols)) {
        return int8_many(ws, x, t, ys, &[]);
    }
    for (w, y) in ws.iter().zip(ys.iter_mut()) {
        matmul(w, x, t, y);
    }
}

/// `Y = X W^T` on `X` as given, plus corrections `corr` (T, K/32) times the block mins.
fn matmul_exact(w: &QMat, x: &[f32], corr: &[f32], t: usize, y: &mut [f32]) {
    let (n, k) = (w.rows, w.cols);
    // The panel depends on N only, so results do not change with the thread count.
    let panel = (n / 8).clamp(16, 128);
    let out = OutPtr(y.as_mut_ptr());
    (0..n.div_ceil(panel)).into_par_iter().for_each(|p| {
        let r0 = p * panel;
        let rows = panel.min(n - r0);
        let nb = corr.len() / t;
        with_scratch(rows * (k + nb), |buf| {
            let (buf, mins) = buf.split_at_mut(rows * k);
            for r in 0..rows {
                w.dequantize_row(r0 + r, &mut buf[r * k..(r + 1) * k]);
            }
            // SAFETY: dst covers Y[0..t, r0..r0+rows] (row stride n), which lies inside y and is
            // written by this task only; lhs is X (T, K) row-major; rhs(kk, j) = buf[j*k + kk].
            unsafe { gemm_panel(out.at(r0), n, x, buf, t, rows, k, false) };
            if nb > 0 {
                for r in 0..rows {
                    block_mins(w.ty, w.row(r0 + r), &mut mins[r * nb..(r + 1) * nb]);
                }
                // SAFETY: as above, with lhs corr (T, K/32) and rhs the mins (rows, K/32).
                unsafe { gemm_panel(out.at(r0), n, corr, mins, t, rows, nb, true) };
            }
        })
    });
}

/// dst (T, rows; row stride `ldd`) (+)= lhs (T, K) * rhs^T, rhs (rows, K) row-major.
///
/// # Safety
/// `dst` must be valid for writes at `i * ldd + j` for i < t, j < rows, and no other thread
/// may touch those elements during the call.
#[allow(clippy::too_many_arguments)]
unsafe fn gemm_panel(
    dst: *mut f32,
    ldd: usize,
    lhs: &[f32],
    rhs: &[f32],
    t: usize,
    rows: usize,
    k: usize,
    accumulate: bool,
) {
    gemm::gemm(
        t,
        rows,
        k,
        dst,
        1,
        ldd as isize,
        accumulate,
        lhs.as_ptr(),
        1,
        k as isize,
        rhs.as_ptr(),
        k as isize,
        1,
        if accumulate { 1.0 } else { 0.0 },
        1.0,
        false,
        false,
        false,
        gemm::Parallelism::None,
    )
}

/// Reference: dequantize everything and multiply sequentially.
pub fn matmul_ref(w: &QMat, x: &[f32], t: usize) -> Vec<f32> {
    let (n, k) = (w.rows, w.cols);
    let mut corr = Vec::new();
    if has_min_term(w.ty) {
        q8_1_sum_corrections(x, &mut corr);
    }
    let nb = k / 32;
    let mut mins = vec![0f32; nb];
    let mut x = x.to_vec();
    round_for(w.ty, &mut x, k);
    let mut row = vec![0f32; k];
    let mut y = vec![0f32; t * n];
    for r in 0..n {
        w.dequantize_row(r, &mut row);
        for i in 0..t {
            y[i * n + r] = super::dot::dot_ref(&row, &x[i * k..(i + 1) * k]);
            if !corr.is_empty() {
                block_mins(w.ty, w.row(r), &mut mins);
                y[i * n + r] += super::dot::dot_ref(&mins, &corr[i * nb..(i + 1) * nb]);
            }
        }
    }
    y
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::quantize;

    use super::super::test_data as data;

    fn check(ty: GgmlType, n: usize, k: usize, t: usize) {
        let wf = data(n * k, 1);
        let rb = ty.row_bytes(k as u64).unwrap() as usize;
        let mut bytes = vec![0u8; rb * n];
        for r in 0..n {
            quantize(
                ty,
                &wf[r * k..(r + 1) * k],
                &mut bytes[r * rb..(r + 1) * rb],
            )
            .unwrap();
        }
        let w = QMat::new(ty, n, k, &bytes).unwrap();
        let x = data(t * k, 2);
        let mut y = vec![0f32; t * n];
        matmul(&w, &x, t, &mut y);
        let want = matmul_ref(&w, &x, t);
        for (i, (a, b)) in y.iter().zip(&want).enumerate() {
            assert!(
                (a - b).abs() <= 1e-3 * (1.0 + b.abs()),
                "{ty} n={n} k={k} t={t} i={i}: {a} vs {b}"
            );
        }
    }

    #[test]
    fn matvec_and_matmul_match_reference_on_edge_shapes() {
        for ty in [
            GgmlType::F32,
            GgmlType::Q8_0,
            GgmlType::Q4_1,
            GgmlType::Q4_0,
            GgmlType::Q5_0,
            GgmlType::Q5_1,
        ] {
            for (n, k, t) in [
                (1, 32, 1),
                (7, 576, 1),
                (33, 576, 3),
                (200, 64, 17),
                (129, 1536, 2),
            ] {
                check(ty, n, k, t);
            }
        }
        for ty in [GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K] {
            for (n, k, t) in [(1, 256, 1), (7, 512, 1), (129, 1536, 1), (19, 512, 5)] {
                check(ty, n, k, t);
            }
        }
    }

    #[test]
    fn integer_dots_only_for_whole_activation_blocks() {
        let w = |ty, cols| QMat {
            ty,
            rows: 0,
            cols,
            data: &[],
        };
        let fast = has_fast_q4_1();
        assert_eq!(RowDot::for_matrix(&w(GgmlType::Q4_K, 512)).is_some(), fast);
        assert_eq!(RowDot::for_matrix(&w(GgmlType::Q4_0, 96)).is_some(), fast);
        assert!(RowDot::for_matrix(&w(GgmlType::Q4_K, 576)).is_none());
        assert!(RowDot::for_matrix(&w(GgmlType::Q6_K, 96)).is_none());
        assert!(RowDot::for_matrix(&w(GgmlType::Q4_0, 48)).is_none());
        assert_eq!(RowDot::for_matrix(&w(GgmlType::Q5_0, 576)).is_some(), fast);
        assert!(RowDot::for_matrix(&w(GgmlType::Q5_1, 48)).is_none());
        assert!(RowDot::for_matrix(&w(GgmlType::IQ4_NL, 576)).is_none());
    }

    #[test]
    fn matmul_many_equals_separate_products() {
        let cases = [
            (GgmlType::Q4_1, 576),
            (GgmlType::Q8_0, 576),
            (GgmlType::Q4_0, 576),
            (GgmlType::Q5_0, 576),
            (GgmlType::Q5_1, 576),
            (GgmlType::F32, 576),
            (GgmlType::Q4_K, 512),
            (GgmlType::Q6_K, 512),
        ];
        for (ty, k) in cases {
            for t in [1, 5] {
                let mats: Vec<Vec<u8>> = [96, 33]
                    .iter()
                    .map(|&n| {
                        let wf = data(n * k, n as u64);
                        let rb = ty.row_bytes(k as u64).unwrap() as usize;
                        let mut b = vec![0u8; rb * n];
                        for r in 0..n {
                            quantize(ty, &wf[r * k..(r + 1) * k], &mut b[r * rb..(r + 1) * rb])
                                .unwrap();
                        }
                        b
                    })
                    .collect();
                let ws = [
                    QMat::new(ty, 96, k, &mats[0]).unwrap(),
                    QMat::new(ty, 33, k, &mats[1]).unwrap(),
                ];
                let x = data(t * k, 4);
                let (mut a, mut b) = (vec![0f32; t * 96], vec![0f32; t * 33]);
                matmul_many(&ws, &x, t, &mut [&mut a, &mut b]);
                let (mut a1, mut b1) = (vec![0f32; t * 96], vec![0f32; t * 33]);
                matmul(&ws[0], &x, t, &mut a1);
                matmul(&ws[1], &x, t, &mut b1);
                assert_eq!((a, b), (a1, b1), "{ty} t={t}");
            }
        }
    }

    #[test]
    fn new_rejects_wrong_sizes() {
        let bytes = vec![0u8; 20 * 18];
        assert!(matches!(
            QMat::new(GgmlType::Q4_1, 2, 576, &bytes),
            Err(QMatError::ByteLength { .. })
        ));
        assert!(matches!(
            QMat::new(GgmlType::Q4_K, 1, 576, &bytes),
            Err(QMatError::NotWholeBlocks { .. })
        ));
    }
}
