//! Prefill's products on AMX (Intel SDM vol. 1 ch. 18; the idea of ggml's `ggml-cpu/amx`):
//! `Y (T, N) = X (T, K) W^T` for a quantized W, with X rounded to bf16 and packed once, and W
//! dequantized a chunk of rows at a time into bf16 panels that stay in L2 while every tile of
//! X passes them, summed in f32 by `tdpbf16ps` (`bf16gemm`'s AMX block).
//!
//! Only where the CPU has AMX-BF16 (and `TOY_NO_AMX` is unset), for batches of at least
//! [`AMX_BATCH`] tokens of k-quant weights (see [`applies`]): smaller batches (decode,
//! speculative checks) keep the integer row dots and their bits. bf16 keeps 8 bits of each
//! activation's mantissa, finer than the one 8-bit plane a 256-block (Q8_K) of the k-quants'
//! integer kernels.

use super::act_quant::vec_dot_type;
use super::bf16gemm::{Kernel, View, NR};
use super::bf16gemm_packed::PackedA;
use super::qmatmul::row_chunks;
use super::qmatmul::QMat;
use super::repack::Packed;
use super::repack_k::{PackedK, G};
use super::{with_scratch, OutPtr};
use crate::quant::{GgmlType, QK_K};
use rayon::prelude::*;

/// Fewer tokens than this stay on the integer kernels (decode's row dots below it).
pub const AMX_BATCH: usize = super::rowdot::ROW_DOT_BATCH;

/// Weight rows dequantized per task (two of `bf16gemm`'s 32-column panels).
const CHUNK: usize = 64;

/// Whether prefill's products for `ws` at `t` tokens run here: the k-quants (and IQ4_XS),
/// whose integer kernels see the activations as Q8_K (one 8-bit plane a 256-block, coarser
/// than bf16). The legacy types keep their integer kernels, whose two 8-bit planes
/// (`act_split`) are finer than bf16: on SmolLM2's Q4_1, KL to the f32-activation product was
/// 7.5e-7 there against 1.6e-4 in bf16; on the Coder's Q4_K_M 4.2e-3 (Q8_K) against 1.5e-4.
pub fn applies(ws: &[QMat], t: usize) -> bool {
    t >= AMX_BATCH
        && Kernel::best() == Some(Kernel::Amx)
        && ws
            .iter()
            .all(|w| vec_dot_type(w.ty) == Some(GgmlType::Q8_K) && w.cols.is_multiple_of(QK_K))
}

thread_local! {
    /// A task's dequantized rows (CHUNK x K f32).
    static ROWS: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
    /// A task's B panels when they are written straight from a repacked Q4_K matrix.
    static PANELS: std::cell::RefCell<Vec<u32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// `w`'s repacked Q4_K copy, when its rows can go straight into B panels
/// (`repack_k_bf16`; the CPU has the instructions where AMX is).
fn q4k<'a>(w: &QMat<'a>, kp: usize) -> Option<&'a PackedK> {
    match w.packed {
        Some(Packed::K(pk))
            if cfg!(target_arch = "x86_64") && pk.ty == GgmlType::Q4_K && kp == w.cols =>
        {
            Some(pk)
        }
        _ => None,
    }
}

/// Rows r0..r0 + rows (r0 a multiple of 16) of `pk` as B panels of `kp / 2` rows of NR pairs.
fn q4k_panels(pk: &PackedK, r0: usize, rows: usize, kp: usize, panels: &mut [u32]) {
    let len = kp / 2 * NR;
    #[cfg(target_arch = "x86_64")]
    for gi in 0..rows.div_ceil(G) {
        let c = gi * G;
        // SAFETY: AMX implies AVX-512BW and AVX512-BF16 (bf16amx::available); Q4_K checked.
        unsafe { pk.bf16_columns((r0 + c) / G, &mut panels[c / NR * len..], c % NR) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (pk, r0, rows, len, panels);
}

/// Row `r` of `w` in f32, from the repacked copy where there is one (the original may be
/// released).
fn dequantize_row(w: &QMat, r: usize, out: &mut [f32]) {
    match w.packed {
        Some(p) => p.dequantize_row(r, out),
        None => w.dequantize_row(r, out),
    }
}

/// `ys[i] = X ws[i]^T`, X (T, K) -> ys[i] (T, N_i); [`applies`] must hold and all ws share K.
pub fn many(ws: &[QMat], x: &[f32], t: usize, ys: &mut [&mut [f32]]) {
    assert!(
        applies(ws, t),
        "qmatmul_amx::many without AMX or under AMX_BATCH tokens"
    );
    let k = ws[0].cols;
    assert!(
        ws.iter().all(|w| w.cols == k),
        "the matrices share the input width"
    );
    assert_eq!(x.len(), t * k, "X is (T, K)");
    let xv = View {
        ptr: x.as_ptr(),
        rs: k as isize,
        cs: 1,
    };
    // SAFETY: X is (t, k) row-major; AMX is available (applies).
    let xa = unsafe { PackedA::new(Kernel::Amx, xv, t, k, true) };
    let kp = xa.kp();
    let outs: Vec<OutPtr> = ys
        .iter_mut()
        .zip(ws)
        .map(|(y, w)| {
            assert_eq!(y.len(), t * w.rows, "Y is (T, N)");
            OutPtr(y.as_mut_ptr())
        })
        .collect();
    row_chunks(ws, CHUNK).into_par_iter().for_each(|(i, r0)| {
        let w = &ws[i];
        let rows = CHUNK.min(w.rows - r0);
        let (dst, rs) = (outs[i].at(r0), w.rows as isize);
        // SAFETY (both products): columns r0..r0 + rows of output i (T rows of N_i) are this
        // task's alone, and the panels or rows hold `rows` columns of K.
        if let Some(pk) = q4k(w, kp) {
            with_scratch(&PANELS, rows.div_ceil(NR) * kp / 2 * NR, |p| {
                q4k_panels(pk, r0, rows, kp, p);
                unsafe { xa.product_packed(rows, dst, rs, p) }
            });
            return;
        }
        with_scratch(&ROWS, rows * k, |buf| {
            for (r, row) in buf.chunks_exact_mut(k).enumerate() {
                dequantize_row(w, r0 + r, row);
            }
            // B (K, rows): B(kk, j) = W(r0 + j, kk)
            let b = View {
                ptr: buf.as_ptr(),
                rs: 1,
                cs: k as isize,
            };
            unsafe { xa.product(rows, dst, rs, b) }
        });
    });
}

#[cfg(test)]
#[path = "qmatmul_amx_tests.rs"]
mod tests;
