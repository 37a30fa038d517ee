//! Q6_K rows repacked (at load on AVX-512 VNNI, for decode and batches alike; per prefill call,
//! in a scratch, on AVX2) for the output-stationary AVX-512 VNNI
//! kernel of `repack_k` (and its AVX2 twin, `repack_q6k_avx2`, same bits)
//! (16 weight rows in the 16 lanes of a vector), for ggml's `block_q6_K` (`ggml-common.h`):
//! the 6-bit values are rebuilt from their low nibbles and 2 high bits as they are loaded,
//! enter `vpdpbusd` unsigned (0..63) against Q8_K activations, and each 16-element sub-block
//! takes 32 times its activation sum (`bsums`) off before its signed scale multiplies it, the
//! maths of `ggml_vec_dot_q6_K_q8_K`.
//!
//! Layout per group of 16 rows (a short last group is padded with zero rows) and 256-block:
//! the 16 rows' d as f16 (32 bytes); the 16 sub-block scales, scale s of the 16 rows together
//! (256 bytes); for each half n of the block, each 32-byte run h of its 64 bytes of low
//! nibbles and c in 0..8 the bytes 4c..4c+4 of that run of each row (64 bytes: low nibbles
//! are elements 128n+32h+4c.., high ones 128n+64+32h+4c..); then for each n and c the bytes
//! 4c..4c+4 of each row's 32 bytes of high bits of that half (64 bytes; bits 2k, 2k+1 belong
//! to the element of quarter k). 3360 bytes, as the original's 16 x 210.

use super::arena::{PackArena, PackBuf};
use super::group_tiles::interleave4;
use super::qdot_k::Q8KAct;
use super::repack_k::KGroups;
use super::QMat;
use crate::quant::{GgmlType, QK_K};

/// Rows per group.
pub(super) const G: usize = 16;
/// Offsets in a group-block: scales, low nibbles, high bits; its size.
pub(super) const SCALES: usize = 32;
pub(super) const QL: usize = SCALES + 16 * G;
pub(super) const QH: usize = QL + 4 * 8 * 64;
pub(super) const GB: usize = QH + 2 * 8 * 64;
/// Tokens per tile (as `repack_k`'s: up to 12 on the VNNI kernel, fours on the AVX2 one).
pub(super) const TT: usize = super::repack_k::TT;
/// Tokens per tile of the AVX2 kernel.
pub(super) const AVX2_TT: usize = super::repack_k::AVX2_TT;

/// Bytes of `rows` rows of `cols` in the layout.
pub fn packed_bytes(rows: usize, cols: usize) -> usize {
    rows.div_ceil(G) * (cols / QK_K) * GB
}

/// Rows `rows` of the Q6_K matrix `w` (K a multiple of 256; `rows.start` a multiple of 16)
/// into `data` as groups 0.. of the layout. Lanes past the last row keep what `data` held.
pub fn pack_rows(w: &QMat, rows: std::ops::Range<usize>, data: &mut [u8]) {
    let nb = w.cols / QK_K;
    for r in rows.clone() {
        let (g, lane) = ((r - rows.start) / G, r % G);
        for (b, blk) in w.row(r).chunks_exact(w.ty.type_size()).enumerate() {
            let at = (g * nb + b) * GB;
            data[at + 2 * lane..at + 2 * lane + 2].copy_from_slice(&blk[208..210]);
            for s in 0..16 {
                data[at + SCALES + G * s + lane] = blk[192 + s];
            }
            interleave4(data, at + QL, lane, &blk[..128]);
            interleave4(data, at + QH, lane, &blk[128..192]);
        }
    }
}

