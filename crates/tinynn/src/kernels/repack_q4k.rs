//! Q4_K weights repacked at load for an output-stationary AVX-512 VNNI kernel, `repack`'s
//! interleaved-row layout for ggml's `block_q4_K` (`ggml-common.h`): the 16 lanes of a vector
//! are 16 weight rows, so one `vpdpbusd` multiplies 4 nibbles of each of 16 rows by the same 4
//! broadcast Q8_K activations. A sub-block's 6-bit scale multiplies its 16 lane sums once per
//! token, its min meets the activations' 16-element sums (`bsums`) as in
//! `ggml_vec_dot_q4_K_q8_K`; decode (one token) and prefill (tiles of up to 4) share the kernel.
//!
//! Layout per group of 16 rows (a short last group is padded with zero rows) and 256-block:
//! the 16 rows' d as f16 (32 bytes), their dmin (32 bytes), the 8 sub-block scales as bytes,
//! scale s of the 16 rows together (128 bytes), the 8 mins likewise (128 bytes), then for each
//! 32-byte run j of the block and c in 0..8 the bytes 4c..4c+4 of that run of each row (64
//! bytes): low nibbles are elements 64j+4c.., high ones 64j+32+4c... 2368 bytes against the
//! original's 16 x 144 = 2304.

use super::arena::{PackArena, PackBuf};
use super::qdot_k::{scales_mins_k4, Q8KAct, Q4_K_BYTES};
use super::QMat;
use crate::quant::{GgmlType, QK_K};

/// Rows per group.
const G: usize = 16;
/// Bytes per group and block.
const GB: usize = 64 + 2 * 8 * G + 4 * 8 * 64;
/// Offsets in a group-block: scales, mins, quants.
const SCALES: usize = 64;
const MINS: usize = SCALES + 8 * G;
const QS: usize = MINS + 8 * G;
/// Tokens per tile.
const TT: usize = 4;

#[derive(Debug)]
pub struct PackedQ4K {
    pub rows: usize,
    pub cols: usize,
    data: PackBuf<u8>,
}

impl PackedQ4K {
    /// The bytes of the copy of a (rows, cols) matrix of `ty`, if this kernel takes it.
    pub fn bytes_for(ty: GgmlType, rows: usize, cols: usize) -> Option<usize> {
        let ok = ty == GgmlType::Q4_K && cols.is_multiple_of(QK_K) && super::qgemm::has_vnni();
        ok.then(|| rows.div_ceil(G) * (cols / QK_K) * GB)
    }

    /// Repack `w` (in `arena` where it has room) when it is Q4_K and the CPU has the kernel.
    pub fn new_in(w: &QMat, arena: Option<&PackArena>) -> Option<Self> {
        let bytes = Self::bytes_for(w.ty, w.rows, w.cols)?;
        let nb = w.cols / QK_K;
        let mut buf = PackBuf::<u8>::zeroed(bytes, arena);
        let data = buf.as_mut_slice();
        for r in 0..w.rows {
            let (g, lane) = (r / G, r % G);
            for (b, blk) in w.row(r).chunks_exact(Q4_K_BYTES).enumerate() {
                let at = (g * nb + b) * GB;
                data[at + 2 * lane..at + 2 * lane + 2].copy_from_slice(&blk[0..2]);
                data[at + 32 + 2 * lane..at + 34 + 2 * lane].copy_from_slice(&blk[2..4]);
                let sm = scales_mins_k4(&blk[4..16]);
                for s in 0..8 {
                    data[at + SCALES + G * s + lane] = sm[s];
                    data[at + MINS + G * s + lane] = sm[8 + s];
                }
                for (jc, four) in blk[16..].chunks_exact(4).enumerate() {
                    let o = at + QS + jc * 64 + 4 * lane;
                    data[o..o + 4].copy_from_slice(four);
                }
            }
        }
        Some(Self {
            rows: w.rows,
            cols: w.cols,
            data: buf,
        })
    }

    pub fn groups(&self) -> usize {
        self.rows.div_ceil(G)
    }

