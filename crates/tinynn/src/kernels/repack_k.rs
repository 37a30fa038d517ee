//! Q4_K and Q5_K weights repacked at load for an output-stationary AVX-512 VNNI kernel (and
//! its AVX2 twin, `repack_k_avx2`, same bits),
//! `repack`'s interleaved-row layout for ggml's `block_q4_K` and `block_q5_K`
//! (`ggml-common.h`): the 16 lanes of a vector
//! are 16 weight rows, so one `vpdpbusd` multiplies 4 nibbles of each of 16 rows by the same 4
//! broadcast Q8_K activations. A sub-block's 6-bit scale multiplies its 16 lane sums once per
//! token, its min meets the activations' 16-element sums (`bsums`) as in
//! `ggml_vec_dot_q4_K_q8_K`; decode (one token) and prefill (tiles of up to 4) share the kernel.
//! Q5_K's fifth bits join the nibbles as they are loaded.
//!
//! Layout per group of 16 rows (a short last group is padded with zero rows) and 256-block:
//! the 16 rows' d as f16 (32 bytes), their dmin (32 bytes), the 8 sub-block scales as bytes,
//! scale s of the 16 rows together (128 bytes), the 8 mins likewise (128 bytes), then for each
//! 32-byte run j of the block and c in 0..8 the bytes 4c..4c+4 of that run of each row (64
//! bytes): low nibbles are elements 64j+4c.., high ones 64j+32+4c... For Q5_K then, for c in
//! 0..8, the bytes 4c..4c+4 of each row's 32 bytes of fifth bits (64 bytes; bit 2j of a byte
//! belongs to its element's low nibble in run j, bit 2j+1 to the high one). 2368 bytes against
//! the original's 16 x 144 = 2304 for Q4_K, 2880 against 16 x 176 = 2816 for Q5_K.

use super::arena::{PackArena, PackBuf};
use super::group_tiles::interleave4;
use super::qdot_k::{scales_mins_k4, Q8KAct};
use super::QMat;
use crate::quant::{GgmlType, QK_K};

/// Rows per group.
pub(super) const G: usize = 16;
/// Offsets in a group-block: scales, mins, quants, Q5_K's fifth bits.
pub(super) const SCALES: usize = 64;
pub(super) const MINS: usize = SCALES + 8 * G;
pub(super) const QS: usize = MINS + 8 * G;
pub(super) const QH: usize = QS + 4 * 8 * 64;

/// Bytes per group and block.
pub(super) fn group_block_bytes(ty: GgmlType) -> usize {
    if ty == GgmlType::Q5_K {
        QH + 8 * 64
    } else {
        QH
    }
}
/// Tokens per tile on the VNNI kernel, which unpacks a block once a tile: tiles of 4 put a
/// verify pass of 9 tokens through it three times (Coder 1.5B pp9 ~131 -> ~141 tok/s against
/// tiles of 8, pp6 ~103 -> ~117 against 4). The AVX2 kernel keeps fours ([`AVX2_TT`]).
pub(super) const TT: usize = 12;
/// Tokens per tile of the AVX2 kernels (half the registers).
pub(super) const AVX2_TT: usize = 4;

#[derive(Debug)]
pub struct PackedK {
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    data: PackBuf<u8>,
}

impl PackedK {
    /// The bytes of the copy of a (rows, cols) matrix of `ty`, if this kernel takes it.
    pub fn bytes_for(ty: GgmlType, rows: usize, cols: usize) -> Option<usize> {
        // Q5_K decodes faster on its AVX2 row dots than on this layout (one physical core,
        // the fifth bits cost the kernel more than they save), so only prefill packs it, on
        // the fly (`prefill_rows`)
        let ok = ty == GgmlType::Q4_K && cols.is_multiple_of(QK_K) && has_kernel(ty);
        ok.then(|| packed_bytes(ty, rows, cols))
    }

    /// Repack `w` (in `arena` where it has room) when it is Q4_K and the CPU has the kernel.
    pub fn new_in(w: &QMat, arena: Option<&PackArena>) -> Option<Self> {
        let bytes = Self::bytes_for(w.ty, w.rows, w.cols)?;
        let mut buf = PackBuf::<u8>::zeroed(bytes, arena);
        pack_rows(w, 0..w.rows, buf.as_mut_slice());
        Some(Self {
            ty: w.ty,
            rows: w.rows,
            cols: w.cols,
            data: buf,
        })
    }

