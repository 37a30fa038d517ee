//! Decode's integer row dots, chosen per weight type (`qdot`, `qdot_q5`, `qdot_k`), and the
//! shared driver of the integer products: x quantized once to the 8-bit form the weight type
//! reads (two planes for the legacy types, `act_split`; Q8_K for the k-quants), then one
//! parallel loop over the rows of one or several matrices (fused q/k/v, gate/up), with
//! `qgemm`'s tiles for prefill.

use super::act_split::SplitAct;
use super::f16dot::{dot_bf16, dot_f16, has_fast_f16};
use super::qdot::has_fast_q4_1;
use super::qdot_k::{dot_q4_k, dot_q5_k, dot_q6_k, has_fast_k_quants, Q8KAct};
use super::qdot_k_x4::{many_k, q8k_rows, DotMany, DotOne};
use super::qdot_split::{coarse_dot, split_dots, CoarseDot, SplitDots};
use super::qmatmul::row_chunks;
use super::repack::Packed;
use super::{qgemm, OutPtr, QMat};
use crate::quant::{GgmlType, QK_K};
use rayon::prelude::*;
use std::cell::RefCell;
use std::ops::Range;

/// Decode's integer row dot for a weight type: which 8-bit form of x it reads, and the kernel.
#[derive(Clone, Copy)]
pub(super) enum RowDot {
    /// The legacy types against both activation planes of one token or several (`qdot_split`).
    /// The legacy types: both planes, and the coarse plane alone (`coarse_activations`).
    Q8_1(SplitDots, CoarseDot),
    /// The k-quants against Q8_K: decode's row dot, and a many-token one for small batches.
    Q8K(DotOne, Option<DotMany>),
    /// f16 weights against x rounded to f16 (ggml's F16 `vec_dot_type`).
    F16,
    /// bf16 weights against x rounded to bf16 (ggml's BF16 `vec_dot_type`).
    BF16,
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
            Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 if q8_1 => {
                Some(Self::Q8_1(split_dots(w.ty)?, coarse_dot(w.ty)?))
            }
            Q4_K if q8k => Some(Self::Q8K(dot_q4_k, many_k(GgmlType::Q4_K))),
            Q5_K if q8k => Some(Self::Q8K(dot_q5_k, None)),
            Q6_K if q8k => Some(Self::Q8K(dot_q6_k, many_k(GgmlType::Q6_K))),
            F16 if has_fast_f16() => Some(Self::F16),
            BF16 if has_fast_f16() => Some(Self::BF16),
            _ => None,
        }
    }

    fn run(self, row: &[u8], acts: &Acts) -> f32 {
        match self {
            Self::Q8_1(_, c) if acts.coarse => c(row, &acts.split.hi.row()),
            Self::Q8_1(f, _) => {
                let mut out = [0f32];
                f(
                    row,
                    &[acts.split.hi.row()],
                    &[acts.split.lo.row()],
                    &mut out,
                );
                out[0]
            }
            Self::Q8K(f, _) => {
                // x's planes, summed in plane order (as a batch's `q8k_rows` sums them)
                let nb = acts.q8k.d.len() / acts.q8k_planes;
                (0..acts.q8k_planes).fold(0.0, |y, p| y + f(row, &acts.q8k.token(p, nb)))
            }
            Self::F16 => dot_f16(row, &acts.f16),
            Self::BF16 => dot_bf16(row, &acts.bf16),
        }
    }
}

/// x in the forms the kernels read: two 8-bit planes (the legacy types, `act_split`), Q8_K
/// blocks, f16-rounded values.
#[derive(Default)]
pub(super) struct Acts {
    pub(super) split: SplitAct,
    /// Q8_K blocks of each token, in `q8k_planes` planes: 2 (tokens 2t and 2t + 1 are token
    /// t's planes, `Q8KAct::quantize_planes`) for decode and batches under `ROW_DOT_BATCH`
    /// tokens, 1 for prefill's batches and inside `coarse_activations`.
    pub(super) q8k: Q8KAct,
    pub(super) q8k_planes: usize,
    /// The second plane's f32 input, on the way to `q8k`.
    q8k_scratch: Vec<f32>,
    pub(super) f16: Vec<f32>,
    /// x rounded to bf16.
    pub(super) bf16: Vec<f32>,
    /// x as f16, on the way to `f16`.
    pub(super) f16_bits: Vec<half::f16>,
    /// The legacy types' row dots read the coarse plane alone (`coarse_activations`).
    pub(super) coarse: bool,
}

