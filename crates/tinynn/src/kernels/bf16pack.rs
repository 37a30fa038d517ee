//! Packing f32 operands into the bf16 layouts of `bf16gemm` (and AMX's "VNNI" layout for B,
//! Intel SDM vol. 1 sec. 18.2): a u32 holds a pair of bf16 along k, low half first.
//!
//! - A (m, k) -> rows of kp/2 pairs, `[i * kp/2 + p] = (A(i, 2p), A(i, 2p+1))`.
//! - B (k, n) -> panels of NR columns, `[t][p * NR + c] = (B(2p, j), B(2p+1, j))`, j = NR t + c.
//!
//! The conversion is AVX512-BF16's `vcvtne2ps2bf16` (32 floats to 32 bf16, nearest even).
//! Where the operand runs along k (X and dY as A, W^T as B) its bf16 is already the pairs; where
//! it runs along the other axis (dY^T as A, W and X as B) two lines' bf16 are interleaved by a
//! word permute into pairs, and where the layout wants the other axis (dY^T's rows, W^T's
//! panels) 16 x 16 blocks of pairs are transposed in registers. Every entry of the pack is
//! written (zero past m, n and k), so a pack buffer is reused without clearing it.

use super::bf16gemm::{to_bf16, View, NR};
use super::bf16simd as simd;
use rayon::prelude::*;

/// Rows (or columns) of an operand handed to one task.
const TASK: usize = 32;

#[inline(always)]
fn pair(lo: f32, hi: f32) -> u32 {
    to_bf16(lo) as u32 | (to_bf16(hi) as u32) << 16
}

/// The pairs of line `i` of `v` along k, element (i, kk) at `v.ptr[i rs + kk cs]`: `out[p]`
/// for p < out.len(), zero past k. Any strides (the scalar path).
fn pairs_strided(v: View, i: usize, k: usize, out: &mut [u32]) {
    // SAFETY: (i, kk) is inside the operand for kk < k.
    let at = |kk: usize| if kk < k { unsafe { v.at(i, kk) } } else { 0.0 };
    for (p, d) in out.iter_mut().enumerate() {
        *d = pair(at(2 * p), at(2 * p + 1));
    }
}

/// Row r's pairs `x` into a chunk of A's pack, placed by `lay`.
fn put(chunk: &mut [u32], lay: simd::RowLayout, r: usize, x: &[u32]) {
    for p0 in (0..lay.w).step_by(16) {
        let n = 16.min(lay.w - p0);
        let at = lay.at(r, p0);
        chunk[at..at + n].copy_from_slice(&x[p0..p0 + n]);
    }
}

fn for_chunks(out: &mut [u32], len: usize, par: bool, f: impl Fn(usize, &mut [u32]) + Sync) {
    if par {
        out.par_chunks_mut(len)
            .enumerate()
            .for_each(|(c, x)| f(c, x));
    } else {
        out.chunks_mut(len).enumerate().for_each(|(c, x)| f(c, x));
    }
}

/// `out` resized to `len`, zeroing only what it grows by (the packers write every entry).
fn sized(out: &mut Vec<u32>, len: usize) {
    if out.len() < len {
        out.resize(len, 0);
    } else {
        out.truncate(len);
    }
}

/// A (m, k) into `out` as rows of kp/2 pairs, rows padded with zeros to a multiple of `pad`;
/// with `tiled` (AMX: pad and kp multiples of 32) as 16 x 16-pair tiles, see
/// `bf16simd::RowLayout`.
///
/// # Safety
/// The view must reach every (i, kk) with i < m, kk < k; only where `bf16gemm::available`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn pack_a(
    out: &mut Vec<u32>,
    a: View,
    m: usize,
    k: usize,
    kp: usize,
    pad: usize,
    tiled: bool,
    par: bool,
) {
    let kp2 = kp / 2;
    assert!(!tiled || (kp2.is_multiple_of(16) && TASK.is_multiple_of(16)));
    let lay = simd::RowLayout { w: kp2, tiled };
    sized(out, m.div_ceil(pad) * pad * kp2);
    for_chunks(out, TASK * kp2, par, |c, chunk| {
        #[allow(clippy::redundant_locals)]
        let a = a; // capture the whole View (Sync), not its raw pointer field
        let i0 = c * TASK;
        let rows = TASK.min(m.saturating_sub(i0));
        let mut row = vec![0u32; if a.cs == 1 || a.rs == 1 { 0 } else { kp2 }];
        if rows < chunk.len() / kp2 {
            let zero = vec![0u32; kp2];
            (rows..chunk.len() / kp2).for_each(|r| put(chunk, lay, r, &zero));
        }
        // SAFETY: rows i0..i0+rows are inside A for every kk < k (the caller's contract).
        unsafe {
            if a.cs == 1 {
                for r in 0..rows {
                    let ptr = a.ptr.offset((i0 + r) as isize * a.rs);
                    simd::pairs_along(ptr, k, chunk, r, lay);
                }
            } else if a.rs == 1 {
                // rows run across (dY^T): pairs of two k lines, transposed into rows
                simd::pairs_across_transposed(a.ptr.add(i0), a.cs, k, rows, chunk, lay);
            } else {
                for r in 0..rows {
                    pairs_strided(a, i0 + r, k, &mut row);
                    put(chunk, lay, r, &row);
                }
            }
        }
    });
}

/// B (k, n) into `out` as panels of NR columns of kp/2 pairs each.
///
/// # Safety
/// The view must reach every (kk, j) with kk < k, j < n; only where `bf16gemm::available`.
pub unsafe fn pack_b(out: &mut Vec<u32>, b: View, k: usize, n: usize, kp: usize, par: bool) {
    let kp2 = kp / 2;
    sized(out, n.div_ceil(NR) * kp2 * NR);
    for_chunks(out, kp2 * NR, par, |t, panel| {
        #[allow(clippy::redundant_locals)]
        let b = b; // capture the whole View (Sync), not its raw pointer field
        let (j0, cols) = (t * NR, NR.min(n - t * NR));
        // SAFETY: columns j0..j0+cols are inside B for every kk < k (the caller's contract).
        unsafe {
            if b.cs == 1 {
                // rows contiguous in j (W or X as the right operand): two rows make a group
                simd::pairs_across(b.ptr.add(j0), b.rs, k, cols, panel, NR);
            } else if b.rs == 1 {
                // columns contiguous in k (W^T): each column's pairs, transposed into groups
                simd::pairs_along_transposed(
                    b.ptr.offset(j0 as isize * b.cs),
                    b.cs,
                    k,
                    cols,
                    panel,
                );
            } else {
                let bt = View {
                    ptr: b.ptr,
                    rs: b.cs,
                    cs: b.rs,
                };
                let mut col = vec![0u32; kp2];
                for c in 0..NR {
                    if c < cols {
                        pairs_strided(bt, j0 + c, k, &mut col);
                    } else {
                        col.fill(0);
                    }
                    for (p, &x) in col.iter().enumerate() {
                        panel[p * NR + c] = x;
                    }
                }
            }
        }
    });
}