/// Whether this CPU has a kernel for the layout: AVX-512 VNNI, or AVX2 (`repack_q6k_avx2`,
/// with the k-quant row dots' features).
pub fn has_kernel() -> bool {
    super::qgemm::has_vnni() || super::qdot_k::has_fast_k_quants()
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Prefill's product for rows `rows` of a Q6_K matrix held as in the file (where it was not
/// repacked at load: CPUs with AVX2 alone, whose decode keeps the row dots): the rows are
/// packed into a per-thread scratch (once, for all T tokens), then the kernel runs over them.
///
/// # Safety
/// The CPU must have a kernel (`has_kernel`); `out` must be valid for writes at
/// `t * ldo + r` for t < T (`act` holds T tokens) and r in `rows`, and owned by the caller.
pub unsafe fn prefill_rows(
    w: &QMat,
    rows: std::ops::Range<usize>,
    (act, planes): (&Q8KAct, usize),
    t: usize,
    out: *mut f32,
    ldo: usize,
) {
    assert!(w.ty == GgmlType::Q6_K && w.cols.is_multiple_of(QK_K));
    super::with_scratch(&SCRATCH, packed_bytes(rows.len(), w.cols), |s| {
        pack_rows(w, rows.clone(), s);
        let view = KGroups {
            ty: GgmlType::Q6_K,
            rows: rows.len(),
            cols: w.cols,
            data: s,
        };
        let groups = 0..rows.len().div_ceil(G);
        view.gemm_groups(groups, act, planes, 0..t, out.add(rows.start), ldo)
    })
}

/// A whole Q6_K matrix repacked at load, for decode, verify batches and prefill alike (on
/// AVX-512 VNNI, where the 16-row kernel outruns the row dots; AVX2 keeps them for decode).
#[derive(Debug)]
pub struct PackedQ6K {
    pub rows: usize,
    pub cols: usize,
    data: PackBuf<u8>,
}

impl PackedQ6K {
    /// The bytes of the copy of a (rows, cols) matrix of `ty`, if this kernel takes it.
    pub fn bytes_for(ty: GgmlType, rows: usize, cols: usize) -> Option<usize> {
        let ok = ty == GgmlType::Q6_K && cols.is_multiple_of(QK_K) && super::qgemm::has_vnni();
        ok.then(|| packed_bytes(rows, cols))
    }

    /// Repack `w` (in `arena` where it has room) when it is Q6_K and the CPU has the kernel.
    pub fn new_in(w: &QMat, arena: Option<&PackArena>) -> Option<Self> {
        let bytes = Self::bytes_for(w.ty, w.rows, w.cols)?;
        let mut buf = PackBuf::<u8>::zeroed(bytes, arena);
        pack_rows(w, 0..w.rows, buf.as_mut_slice());
        Some(Self {
            rows: w.rows,
            cols: w.cols,
            data: buf,
        })
    }

    pub fn groups(&self) -> usize {
        self.rows.div_ceil(G)
    }

    /// The kernel's view of the copy.
    pub fn view(&self) -> KGroups<'_> {
        KGroups {
            ty: GgmlType::Q6_K,
            rows: self.rows,
            cols: self.cols,
            data: self.data.as_slice(),
        }
    }

    /// Row `r` as f32, with `dequantize_block_q6_k`'s bits: each block is put back as the
    /// file held it, then dequantized.
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        let (g, lane, nb) = (r / G, r % G, self.cols / QK_K);
        let data = self.data.as_slice();
        let mut blk = [0u8; 210];
        for (b, y) in out[..self.cols].chunks_exact_mut(QK_K).enumerate() {
            let at = (g * nb + b) * GB;
            blk[208..210].copy_from_slice(&data[at + 2 * lane..at + 2 * lane + 2]);
            for s in 0..16 {
                blk[192 + s] = data[at + SCALES + G * s + lane];
            }
            for (c, four) in blk[..192].chunks_exact_mut(4).enumerate() {
                let o = at + QL + c * 64 + 4 * lane;
                four.copy_from_slice(&data[o..o + 4]);
            }
            let y: &mut [f32; QK_K] = y.try_into().expect("a block");
            crate::quant::kquants::dequantize_block_q6_k(&blk, y);
        }
    }
}

/// A tile of up to TT tokens of group g on the VNNI kernel or the AVX2 one, for `KGroups`
/// (`repack_k`) of Q6_K rows.
///
/// # Safety
/// As `vnni::group` or `repack_q6k_avx2::group`.
#[cfg(target_arch = "x86_64")]
pub(super) unsafe fn tile(
    vnni: bool,
    p: &KGroups,
    g: usize,
    act: &Q8KAct,
    t0: usize,
    tn: usize,
    res: &mut [[f32; G]; TT],
) {
    use super::group_tiles::{by_tile_width, by_wide_tile, in_fours};
    use super::repack_q6k_avx2::group as avx2;
    use vnni::group as vnni_k;
    let (data, cols) = (p.data, p.cols);
    if vnni {
        by_wide_tile!(tn, vnni_k; data, cols, g, act, t0, res)
    } else {
        in_fours(
            t0,
            tn,
            res,
            |t0, tn, r4| by_tile_width!(tn, avx2; data, cols, g, act, t0, r4),
        )
    }
}

#[cfg(target_arch = "x86_64")]
mod vnni {
    use super::*;
    use std::arch::x86_64::*;