thread_local! {
    static COARSE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with the legacy types' decode row dots (and batches under `ROW_DOT_BATCH`), and
/// their AVX2 interleaved kernels (`repack_avx2`), on the
/// activations' coarse 8-bit plane alone, as ggml's one Q8 plane: half their integer work, at
/// ggml's activation rounding instead of toy's finer two planes. For a speculative draft,
/// whose rounding only changes how many of its tokens the target keeps. Products started on
/// this thread inside `f` are affected, whichever threads then share their rows.
pub fn coarse_activations<R>(f: impl FnOnce() -> R) -> R {
    let was = COARSE.replace(true);
    let r = f();
    COARSE.set(was);
    r
}

thread_local! {
    static ACTS: RefCell<Acts> = RefCell::new(Acts::default());
}

/// Which forms of x a product reads.
#[derive(Clone, Copy, Default)]
struct Forms {
    q8k: bool,
    f16: bool,
    bf16: bool,
    split: bool,
}

impl Forms {
    const NONE: Forms = Forms {
        q8k: false,
        f16: false,
        bf16: false,
        split: false,
    };
    const Q8K: Forms = Forms {
        q8k: true,
        ..Forms::NONE
    };
    const F16: Forms = Forms {
        f16: true,
        ..Forms::NONE
    };
    const SPLIT: Forms = Forms {
        split: true,
        ..Forms::NONE
    };

    /// The forms that the row dots `dots` read.
    fn of(dots: &[RowDot]) -> Forms {
        dots.iter().fold(Forms::default(), |f, d| {
            f.with(match d {
                RowDot::Q8_1(..) => Forms::SPLIT,
                RowDot::Q8K(..) => Forms::Q8K,
                RowDot::F16 => Forms::F16,
                RowDot::BF16 => Forms {
                    bf16: true,
                    ..Forms::NONE
                },
            })
        })
    }

    /// Both sets of forms.
    fn with(self, o: Forms) -> Forms {
        Forms {
            q8k: self.q8k || o.q8k,
            f16: self.f16 || o.f16,
            bf16: self.bf16 || o.bf16,
            split: self.split || o.split,
        }
    }
}

/// Run `f` on x converted to each of `forms`; the other forms are stale. A thread already
/// inside a product (rayon lets a thread that waits in one product run another caller's,
/// e.g. two models training in one process) converts into a fresh buffer instead.
/// `k` is x's row width (the products' K).
fn with_acts<R>(x: &[f32], k: usize, forms: Forms, f: impl FnOnce(&Acts) -> R) -> R {
    ACTS.with(|cell| match cell.try_borrow_mut() {
        Ok(mut acts) => convert_then(&mut acts, x, k, forms, f),
        Err(_) => convert_then(&mut Acts::default(), x, k, forms, f),
    })
}

fn convert_then<R>(
    acts: &mut Acts,
    x: &[f32],
    k: usize,
    forms: Forms,
    f: impl FnOnce(&Acts) -> R,
) -> R {
    {
        acts.coarse = COARSE.get();
        if forms.q8k {
            // a prefill batch keeps ggml's one plane: two would double its integer work (the
            // 1.5B Coder's pp256 halved); decode and small batches (memory-bound) take both
            if acts.coarse || x.len() / k.max(1) >= ROW_DOT_BATCH {
                acts.q8k.quantize(x);
                acts.q8k_planes = 1;
            } else {
                let Acts {
                    q8k, q8k_scratch, ..
                } = &mut *acts;
                q8k.quantize_planes(x, k, q8k_scratch);
                acts.q8k_planes = 2;
            }
        }
        if forms.split {
            acts.split.quantize(x);
        }
        if forms.bf16 {
            acts.bf16.clear();
            acts.bf16
                .extend(x.iter().map(|v| half::bf16::from_f32(*v).to_f32()));
        }
        if forms.f16 {
            // through an f16 buffer: half's slice conversions run 8 lanes at a time (F16C)
            use half::slice::HalfFloatSliceExt;
            let Acts { f16, f16_bits, .. } = &mut *acts;
            f16_bits.resize(x.len(), half::f16::ZERO);
            f16_bits.convert_from_f32_slice(x);
            f16.resize(x.len(), 0.0);
            f16_bits.convert_to_f32_slice(f16);
        }
        f(acts)
    }
}

/// Batches of fewer than this many tokens through legacy-type matrices that are not repacked
/// (Q5_0 and Q5_1 on AVX2), and through k-quant ones, take decode's row dots: the sequences of a
/// decode step, and prompts and chunks under 64 tokens, then get the bits of token-by-token
/// decoding whatever they are
/// batched with, so a seed repeats its sample (prefill's f32 path and the interleaved tiles
/// sum in other orders). 64, where ggml's attention changes regime too
/// (`toy::infer::kv_cache::f16_attention`).
pub(super) const ROW_DOT_BATCH: usize = 64;

/// Decode's product: convert x once, then one row dot per output.
pub(super) fn matvec_int8(w: &QMat, x: &[f32], y: &mut [f32], dot: RowDot) {
    with_acts(x, w.cols, Forms::of(&[dot]), |acts| {
        let chunk = (w.rows / (rayon::current_num_threads() * 4)).clamp(8, 256);
        let out = OutPtr(y.as_mut_ptr());
        crate::team::par_for(w.rows.div_ceil(chunk), |c| {
            for r in c * chunk..((c + 1) * chunk).min(w.rows) {
                // SAFETY: chunk c alone writes rows c*chunk.. of y (N).
                unsafe { *out.at(r) = dot.run(w.row(r), acts) };
            }
        });
    })
}

/// Several products of the same X (fused q/k/v, gate/up): X is quantized once (per 8-bit
/// form), and one parallel loop covers the rows of every matrix, so there is one
/// synchronisation, not three. With `dots` (one per matrix: decode, or a small batch under
/// `ROW_DOT_BATCH`) each token takes the row dots, so its result does not
/// depend on the batch; without, the tiles.
pub(super) fn int8_many(ws: &[QMat], x: &[f32], t: usize, ys: &mut [&mut [f32]], dots: &[RowDot]) {
    const CHUNK: usize = 16;
    // prefill's tiles read the two planes
    let tiles = if t > 1 && dots.is_empty() {
        Forms::SPLIT
    } else {
        Forms::default()
    };
    with_acts(x, ws[0].cols, Forms::of(dots).with(tiles), |acts| {
        let outs: Vec<OutPtr> = ys.iter_mut().map(|y| OutPtr(y.as_mut_ptr())).collect();
        // each token's two planes, for a small batch on the row dots (X is (T, K) for all ws)
        let nb = x.len() / t.max(1) / 32;
        let (h, l): (Vec<_>, Vec<_>) =
            if t > 1 && dots.iter().any(|d| matches!(d, RowDot::Q8_1(..))) {
                (0..t)
                    .map(|j| (acts.split.hi.token(j, nb), acts.split.lo.token(j, nb)))
                    .unzip()
            } else {
                (Vec::new(), Vec::new())
            };
        // and each token's Q8_K blocks (its planes in turn), for a small batch of k-quants
        let planes = acts.q8k_planes;
        let kt: Vec<_> = if t > 1 && dots.iter().any(|d| matches!(d, RowDot::Q8K(..))) {
            let nbk = x.len() / t / QK_K;
            (0..t * planes).map(|j| acts.q8k.token(j, nbk)).collect()
        } else {
            Vec::new()
        };
        let tasks: Vec<(usize, usize)> = ws
            .iter()
            .enumerate()
            .flat_map(|(i, w)| (0..w.rows).step_by(CHUNK).map(move |r| (i, r)))
            .collect();
        crate::team::par_for(tasks.len(), |k| {
            let (i, r0) = tasks[k];
            let (w, out) = (&ws[i], outs[i]);
            let nr = CHUNK.min(w.rows - r0);
            if t == 1 {
                for r in r0..r0 + nr {
                    // SAFETY: this task alone writes rows r0..r0+nr of this output.
                    unsafe { *out.at(r) = dots[i].run(w.row(r), acts) };
                }
            } else if let Some(RowDot::Q8K(f, f4)) = dots.get(i).copied() {
                // a batch of k-quant products on decode's row dots
                q8k_rows(
                    |r| w.row(r),
                    r0..r0 + nr,
                    &kt,
                    (f, f4),
                    // SAFETY: this task alone writes columns r0..r0+nr of this Y (T, N); a
                    // token's first plane comes first (`q8k_rows` goes up the tokens)
                    |j, r, y| unsafe {
                        let o = out.at(j / planes * w.rows + r);
                        *o = if j % planes == 0 { y } else { *o + y };
                    },
                );
            } else if let RowDot::Q8_1(f, c) = dots.get(i).copied().unwrap_or(RowDot::F16) {
                // a small batch (t < ROW_DOT_BATCH): each token on decode's row dot
                let mut ys = [0f32; ROW_DOT_BATCH];
                let ys = &mut ys[..t];
                for r in r0..r0 + nr {
                    if acts.coarse {
                        ys.iter_mut().zip(&h).for_each(|(y, h)| *y = c(w.row(r), h));
                    } else {
                        f(w.row(r), &h, &l, ys);
                    }
                    for (j, y) in ys.iter().enumerate() {
                        // SAFETY: this task alone writes columns r0..r0+nr of this Y (T, N).
                        unsafe { *out.at(j * w.rows + r) = *y };
                    }
                }
            } else {
                // SAFETY: this task alone writes columns r0..r0+nr of this Y (T, N).
                unsafe { qgemm::gemm_rows(w, r0, nr, &acts.split, t, out.at(r0), w.rows) };
            }
        });
    })
}

/// Products on repacked weights (every `ws[i].packed` is set): X converted once for the
/// kernel of the weights' type, one parallel loop over tiles of every matrix.
pub(super) fn packed_many(ws: &[QMat], x: &[f32], t: usize, ys: &mut [&mut [f32]]) {
    let all = |f: fn(&Packed) -> bool| ws.iter().all(|w| w.packed.is_some_and(f));
    if all(|p| matches!(p, Packed::Int8(_))) {
        packed_int8_many(ws, x, t, ys)
    } else if all(|p| matches!(p, Packed::F16(_))) {
        packed_f16_many(ws, x, t, ys)
    } else if all(|p| matches!(p, Packed::K(_) | Packed::Q6K(_))) {
        packed_k_many(ws, x, t, ys)
    } else {
        for (w, y) in ws.iter().zip(ys.iter_mut()) {
            packed_many(&[*w], x, t, &mut [&mut **y]);
        }
    }
}

/// Run `f(i, g0..g1, t0..t1)` in parallel over tiles of `per_task` groups of 16 rows and
/// `tokens_per_task` tokens of every matrix `ws[i]`: each tile writes its own part of output i.
fn par_tiles(
    ws: &[QMat],
    t: usize,
    per_task: usize,
    tokens_per_task: usize,
    f: impl Fn(usize, Range<usize>, Range<usize>) + Sync,
) {
    let tasks: Vec<(usize, usize, usize)> = ws
        .iter()
        .enumerate()
        .flat_map(|(i, w)| {
            let groups = w.packed.map_or(0, |p| p.groups());
            (0..groups)
                .step_by(per_task)
                .flat_map(move |g| (0..t).step_by(tokens_per_task).map(move |t0| (i, g, t0)))
        })
        .collect();
    crate::team::par_for(tasks.len(), |k| {
        let (i, g0, t0) = tasks[k];
        let groups = ws[i].packed.map_or(0, |p| p.groups());
        f(
            i,
            g0..(g0 + per_task).min(groups),
            t0..(t0 + tokens_per_task).min(t),
        )
    });
}

/// Products on repacked F16 weights: X rounded to f16 once (as ggml's F16 products see it);
/// tiles over tokens as well as rows.
fn packed_f16_many(ws: &[QMat], x: &[f32], t: usize, ys: &mut [&mut [f32]]) {
    use super::repack_f16::{GROUPS_PER_TASK, TOKENS_PER_TASK};
    // one token tile: nothing to keep in L2, so small tasks balance the threads better
    let per_task = if t <= 8 { 1 } else { GROUPS_PER_TASK };
    with_acts(x, ws[0].cols, Forms::F16, |acts| {
        let outs: Vec<OutPtr> = ys.iter_mut().map(|y| OutPtr(y.as_mut_ptr())).collect();
        par_tiles(ws, t, per_task, TOKENS_PER_TASK, |i, g, tokens| {
            let Some(Packed::F16(p)) = ws[i].packed else {
                return;
            };
            // SAFETY: packs are only made where the kernel runs; this tile alone writes rows
            // of groups g of tokens `tokens` of output i (T, N_i).
            unsafe { p.gemm_groups(g.start, g.end, &acts.f16, tokens, outs[i].at(0), ws[i].rows) };
        });
    })
}

/// Products on repacked Q4_K and Q6_K weights: X quantized to Q8_K once; tiles of two groups over
/// all tokens (one group a task in decode).
fn packed_k_many(ws: &[QMat], x: &[f32], t: usize, ys: &mut [&mut [f32]]) {
    // decode: one group a task, so that many threads each get a share of a small matrix
    // (`team` hands them out in chunks)
    let per_task = if t == 1 { 1 } else { 2 };
    with_acts(x, ws[0].cols, Forms::Q8K, |acts| {
        let outs: Vec<OutPtr> = ys.iter_mut().map(|y| OutPtr(y.as_mut_ptr())).collect();
        par_tiles(ws, t, per_task, t.max(1), |i, g, tokens| {
            let (out, ldo) = (outs[i].at(0), ws[i].rows);
            let view = match ws[i].packed {
                Some(Packed::K(p)) => p.view(),
                Some(Packed::Q6K(p)) => p.view(),
                _ => return,
            };
            // SAFETY: packs are only made where the kernel runs; this tile alone writes the
            // rows of groups g of output i (T, N_i).
            unsafe { view.gemm_groups(g, &acts.q8k, acts.q8k_planes, tokens, out, ldo) };
        });
    })
}

/// Prefill's product for Q5_K and Q6_K matrices held as in the file (they decode faster on
/// their row dots than packed): X quantized to Q8_K once, then tasks of 32 rows that pack
/// their rows into a scratch once for all T tokens (`repack_k::prefill_rows`,
/// `repack_q6k::prefill_rows`).
pub(super) fn k_tiles_many(ws: &[QMat], x: &[f32], t: usize, ys: &mut [&mut [f32]]) {
    const ROWS: usize = 32;
    with_acts(x, ws[0].cols, Forms::Q8K, |acts| {
        let outs: Vec<OutPtr> = ys.iter_mut().map(|y| OutPtr(y.as_mut_ptr())).collect();
        row_chunks(ws, ROWS).into_par_iter().for_each(|(i, r0)| {
            let w = &ws[i];
            let (rows, out) = (r0..(r0 + ROWS).min(w.rows), outs[i].at(0));
            // SAFETY: `k_tiles` checked the kernel; this task alone writes these rows of
            // output i (T, N_i).
            unsafe {
                if w.ty == GgmlType::Q6_K {
                    super::repack_q6k::prefill_rows(
                        w,
                        rows,
                        (&acts.q8k, acts.q8k_planes),
                        t,
                        out,
                        w.rows,
                    )
                } else {
                    super::repack_k::prefill_rows(
                        w,
                        rows,
                        (&acts.q8k, acts.q8k_planes),
                        t,
                        out,
                        w.rows,
                    )
                }
            }
        });
    })
}

/// Whether prefill takes `k_tiles_many` for `w`.
pub(super) fn k_tiles(w: &QMat) -> bool {
    w.cols.is_multiple_of(QK_K)
        && match w.ty {
            GgmlType::Q5_K => super::repack_k::has_kernel(GgmlType::Q5_K),
            GgmlType::Q6_K => super::repack_q6k::has_kernel(),
            _ => false,
        }
}

/// Products on repacked 8-bit-kernel weights: X quantized once into two 8-bit planes
/// (`act_split`); tiles of two groups over all tokens (one group a task in decode).
fn packed_int8_many(ws: &[QMat], x: &[f32], t: usize, ys: &mut [&mut [f32]]) {
    with_acts(x, ws[0].cols, Forms::SPLIT, |acts| {
        let outs: Vec<OutPtr> = ys.iter_mut().map(|y| OutPtr(y.as_mut_ptr())).collect();
        let per_task = if t == 1 { 1 } else { 2 };
        par_tiles(ws, t, per_task, t.max(1), |i, g, _| {
            let Some(Packed::Int8(p)) = ws[i].packed else {
                return;
            };
            // SAFETY: the packed kernel exists on this CPU (packs are only made then); this
            // tile alone writes the rows of groups g of output i (T, N_i).
            unsafe {
                let (split, out, ldo) = (&acts.split, outs[i].at(0), ws[i].rows);
                if acts.coarse {
                    p.gemm_groups::<true>(g.start, g.end, split, t, out, ldo)
                } else {
                    p.gemm_groups::<false>(g.start, g.end, split, t, out, ldo)
                }
            };
        });
    })
}