    /// Row `r` as f32, in `dequantize_block_q4_k`'s arithmetic (so with its bits).
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        let (g, lane, nb) = (r / G, r % G, self.cols / QK_K);
        let data = self.data.as_slice();
        let f16 = |at: usize| half::f16::from_le_bytes([data[at], data[at + 1]]).to_f32();
        for (b, y) in out[..self.cols].chunks_exact_mut(QK_K).enumerate() {
            let at = (g * nb + b) * GB;
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

    /// Rows of groups g0..g1 for tokens `tokens` of X, given as Q8_K blocks (T * K/256):
    /// out[t * ldo + r].
    ///
    /// # Safety
    /// The CPU must have the kernel (packs are only made where it does); `out` must be valid
    /// for writes at `t * ldo + r` for these tokens and the rows of these groups, and owned by
    /// the caller.
    pub unsafe fn gemm_groups(
        &self,
        groups: std::ops::Range<usize>,
        act: &Q8KAct,
        tokens: std::ops::Range<usize>,
        out: *mut f32,
        ldo: usize,
    ) {
        assert!(act.d.len() >= tokens.end * (self.cols / QK_K));
        #[cfg(target_arch = "x86_64")]
        for g in groups {
            let mut t0 = tokens.start;
            while t0 < tokens.end {
                let tn = (tokens.end - t0).min(TT);
                let mut res = [[0f32; G]; TT];
                match tn {
                    4 => vnni::group::<4>(self, g, act, t0, &mut res),
                    3 => vnni::group::<3>(self, g, act, t0, &mut res),
                    2 => vnni::group::<2>(self, g, act, t0, &mut res),
                    _ => vnni::group::<1>(self, g, act, t0, &mut res),
                }
                let rows = G.min(self.rows - g * G);
                for (j, rj) in res.iter().enumerate().take(tn) {
                    for (l, v) in rj.iter().enumerate().take(rows) {
                        *out.add((t0 + j) * ldo + g * G + l) = *v;
                    }
                }
                t0 += TT;
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (groups, act, tokens, out, ldo);
    }
}

#[cfg(target_arch = "x86_64")]
mod vnni {
    use super::*;
    use std::arch::x86_64::*;

    /// One group of 16 rows against TN tokens from t0.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,fma,f16c")]
    pub unsafe fn group<const TN: usize>(
        p: &PackedQ4K,
        g: usize,
        act: &Q8KAct,
        t0: usize,
        res: &mut [[f32; G]; TT],
    ) {
        let nb = p.cols / QK_K;
        let low = _mm512_set1_epi8(0x0F);
        let mut acc = [_mm512_setzero_ps(); TN];
        for b in 0..nb {
            let base = p.data.as_slice().as_ptr().add((g * nb + b) * GB);
            let bytes16 = |at: usize| _mm512_cvtepu8_epi32(_mm_loadu_si128(base.add(at) as _));
            let mut isum = [_mm512_setzero_si512(); TN];
            for j in 0..4 {
                let mut lo = [_mm512_setzero_si512(); 8];
                let mut hi = [_mm512_setzero_si512(); 8];
                for c in 0..8 {
                    let v = _mm512_loadu_si512(base.add(QS + (8 * j + c) * 64) as *const _);
                    lo[c] = _mm512_and_si512(v, low);
                    hi[c] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
                }
                let (sl, sh) = (
                    bytes16(SCALES + G * 2 * j),
                    bytes16(SCALES + G * (2 * j + 1)),
                );
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
            let mw = _mm512_cvtph_ps(_mm256_loadu_si256(base.add(32) as *const __m256i));
            for (t, a) in acc.iter_mut().enumerate() {
                let tb = (t0 + t) * nb + b;
                let bs = &act.bsums[16 * tb..16 * tb + 16];
                let mut msum = _mm512_setzero_si512();
                for s in 0..8 {
                    let pair = bs[2 * s] as i32 + bs[2 * s + 1] as i32;
                    let m = bytes16(MINS + G * s);
                    msum = _mm512_add_epi32(msum, _mm512_mullo_epi32(m, _mm512_set1_epi32(pair)));
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
mod tests {
    use super::*;
    use crate::kernels::qdot_k::dot_q4_k_ref;

    #[test]
    fn packed_q4_k_matches_row_dots_and_reads_back_its_rows() {
        let ty = GgmlType::Q4_K;
        if PackedQ4K::bytes_for(ty, 16, QK_K).is_none() {
            eprintln!("no AVX-512 VNNI here: Q4_K stays on its row dots");
            return;
        }
        for (n, k, t) in [(16, 256, 1), (37, 1536, 5), (5, 512, 2), (33, 2304, 4)] {
            let bytes = super::super::test_matrix(ty, n, k, 7);
            let w = QMat::new(ty, n, k, &bytes).unwrap();
            let p = PackedQ4K::new_in(&w, None).expect("packable");
            let (mut got, mut want) = (vec![0f32; k], vec![0f32; k]);
            for r in 0..n {
                p.dequantize_row(r, &mut got);
                crate::quant::dequantize(ty, w.row(r), &mut want).unwrap();
                assert_eq!(got, want, "row {r} read back from the copy");
            }
            let mut act = Q8KAct::default();
            act.quantize(&super::super::test_data(t * k, 4));
            let mut y = vec![0f32; t * n];
            // SAFETY: kernel detected (bytes_for); y is (t, n); two token ranges as the driver
            // may split them.
            unsafe {
                p.gemm_groups(0..p.groups(), &act, 0..t / 2, y.as_mut_ptr(), n);
                p.gemm_groups(0..p.groups(), &act, t / 2..t, y.as_mut_ptr(), n);
            }
            for i in 0..t {
                for r in 0..n {
                    let want = dot_q4_k_ref(w.row(r), &act.token(i, k / QK_K));
                    let got = y[i * n + r];
                    assert!(
                        (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
                        "n={n} k={k} ({i},{r}): {got} vs {want}"
                    );
                }
            }
        }
    }
}