    /// One group of 16 rows against TN tokens from t0.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,fma,f16c")]
    pub unsafe fn group<const TN: usize>(
        data: &[u8],
        cols: usize,
        g: usize,
        act: &Q8KAct,
        t0: usize,
        res: &mut [[f32; G]; TT],
    ) {
        let nb = cols / QK_K;
        let (low, b45) = (_mm512_set1_epi8(0x0F), _mm512_set1_epi8(0x30));
        let mut acc = [_mm512_setzero_ps(); TN];
        for b in 0..nb {
            let base = data.as_ptr().add((g * nb + b) * GB);
            let mut isum = [_mm512_setzero_si512(); TN];
            // (half n, run h, chunks c0..c0+4): sub-blocks 8n+2h+c0/4 (low) and 8n+4+2h+c0/4
            for n in 0..2 {
                for h in 0..2 {
                    for c0 in [0, 4] {
                        if TN == 1 || t0 == 0 {
                            let part = 4 * n + 2 * h + c0 / 4;
                            crate::kernels::stream::prefetch_part(base, GB, part, 8);
                        }
                        let mut lo = [_mm512_setzero_si512(); 4];
                        let mut hi = [_mm512_setzero_si512(); 4];
                        for u in 0..4 {
                            let c = c0 + u;
                            let v =
                                _mm512_loadu_si512(base.add(QL + ((2 * n + h) * 8 + c) * 64) as _);
                            let q = _mm512_loadu_si512(base.add(QH + (n * 8 + c) * 64) as _);
                            // bits 2h, 2h+1 (low nibble's value) and 4+2h, 5+2h (high
                            // one's) of q moved to bits 4, 5, masked, then joined to the nibble
                            // in one ternary op: (nibble & 0x0F) | bits
                            let (ql, qh) = if h == 0 {
                                (_mm512_slli_epi16(q, 4), q)
                            } else {
                                (_mm512_slli_epi16(q, 2), _mm512_srli_epi16(q, 2))
                            };
                            let join = |nib: __m512i, bits: __m512i| {
                                let bits = _mm512_and_si512(bits, b45);
                                _mm512_ternarylogic_epi32(nib, bits, low, 0xEC)
                            };
                            lo[u] = join(v, ql);
                            hi[u] = join(_mm512_srli_epi16(v, 4), qh);
                        }
                        let (s_lo, s_hi) = (8 * n + 2 * h + c0 / 4, 8 * n + 4 + 2 * h + c0 / 4);
                        let scale = |s: usize| {
                            _mm512_cvtepi8_epi32(_mm_loadu_si128(base.add(SCALES + G * s) as _))
                        };
                        let (sc_lo, sc_hi) = (scale(s_lo), scale(s_hi));
                        for (t, is) in isum.iter_mut().enumerate() {
                            let tok = (t0 + t) * cols + QK_K * b;
                            let x = act.qs.as_ptr().add(tok) as *const i32;
                            let off_lo = (128 * n + 32 * h + 4 * c0) / 4;
                            let off_hi = off_lo + 16;
                            let (mut dl, mut dh) = (_mm512_setzero_si512(), _mm512_setzero_si512());
                            for u in 0..4 {
                                let xl =
                                    _mm512_set1_epi32(std::ptr::read_unaligned(x.add(off_lo + u)));
                                let xh =
                                    _mm512_set1_epi32(std::ptr::read_unaligned(x.add(off_hi + u)));
                                dl = _mm512_dpbusd_epi32(dl, lo[u], xl);
                                dh = _mm512_dpbusd_epi32(dh, hi[u], xh);
                            }
                            // the values were stored + 32: take 32 * sum(x) of the sub-block off
                            let bs = &act.bsums[16 * ((t0 + t) * nb + b)..];
                            let dl = _mm512_sub_epi32(dl, _mm512_set1_epi32(32 * bs[s_lo] as i32));
                            let dh = _mm512_sub_epi32(dh, _mm512_set1_epi32(32 * bs[s_hi] as i32));
                            let scaled = _mm512_add_epi32(
                                _mm512_mullo_epi32(dl, sc_lo),
                                _mm512_mullo_epi32(dh, sc_hi),
                            );
                            *is = _mm512_add_epi32(*is, scaled);
                        }
                    }
                }
            }
            let dw = _mm512_cvtph_ps(_mm256_loadu_si256(base as *const __m256i));
            for (t, a) in acc.iter_mut().enumerate() {
                let xd = _mm512_set1_ps(act.d[(t0 + t) * nb + b]);
                *a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(dw, xd), *a);
            }
        }
        for (t, a) in acc.iter().enumerate() {
            _mm512_storeu_ps(res[t].as_mut_ptr(), *a);
        }
    }
}

#[cfg(test)]
#[path = "repack_q6k_tests.rs"]
mod tests;
