//! Packing f32 operands into the bf16 layouts of `bf16gemm` (and AMX's "VNNI" layout for B,
//! Intel SDM vol. 1 sec. 18.2): a u32 holds a pair of bf16 along k, low half first.
//!
//! - A (m, k) -> rows of kp/2 pairs, `[i * kp/2 + p] = (A(i, 2p), A(i, 2p+1))`.
//! - B (k, n) -> panels of NR columns, `[t][p * NR + c] = (B(2p, j), B(2p+1, j))`, j = NR t + c.
//!
//! Each layout is a conversion where the operand is contiguous along the pairs, or a
//! conversion into pairs along the other axis and a blocked u32 transpose where it is not
//! (dY^T for the weight gradient, W^T for the forward), so every pass reads and writes whole
//! cache lines. Zero past m, n and k.

use super::bf16gemm::{to_bf16, View, NR};
use rayon::prelude::*;

/// Rows (or columns) of an operand handed to one task.
const TASK: usize = 32;

#[inline(always)]
fn pair(lo: f32, hi: f32) -> u32 {
    to_bf16(lo) as u32 | (to_bf16(hi) as u32) << 16
}

/// `dst[r * ds + c] = src[c * ss + r]` for r < rows, c < cols, in 16 x 16 blocks.
///
/// # Safety
/// Only where `bf16gemm::available` (AVX-512 is there).
#[cfg_attr(
    target_arch = "x86_64",
    target_feature(enable = "avx512f,avx512bw,avx512vl,avx2")
)]
unsafe fn transpose(src: &[u32], ss: usize, dst: &mut [u32], ds: usize, rows: usize, cols: usize) {
    for r0 in (0..rows).step_by(16) {
        for c0 in (0..cols).step_by(16) {
            for r in r0..(r0 + 16).min(rows) {
                for c in c0..(c0 + 16).min(cols) {
                    dst[r * ds + c] = src[c * ss + r];
                }
            }
        }
    }
}

/// Pairs along k of line `line` of an operand whose k runs contiguously: `out[p]` for
/// p < kp/2 from the k elements at `ptr`.
///
/// # Safety
/// `ptr` must hold k elements; only where `bf16gemm::available`.
#[cfg_attr(
    target_arch = "x86_64",
    target_feature(enable = "avx512f,avx512bw,avx512vl,avx2")
)]
unsafe fn pairs_contiguous(ptr: *const f32, k: usize, out: &mut [u32]) {
    let src = std::slice::from_raw_parts(ptr, k);
    let mut it = src.chunks_exact(2);
    for (d, p) in out.iter_mut().zip(&mut it) {
        *d = pair(p[0], p[1]);
    }
    if let [x] = it.remainder() {
        out[k / 2] = pair(*x, 0.0);
    }
}

