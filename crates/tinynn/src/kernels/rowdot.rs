//! Decode's integer row dots, chosen per weight type (`qdot`, `qdot_q5`, `qdot_k`), and the
//! shared driver of the integer products: x quantized once to the 8-bit form ggml pairs with
//! the weight type (`vec_dot_type`), then one parallel loop over the rows of one or several
//! matrices (fused q/k/v, gate/up), with `qgemm`'s tiles for prefill.

use super::qdot::{dot_q4_0, dot_q4_1, dot_q8_0, has_fast_q4_1, Q8_1Act, Q8_1Row};
use super::qdot_k::{dot_q4_k, dot_q5_k, dot_q6_k, has_fast_k_quants, Q8KAct, Q8KRow};
use super::qdot_q5::{dot_q5_0, dot_q5_1};
use super::{qgemm, OutPtr, QMat};
use crate::quant::{GgmlType, QK_K};
use rayon::prelude::*;
use std::cell::RefCell;

/// Decode's integer row dot for a weight type: which 8-bit form of x it reads, and the kernel.
#[derive(Clone, Copy)]
pub(super) enum RowDot {
    Q8_1(fn(&[u8], &Q8_1Row) -> f32),
    Q8K(fn(&[u8], &Q8KRow) -> f32),
}

impl RowDot {
    /// The kernel for `w`, if this CPU has one for its type and width (K must be whole blocks
    /// of the activation type; other shapes take the dequantize + f32 path).
    pub(super) fn for_matrix(w: &QMat) -> Option<Self> {
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
pub(super) fn matvec_int8(w: &QMat, x: &[f32], y: &mut [f32], dot: RowDot) {
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

/// Several products of the same X (fused q/k/v, gate/up): X is quantized once (per 8-bit
/// form), and one parallel loop covers the rows of every matrix, so there is one
/// synchronisation, not three. Decode (T = 1) takes `dots`, one per matrix; prefill the tiles.
pub(super) fn int8_many(ws: &[QMat], x: &[f32], t: usize, ys: &mut [&mut [f32]], dots: &[RowDot]) {
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