    /// The kernel's view of the copy.
    pub fn view(&self) -> KGroups<'_> {
        KGroups {
            ty: self.ty,
            rows: self.rows,
            cols: self.cols,
            data: self.data.as_slice(),
        }
    }

    pub fn groups(&self) -> usize {
        self.rows.div_ceil(G)
    }

    /// Row `r` as f32, in `dequantize_block_q4_k`'s arithmetic (so with its bits).
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        let (g, lane, nb) = (r / G, r % G, self.cols / QK_K);
        let gb = group_block_bytes(self.ty);
        let data = self.data.as_slice();
        let f16 = |at: usize| half::f16::from_le_bytes([data[at], data[at + 1]]).to_f32();
        for (b, y) in out[..self.cols].chunks_exact_mut(QK_K).enumerate() {
            let at = (g * nb + b) * gb;
            let (d, min) = (f16(at + 2 * lane), f16(at + 32 + 2 * lane));
            for (j, y) in y.chunks_exact_mut(64).enumerate() {
                let (s1, s2) = (2 * j, 2 * j + 1);
                let d1 = d * data[at + SCALES + G * s1 + lane] as f32;
                let m1 = min * data[at + MINS + G * s1 + lane] as f32;
                let d2 = d * data[at + SCALES + G * s2 + lane] as f32;
                let m2 = min * data[at + MINS + G * s2 + lane] as f32;
                for l in 0..32 {
                    let q = data[at + QS + (8 * j + l / 4) * 64 + 4 * lane + l % 4];
                    y[l] = d1 * (q & 0x0f) as f32 - m1;
                    y[32 + l] = d2 * (q >> 4) as f32 - m2;
                }
            }
        }
    }
}

/// Rows of a Q4_K, Q5_K or Q6_K (`repack_q6k`'s layout) matrix in the 16-row layout,
/// wherever they are held.
#[derive(Clone, Copy)]
pub struct KGroups<'a> {
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    pub data: &'a [u8],
}

impl KGroups<'_> {
    /// Rows of groups g0..g1 for tokens `tokens` of X, given as Q8_K blocks in `planes` planes
    /// a token (T * planes * K/256, `for_group_tiles_planes`): out[t * ldo + r].
    ///
    /// # Safety
    /// The CPU must have a kernel (`has_kernel`); `out` must be valid
    /// for writes at `t * ldo + r` for these tokens and the rows of these groups, and owned by
    /// the caller.
    pub unsafe fn gemm_groups(
        &self,
        groups: std::ops::Range<usize>,
        act: &Q8KAct,
        planes: usize,
        tokens: std::ops::Range<usize>,
        out: *mut f32,
        ldo: usize,
    ) {
        assert!(act.d.len() >= planes * tokens.end * (self.cols / QK_K));
        let vnni = super::qgemm::has_vnni();
        #[cfg(target_arch = "x86_64")]
        super::group_tiles::for_group_tiles_planes::<TT>(
            groups,
            tokens,
            planes,
            self.rows,
            out,
            ldo,
            |g, t0, tn, res| tile(vnni, self, g, act, t0, tn, res),
        );
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (groups, act, planes, tokens, out, ldo);
    }
}

/// Whether this CPU has a kernel for the layout: AVX-512 VNNI, or AVX2 (`repack_k_avx2`).
pub fn has_kernel(ty: GgmlType) -> bool {
    #[cfg(target_arch = "x86_64")]
    if super::repack_k_avx2::available(ty) {
        return true;
    }
    let _ = ty;
    super::qgemm::has_vnni()
}

/// A tile of up to TT tokens on the VNNI kernel or the AVX2 one.
///
/// # Safety
/// As `vnni::group` or `repack_k_avx2::group`.
#[cfg(target_arch = "x86_64")]
unsafe fn tile(
    vnni: bool,
    p: &KGroups,
    g: usize,
    act: &Q8KAct,
    t0: usize,
    tn: usize,
    res: &mut Tile,
) {
    use super::group_tiles::{by_tile_width, by_wide_tile, in_fours};
    use super::repack_k_avx2::group as avx2;
    use vnni::group as vnni_k;
    if p.ty == GgmlType::Q6_K {
        return super::repack_q6k::tile(vnni, p, g, act, t0, tn, res);
    }
    match (vnni, p.ty == GgmlType::Q5_K) {
        (true, false) => by_wide_tile!(tn, vnni_k, false; p, g, act, t0, res),
        (true, true) => by_wide_tile!(tn, vnni_k, true; p, g, act, t0, res),
        (false, q5) => in_fours(t0, tn, res, |t0, tn, r4| match q5 {
            false => by_tile_width!(tn, avx2, false; p, g, act, t0, r4),
            true => by_tile_width!(tn, avx2, true; p, g, act, t0, r4),
        }),
    }
}