/// Pairs along k of lines l0..l0+n of an operand whose lines run contiguously (element
/// (l, kk) at `kk * ks + l`): `out[p * n + l]`.
///
/// # Safety
/// Rows kk < k must hold the n elements from l0; only where `bf16gemm::available`.
#[cfg_attr(
    target_arch = "x86_64",
    target_feature(enable = "avx512f,avx512bw,avx512vl,avx2")
)]
unsafe fn pairs_across(v: View, ks: isize, l0: usize, n: usize, k: usize, out: &mut [u32]) {
    let row = |kk: usize| std::slice::from_raw_parts(v.ptr.offset(kk as isize * ks).add(l0), n);
    for p in 0..k.div_ceil(2) {
        let g = &mut out[p * n..(p + 1) * n];
        let lo = row(2 * p);
        if 2 * p + 1 < k {
            let hi = row(2 * p + 1);
            for ((d, &x), &y) in g.iter_mut().zip(lo).zip(hi) {
                *d = pair(x, y);
            }
        } else {
            g.iter_mut().zip(lo).for_each(|(d, &x)| *d = pair(x, 0.0));
        }
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

/// A (m, k) as rows of kp/2 pairs, rows padded with zeros to a multiple of `pad`.
pub fn pack_a(a: View, m: usize, k: usize, kp: usize, pad: usize, par: bool) -> Vec<u32> {
    let kp2 = kp / 2;
    let mut out = vec![0u32; m.div_ceil(pad) * pad * kp2];
    for_chunks(&mut out, TASK * kp2, par, |c, chunk| {
        let i0 = c * TASK;
        let rows = TASK.min(m.saturating_sub(i0));
        if rows == 0 {
            return;
        }
        if a.cs == 1 {
            for r in 0..rows {
                // SAFETY: row i0 + r < m has k contiguous elements.
                unsafe {
                    let ptr = a.ptr.offset((i0 + r) as isize * a.rs);
                    pairs_contiguous(ptr, k, &mut chunk[r * kp2..(r + 1) * kp2]);
                }
            }
        } else if a.rs == 1 {
            // rows run across (dY^T): pairs (p, r), then the transpose into rows
            let mut tmp = vec![0u32; kp2 * rows];
            // SAFETY: A's rows i0..i0+rows are inside it for every k.
            unsafe { pairs_across(a, a.cs, i0, rows, k, &mut tmp) };
            // SAFETY: pack_a runs only where bf16gemm::available.
            unsafe { transpose(&tmp, rows, chunk, kp2, rows, kp2) };
        } else {
            for r in 0..rows {
                for p in 0..k.div_ceil(2) {
                    // SAFETY: (i0 + r, kk) is inside A for kk < k.
                    let at = |kk: usize| {
                        if kk < k {
                            unsafe { a.at(i0 + r, kk) }
                        } else {
                            0.0
                        }
                    };
                    chunk[r * kp2 + p] = pair(at(2 * p), at(2 * p + 1));
                }
            }
        }
    });
    out
}

/// B (k, n) as panels of NR columns of kp/2 pairs each.
pub fn pack_b(b: View, k: usize, n: usize, kp: usize, par: bool) -> Vec<u32> {
    let kp2 = kp / 2;
    let mut out = vec![0u32; n.div_ceil(NR) * kp2 * NR];
    for_chunks(&mut out, kp2 * NR, par, |t, panel| {
        let (j0, cols) = (t * NR, NR.min(n - t * NR));
        if b.cs == 1 {
            // rows contiguous in j (W or X as the right operand): two rows make a group
            let mut tmp = vec![0u32; kp2 * cols];
            // SAFETY: B's columns j0..j0+cols are inside it for every k.
            unsafe { pairs_across(b, b.rs, j0, cols, k, &mut tmp) };
            for p in 0..kp2 {
                panel[p * NR..p * NR + cols].copy_from_slice(&tmp[p * cols..(p + 1) * cols]);
            }
        } else if b.rs == 1 {
            // columns contiguous in k (W^T): pairs per column, then the transpose into groups
            let mut tmp = vec![0u32; cols * kp2];
            for c in 0..cols {
                // SAFETY: column j0 + c has k contiguous elements.
                unsafe {
                    let ptr = b.ptr.offset((j0 + c) as isize * b.cs);
                    pairs_contiguous(ptr, k, &mut tmp[c * kp2..(c + 1) * kp2]);
                }
            }
            // SAFETY: pack_b runs only where bf16gemm::available.
            unsafe { transpose(&tmp, kp2, panel, NR, kp2, cols) };
        } else {
            for c in 0..cols {
                for p in 0..k.div_ceil(2) {
                    // SAFETY: (kk, j0 + c) is inside B for kk < k.
                    let at = |kk: usize| {
                        if kk < k {
                            unsafe { b.at(kk, j0 + c) }
                        } else {
                            0.0
                        }
                    };
                    panel[p * NR + c] = pair(at(2 * p), at(2 * p + 1));
                }
            }
        }
    });
    out
}
