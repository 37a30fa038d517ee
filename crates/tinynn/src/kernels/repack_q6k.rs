//! Q6_K rows repacked (per prefill call, in a scratch) for the output-stationary AVX-512 VNNI
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

use super::group_tiles::interleave4;
use super::qdot_k::Q8KAct;
use super::QMat;
use crate::quant::{GgmlType, QK_K};

/// Rows per group.
pub(super) const G: usize = 16;
/// Offsets in a group-block: scales, low nibbles, high bits; its size.
pub(super) const SCALES: usize = 32;
pub(super) const QL: usize = SCALES + 16 * G;
pub(super) const QH: usize = QL + 4 * 8 * 64;
pub(super) const GB: usize = QH + 2 * 8 * 64;
/// Tokens per tile.
pub(super) const TT: usize = 4;

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

/// Prefill's product for rows `rows` of a Q6_K matrix held as in the file: the rows are packed
/// into a per-thread scratch (once, for all T tokens), then the kernel runs over them. Decode
/// keeps the AVX2 row dots, faster on this layout's single stream than unpacking 6-bit values
/// for one token.
///
/// # Safety
/// The CPU must have a kernel (`has_kernel`); `out` must be valid for writes at
/// `t * ldo + r` for t < T (`act` holds T tokens) and r in `rows`, and owned by the caller.
pub unsafe fn prefill_rows(
    w: &QMat,
    rows: std::ops::Range<usize>,
    act: &Q8KAct,
    t: usize,
    out: *mut f32,
    ldo: usize,
) {
    assert!(w.ty == GgmlType::Q6_K && w.cols.is_multiple_of(QK_K));
    assert!(act.d.len() >= t * (w.cols / QK_K));
    let vnni = super::qgemm::has_vnni();
    super::with_scratch(&SCRATCH, packed_bytes(rows.len(), w.cols), |s| {
        pack_rows(w, rows.clone(), s);
        let (groups, out) = (0..rows.len().div_ceil(G), out.add(rows.start));
        #[cfg(target_arch = "x86_64")]
        super::group_tiles::for_group_tiles::<TT>(
            groups,
            0..t,
            rows.len(),
            out,
            ldo,
            |g, t0, tn, res| {
                use super::group_tiles::by_tile_width;
                use super::repack_q6k_avx2::group as avx2;
                use vnni::group as vnni_k;
                if vnni {
                    by_tile_width!(tn, vnni_k; s, w.cols, g, act, t0, res)
                } else {
                    by_tile_width!(tn, avx2; s, w.cols, g, act, t0, res)
                }
            },
        );
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (groups, act, t, out, ldo);
    })
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
        let (low, three) = (_mm512_set1_epi8(0x0F), _mm512_set1_epi8(3));
        let mut acc = [_mm512_setzero_ps(); TN];
        for b in 0..nb {
            let base = data.as_ptr().add((g * nb + b) * GB);
            let mut isum = [_mm512_setzero_si512(); TN];
            // (half n, run h, chunks c0..c0+4): sub-blocks 8n+2h+c0/4 (low) and 8n+4+2h+c0/4
            for n in 0..2 {
                for h in 0..2 {
                    for c0 in [0, 4] {
                        let mut lo = [_mm512_setzero_si512(); 4];
                        let mut hi = [_mm512_setzero_si512(); 4];
                        for u in 0..4 {
                            let c = c0 + u;
                            let v =
                                _mm512_loadu_si512(base.add(QL + ((2 * n + h) * 8 + c) * 64) as _);
                            let q = _mm512_loadu_si512(base.add(QH + (n * 8 + c) * 64) as _);
                            let ql = _mm512_srl_epi16(q, _mm_cvtsi32_si128(2 * h as i32));
                            let qh = _mm512_srl_epi16(q, _mm_cvtsi32_si128(4 + 2 * h as i32));
                            let bits =
                                |x: __m512i| _mm512_slli_epi16(_mm512_and_si512(x, three), 4);
                            lo[u] = _mm512_or_si512(_mm512_and_si512(v, low), bits(ql));
                            hi[u] = _mm512_or_si512(
                                _mm512_and_si512(_mm512_srli_epi16(v, 4), low),
                                bits(qh),
                            );
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
mod tests {
    use super::*;
    use crate::kernels::qdot_k::{dot_q6_k_ref, Q8KRow};
    use crate::quant::float::f16_at;

    /// Scalar model of the kernels for one row: per block the exact i32 sum over sub-blocks of
    /// scale * (sum of stored values (6 bits, + 32) times activations - 32 * the activations'
    /// sum), then acc += isum * (d * xd) as one fma.
    fn packed_ref(row: &[u8], a: &Q8KRow) -> f32 {
        let mut acc = 0f32;
        for (i, blk) in row.chunks_exact(210).enumerate() {
            let (ql, qh, sc) = (&blk[..128], &blk[128..192], &blk[192..208]);
            let mut isum = 0i32;
            for (s, &scale) in sc.iter().enumerate() {
                let mut sum = 0i32;
                for e in 16 * s..16 * s + 16 {
                    let (j, k, l) = (e / 128, (e % 128) / 32, e % 32);
                    let lo = (ql[64 * j + 32 * (k & 1) + l] >> (4 * (k >> 1))) & 15;
                    let v = lo | (((qh[32 * j + l] >> (2 * k)) & 3) << 4);
                    sum += v as i32 * a.qs[QK_K * i + e] as i32;
                }
                isum += scale as i8 as i32 * (sum - 32 * a.bsums[16 * i + s] as i32);
            }
            acc = (isum as f32).mul_add(f16_at(blk, 208) * a.d[i], acc);
        }
        acc
    }

    fn check(n: usize, k: usize, t: usize, bytes: &[u8], x: &[f32]) {
        let w = QMat::new(GgmlType::Q6_K, n, k, bytes).unwrap();
        let mut act = Q8KAct::default();
        act.quantize(x);
        let mut y = vec![0f32; t * n];
        for r0 in (0..n).step_by(32) {
            // SAFETY: kernel detected; y is (t, n); the chunks of rows are disjoint.
            unsafe { prefill_rows(&w, r0..(r0 + 32).min(n), &act, t, y.as_mut_ptr(), n) };
        }
        for i in 0..t {
            let a = act.token(i, k / QK_K);
            for r in 0..n {
                let got = y[i * n + r];
                let want = packed_ref(w.row(r), &a);
                assert_eq!(got.to_bits(), want.to_bits(), "n={n} k={k} ({i},{r})");
                let dot = dot_q6_k_ref(w.row(r), &a);
                assert!(
                    (got - dot).abs() <= 1e-4 * (1.0 + dot.abs()),
                    "n={n} k={k} ({i},{r}): {got} vs the row dot's {dot}"
                );
            }
        }
    }

    #[test]
    fn packed_q6_k_prefill_gives_the_scalar_models_bits() {
        if !has_kernel() {
            eprintln!("no AVX2 or AVX-512 VNNI here: Q6_K prefill dequantizes");
            return;
        }
        for (n, k, t) in [(16, 256, 1), (37, 1536, 5), (5, 512, 2), (33, 2304, 7)] {
            let bytes = super::super::test_matrix(GgmlType::Q6_K, n, k, 9);
            check(n, k, t, &bytes, &super::super::test_data(t * k, 4));
        }
    }

    #[test]
    fn packed_q6_k_holds_the_largest_sums_without_saturating() {
        if !has_kernel() {
            eprintln!("no AVX2 or AVX-512 VNNI here: Q6_K prefill dequantizes");
            return;
        }
        // every stored value 63 or 0, scales -128 and 127, activations all -127 or all 127
        let (n, k) = (16, 512);
        let mut bytes = vec![0u8; n * (k / QK_K) * 210];
        for (r, blk) in bytes.chunks_exact_mut(210).enumerate() {
            let v = if r % 2 == 0 { 0xFF } else { 0x00 };
            blk[..192].fill(v);
            for s in 0..16 {
                blk[192 + s] = if (r + s) % 2 == 0 { 0x80 } else { 0x7F };
            }
            blk[208..210].copy_from_slice(&[0x00, 0x3C]); // d = 1
        }
        let x: Vec<f32> = (0..2 * k).map(|i| if i < k { 0.5 } else { -2.0 }).collect();
        check(n, k, 2, &bytes, &x);
    }
}