/// A tile's results: TT tokens by 16 rows.
type Tile = [[f32; G]; TT];

/// Bytes of `rows` rows of `cols` in the layout.
pub fn packed_bytes(ty: GgmlType, rows: usize, cols: usize) -> usize {
    rows.div_ceil(G) * (cols / QK_K) * group_block_bytes(ty)
}

/// Rows `rows` of `w` (Q4_K or Q5_K, K a multiple of 256; `rows.start` a multiple of 16) into
/// `data` as groups 0.. of the layout. Lanes past the last row keep what `data` held.
pub fn pack_rows(w: &QMat, rows: std::ops::Range<usize>, data: &mut [u8]) {
    let (nb, gb, q5) = (
        w.cols / QK_K,
        group_block_bytes(w.ty),
        w.ty == GgmlType::Q5_K,
    );
    // where the quants start in a block: after d, dmin, scales (and Q5_K's 32 fifth-bit bytes)
    let qs_at = if q5 { 48 } else { 16 };
    for r in rows.clone() {
        let (g, lane) = ((r - rows.start) / G, r % G);
        for (b, blk) in w.row(r).chunks_exact(w.ty.type_size()).enumerate() {
            let at = (g * nb + b) * gb;
            data[at + 2 * lane..at + 2 * lane + 2].copy_from_slice(&blk[0..2]);
            data[at + 32 + 2 * lane..at + 34 + 2 * lane].copy_from_slice(&blk[2..4]);
            let sm = scales_mins_k4(&blk[4..16]);
            for s in 0..8 {
                data[at + SCALES + G * s + lane] = sm[s];
                data[at + MINS + G * s + lane] = sm[8 + s];
            }
            interleave4(data, at + QS, lane, &blk[qs_at..]);
            if q5 {
                interleave4(data, at + QH, lane, &blk[16..48]);
            }
        }
    }
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Prefill's product for rows `rows` of a Q5_K matrix held as in the file: the rows are packed
/// into a per-thread scratch (once, for all T tokens), then the kernel runs over them.
///
/// # Safety
/// As `KGroups::gemm_groups`, for these rows of all T tokens (`act` holds T tokens).
pub unsafe fn prefill_rows(
    w: &QMat,
    rows: std::ops::Range<usize>,
    (act, planes): (&Q8KAct, usize),
    t: usize,
    out: *mut f32,
    ldo: usize,
) {
    super::with_scratch(&SCRATCH, packed_bytes(w.ty, rows.len(), w.cols), |s| {
        pack_rows(w, rows.clone(), s);
        let view = KGroups {
            ty: w.ty,
            rows: rows.len(),
            cols: w.cols,
            data: s,
        };
        view.gemm_groups(
            0..rows.len().div_ceil(G),
            act,
            planes,
            0..t,
            out.add(rows.start),
            ldo,
        )
    })
}

#[cfg(target_arch = "x86_64")]
mod vnni {
    use super::*;
    use std::arch::x86_64::*;

    /// One group of 16 rows against TN tokens from t0.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,fma,f16c")]
    pub unsafe fn group<const TN: usize, const Q5: bool>(
        p: &KGroups,
        g: usize,
        act: &Q8KAct,
        t0: usize,
        res: &mut [[f32; G]; TT],
    ) {
        let (nb, gb) = (p.cols / QK_K, group_block_bytes(p.ty));
        let low = _mm512_set1_epi8(0x0F);
        let one = _mm512_set1_epi8(1);
        let mut acc = [_mm512_setzero_ps(); TN];
        for b in 0..nb {
            let base = p.data.as_ptr().add((g * nb + b) * gb);
            let bytes16 = |at: usize| _mm512_cvtepu8_epi32(_mm_loadu_si128(base.add(at) as _));
            let mut isum = [_mm512_setzero_si512(); TN];
            for j in 0..4 {
                if TN == 1 || t0 == 0 {
                    // a quarter of the block's prefetches before each quarter of its work (in
                    // decode, or on a task's first token tile: the later tiles find W in cache)
                    crate::kernels::stream::prefetch_part(base, gb, j, 4);
                }
                let mut lo = [_mm512_setzero_si512(); 8];
                let mut hi = [_mm512_setzero_si512(); 8];
                for c in 0..8 {
                    let v = _mm512_loadu_si512(base.add(QS + (8 * j + c) * 64) as *const _);
                    lo[c] = _mm512_and_si512(v, low);
                    // Q4_K's high nibbles stay in place (16 times their value, one op
                    // fewer); the low sums are scaled by 16 to match, and d by 1/16
                    hi[c] = if Q5 {
                        _mm512_and_si512(_mm512_srli_epi16(v, 4), low)
                    } else {
                        _mm512_andnot_si512(low, v)
                    };
                    if Q5 {
                        // bits 2j, 2j+1 of each fifth-bit byte, moved to bit 4
                        let h = _mm512_loadu_si512(base.add(QH + c * 64) as *const _);
                        let h = _mm512_srl_epi16(h, _mm_cvtsi32_si128(2 * j as i32));
                        let hl = _mm512_slli_epi16(_mm512_and_si512(h, one), 4);
                        let hh =
                            _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(h, 1), one), 4);
                        lo[c] = _mm512_or_si512(lo[c], hl);
                        hi[c] = _mm512_or_si512(hi[c], hh);
                    }
                }
                let (sl, sh) = (
                    bytes16(SCALES + G * 2 * j),
                    bytes16(SCALES + G * (2 * j + 1)),
                );
                let sl = if Q5 { sl } else { _mm512_slli_epi32(sl, 4) };
                for (t, is) in isum.iter_mut().enumerate() {
                    let x =
                        act.qs.as_ptr().add((t0 + t) * p.cols + QK_K * b + 64 * j) as *const i32;
                    let (mut sl_acc, mut sh_acc) = (_mm512_setzero_si512(), _mm512_setzero_si512());
                    for c in 0..8 {
                        let xl = _mm512_set1_epi32(std::ptr::read_unaligned(x.add(c)));
                        let xh = _mm512_set1_epi32(std::ptr::read_unaligned(x.add(8 + c)));
                        sl_acc = _mm512_dpbusd_epi32(sl_acc, lo[c], xl);
                        sh_acc = _mm512_dpbusd_epi32(sh_acc, hi[c], xh);
                    }
                    let scaled = _mm512_add_epi32(
                        _mm512_mullo_epi32(sl_acc, sl),
                        _mm512_mullo_epi32(sh_acc, sh),
                    );
                    *is = _mm512_add_epi32(*is, scaled);
                }
            }
            let dw = _mm512_cvtph_ps(_mm256_loadu_si256(base as *const __m256i));
            // isum is 16 times the sum for Q4_K: (16 isum) (d / 16) is the same product, as
            // scaling by a power of two commutes with rounding, so the bits are decode's
            let dw = if Q5 {
                dw
            } else {
                _mm512_mul_ps(dw, _mm512_set1_ps(0.0625))
            };
            let mw = _mm512_cvtph_ps(_mm256_loadu_si256(base.add(32) as *const __m256i));
            // the mins of sub-blocks 2q and 2q+1 side by side as i16 in each row's lane, so one
            // vpdpwssd a pair takes both against their activation sums (exact, as before)
            let mut mp = [_mm512_setzero_si512(); 4];
            for (q, m) in mp.iter_mut().enumerate() {
                let lo = _mm_loadu_si128(base.add(MINS + G * 2 * q) as _);
                let hi = _mm_loadu_si128(base.add(MINS + G * (2 * q + 1)) as _);
                let rows = _mm256_set_m128i(_mm_unpackhi_epi8(lo, hi), _mm_unpacklo_epi8(lo, hi));
                *m = _mm512_cvtepu8_epi16(rows);
            }
            for (t, a) in acc.iter_mut().enumerate() {
                let tb = (t0 + t) * nb + b;
                let bs = &act.bsums[16 * tb..16 * tb + 16];
                let mut msum = _mm512_setzero_si512();
                for (q, m) in mp.iter().enumerate() {
                    // each sub-block's activation sum (two 16-sums, |s| <= 4064: an i16)
                    let sum = |s: usize| (bs[2 * s] as i32 + bs[2 * s + 1] as i32) as u16 as u32;
                    let both = (sum(2 * q) | (sum(2 * q + 1) << 16)) as i32;
                    msum = _mm512_dpwssd_epi32(msum, *m, _mm512_set1_epi32(both));
                }
                let xd = _mm512_set1_ps(act.d[tb]);
                *a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(dw, xd), *a);
                *a = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum), _mm512_mul_ps(mw, xd), *a);
            }
        }
        for (t, a) in acc.iter().enumerate() {
            _mm512_storeu_ps(res[t].as_mut_ptr(), *a);
        }
    }
}

#[cfg(test)]
#[path = "repack_k_tests.rs"]
mod tests;
