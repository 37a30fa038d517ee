//! Q4_0, Q4_1, Q5_0 and Q8_0 weights repacked at load for an output-stationary AVX-512 VNNI kernel, in the manner
//! of ggml's interleaved `q4_0_8x8` layout: the 16 lanes of a vector are 16 weight rows, so one
//! `vpdpbusd` multiplies 4 weights of each of 16 rows by the same 4 broadcast activations, and
//! a block's scales, its conversion to f32 and its multiply-add are paid once per 16 rows
//! instead of once per row. The same kernel serves decode (one token) and prefill (a tile of
//! up to 4 tokens), so a batch gives the bits of token-by-token decoding.
//!
//! Layout, per group of 16 rows (a short last group is padded with zero rows) and per 32-block:
//! the 16 row scales as f16 (32 bytes), for Q4_1 the 16 mins (32 bytes), then for c in 0..4
//! the bytes 4c..4c+4 of each row's 16 nibble bytes (4 x 64 bytes): low nibbles are elements
//! 4c..4c+4, high ones 16+4c..16+4c+4. The copy is as large as the original, whose mapped
//! pages the model then releases.

use super::arena::{PackArena, PackBuf};
use super::qdot::Q8_1Act;
use super::QMat;
use crate::quant::GgmlType;

/// Rows per group (the lanes of a 512-bit vector of i32).
const G: usize = 16;
/// What a type's block holds for the kernel: the bytes per row of the field after the 16
/// scales (Q4_1's min, Q5_0's fifth bits, Q8_0's sum of weights; none for Q4_0), where the
/// quants start in the block, and how many 4-byte chunks of quants a row has per block.
fn layout(ty: GgmlType) -> (usize, usize, usize) {
    match ty {
        GgmlType::Q4_1 => (2, 4, 4),
        GgmlType::Q5_0 => (4, 6, 4),
        GgmlType::Q8_0 => (2, 2, 8),
        _ => (0, 2, 4),
    }
}

/// Bytes per group and block: 16 f16 scales, the 16 rows' extra field, the 16 rows' chunks.
/// For the 4-bit types this is exactly the original's size.
fn group_block_bytes(ty: GgmlType) -> usize {
    let (extra, _, chunks) = layout(ty);
    32 + G * extra + chunks * 64
}

/// Tokens per tile in prefill.
const TT: usize = 4;

#[derive(Debug)]
pub struct PackedQ4 {
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    /// Bytes per group and block.
    gb: usize,
    data: PackBuf<u8>,
}

/// A weight matrix repacked for one of the interleaved-row kernels.
#[derive(Debug)]
pub enum Packed {
    /// Q4_0, Q4_1, Q5_0, Q8_0 on the VNNI kernel.
    Int8(PackedQ4),
    /// F16 on the F16C kernel (`repack_f16`).
    F16(super::repack_f16::PackedF16),
    /// Q4_K on its VNNI kernel (`repack_k`).
    K(super::repack_k::PackedK),
}

impl Packed {
    /// Repack `w` when a kernel for its type runs on this CPU.
    pub fn new(w: &QMat) -> Option<Self> {
        Self::new_in(w, None)
    }

    /// As `new`, with the copy in `arena` where it has room.
    pub fn new_in(w: &QMat, arena: Option<&PackArena>) -> Option<Self> {
        match w.ty {
            GgmlType::F16 => super::repack_f16::PackedF16::new_in(w, arena).map(Packed::F16),
            GgmlType::Q4_K => super::repack_k::PackedK::new_in(w, arena).map(Packed::K),
            _ => PackedQ4::new_in(w, arena).map(Packed::Int8),
        }
    }

    /// The bytes `new` would take for a (rows, cols) matrix of `ty`; `None` where it would not
    /// repack it. Sizes an arena for a whole model.
    pub fn bytes_for(ty: GgmlType, rows: usize, cols: usize) -> Option<usize> {
        match ty {
            GgmlType::F16 => super::repack_f16::PackedF16::bytes_for(ty, rows, cols),
            GgmlType::Q4_K => super::repack_k::PackedK::bytes_for(ty, rows, cols),
            _ => PackedQ4::bytes_for(ty, rows, cols),
        }
    }

    /// Row `r` (`out` holds `cols` values) read back from the copy, with the values
    /// `quant::dequantize` gives for the original row: an embedding lookup in a tied table
    /// then never pages the released original back in.
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        match self {
            Packed::Int8(p) => p.dequantize_row(r, out),
            Packed::F16(p) => p.dequantize_row(r, out),
            Packed::K(p) => p.dequantize_row(r, out),
        }
    }

    /// Groups of 16 rows.
    pub fn groups(&self) -> usize {
        match self {
            Packed::Int8(p) => p.groups(),
            Packed::F16(p) => p.groups(),
            Packed::K(p) => p.groups(),
        }
    }
}

/// Whether this CPU runs the packed kernel.
pub fn has_packed_kernel() -> bool {
    super::qgemm::has_vnni()
}

impl PackedQ4 {
    /// Repack `w` when it is Q4_0, Q4_1, Q5_0 or Q8_0 with whole 32-blocks and this CPU has
    /// the kernel.
    pub fn new(w: &QMat) -> Option<Self> {
        Self::new_in(w, None)
    }

    /// The bytes of the copy of a (rows, cols) matrix of `ty`, if this kernel takes it.
    pub fn bytes_for(ty: GgmlType, rows: usize, cols: usize) -> Option<usize> {
        let ok = matches!(
            ty,
            GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q8_0
        );
        if !ok || !cols.is_multiple_of(32) || !has_packed_kernel() {
            return None;
        }
        Some(rows.div_ceil(G) * (cols / 32) * group_block_bytes(ty))
    }

    /// As `new`, with the copy in `arena` where it has room.
    pub fn new_in(w: &QMat, arena: Option<&PackArena>) -> Option<Self> {
        let bytes = Self::bytes_for(w.ty, w.rows, w.cols)?;
        let (nb, gb) = (w.cols / 32, group_block_bytes(w.ty));
        let (extra, qs_at, chunks) = layout(w.ty);
        let size = w.ty.type_size();
        let mut buf = PackBuf::<u8>::zeroed(bytes, arena);
        let data = buf.as_mut_slice();
        for r in 0..w.rows {
            let (g, lane) = (r / G, r % G);
            let row = w.row(r);
            for b in 0..nb {
                let blk = &row[b * size..(b + 1) * size];
                let at = (g * nb + b) * gb;
                data[at + 2 * lane..at + 2 * lane + 2].copy_from_slice(&blk[0..2]);
                let field = &mut data[at + 32 + extra * lane..at + 32 + extra * (lane + 1)];
                if w.ty == GgmlType::Q8_0 {
                    // activations enter vpdpbusd as x + 128 against the signed weights; the
                    // kernel takes 128 * sum(w) off again
                    let sum = blk[2..34].iter().map(|v| *v as i8 as i16).sum::<i16>();
                    field.copy_from_slice(&sum.to_le_bytes());
                } else {
                    field.copy_from_slice(&blk[2..2 + extra]);
                }
                for c in 0..chunks {
                    let o = at + 32 + G * extra + c * 64 + 4 * lane;
                    data[o..o + 4].copy_from_slice(&blk[qs_at + 4 * c..qs_at + 4 * c + 4]);
                }
            }
        }
        Some(Self {
            ty: w.ty,
            rows: w.rows,
            cols: w.cols,
            gb,
            data: buf,
        })
    }

    pub fn groups(&self) -> usize {
        self.rows.div_ceil(G)
    }

    /// Row `r` as f32: each block put back together from the 16-row layout and dequantized.
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        let (g, lane, nb) = (r / G, r % G, self.cols / 32);
        let (extra, qs_at, chunks) = layout(self.ty);
        let data = self.data.as_slice();
        let mut blk = [0u8; 34];
        let blk = &mut blk[..self.ty.type_size()];
        for (b, out) in out[..self.cols].chunks_exact_mut(32).enumerate() {
            let at = (g * nb + b) * self.gb;
            blk[0..2].copy_from_slice(&data[at + 2 * lane..at + 2 * lane + 2]);
            if self.ty != GgmlType::Q8_0 {
                // (Q8_0's field is the kernel's sum of weights, not part of the block)
                let field = at + 32 + extra * lane;
                blk[2..2 + extra].copy_from_slice(&data[field..field + extra]);
            }
            for c in 0..chunks {
                let o = at + 32 + G * extra + c * 64 + 4 * lane;
                blk[qs_at + 4 * c..qs_at + 4 * c + 4].copy_from_slice(&data[o..o + 4]);
            }
            crate::quant::dequantize(self.ty, blk, out).expect("packed types dequantize");
        }
    }

    /// Rows of groups g0..g1 for all T tokens: out[t * ldo + r]. `act` holds X as Q8_1
    /// blocks (T * K/32; its values and scales serve as Q8_0's), `xsum` each block's sum of
    /// values (T * K/32).
    ///
    /// # Safety
    /// The CPU must have the kernel (`has_packed_kernel`); `out` must be valid for writes at
    /// `t * ldo + r` for t < T and the rows of these groups, and owned by the caller.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn gemm_groups(
        &self,
        g0: usize,
        g1: usize,
        act: &Q8_1Act,
        xsum: &[i32],
        t: usize,
        out: *mut f32,
        ldo: usize,
    ) {
        #[cfg(target_arch = "x86_64")]
        super::group_tiles::for_group_tiles::<TT>(
            g0..g1,
            0..t,
            self.rows,
            out,
            ldo,
            |g, t0, tn, res| {
                if self.ty == GgmlType::Q5_0 {
                    match tn {
                        4 => vnni::group_q5::<4>(self, g, act, xsum, t0, res),
                        3 => vnni::group_q5::<3>(self, g, act, xsum, t0, res),
                        2 => vnni::group_q5::<2>(self, g, act, xsum, t0, res),
                        _ => vnni::group_q5::<1>(self, g, act, xsum, t0, res),
                    }
                } else {
                    match (tn, self.ty == GgmlType::Q8_0) {
                        (tn, false) if self.ty == GgmlType::Q4_1 => match tn {
                            4 => vnni::group::<4, true>(self, g, act, xsum, t0, res),
                            3 => vnni::group::<3, true>(self, g, act, xsum, t0, res),
                            2 => vnni::group::<2, true>(self, g, act, xsum, t0, res),
                            _ => vnni::group::<1, true>(self, g, act, xsum, t0, res),
                        },
                        (4, false) => vnni::group::<4, false>(self, g, act, xsum, t0, res),
                        (3, false) => vnni::group::<3, false>(self, g, act, xsum, t0, res),
                        (2, false) => vnni::group::<2, false>(self, g, act, xsum, t0, res),
                        (_, false) => vnni::group::<1, false>(self, g, act, xsum, t0, res),
                        (4, true) => vnni::group_q8::<4>(self, g, act, t0, res),
                        (3, true) => vnni::group_q8::<3>(self, g, act, t0, res),
                        (2, true) => vnni::group_q8::<2>(self, g, act, t0, res),
                        (_, true) => vnni::group_q8::<1>(self, g, act, t0, res),
                    }
                }
            },
        );
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (g0, g1, act, xsum, t, out, ldo);
    }
}

/// Each block's sum of 8-bit values (the -8 offset of Q4_0's nibbles times it is subtracted).
pub fn block_sums(act: &Q8_1Act, out: &mut Vec<i32>) {
    out.clear();
    out.extend(
        act.qs
            .chunks_exact(32)
            .map(|b| b.iter().map(|v| *v as i32).sum::<i32>()),
    );
}

#[cfg(target_arch = "x86_64")]
mod vnni {
    use super::*;
    use crate::kernels::stream::prefetch_ahead;
    use std::arch::x86_64::*;

    /// One group of 16 rows against TN tokens.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,fma,f16c")]
    pub unsafe fn group<const TN: usize, const Q41: bool>(
        p: &PackedQ4,
        g: usize,
        act: &Q8_1Act,
        xsum: &[i32],
        t0: usize,
        res: &mut [[f32; G]; TT],
    ) {
        let nb = p.cols / 32;
        let q41 = Q41;
        let mins = if q41 { 32 } else { 0 };
        let low = _mm512_set1_epi8(0x0F);
        let mut acc = [_mm512_setzero_ps(); TN];
        let mut macc = [_mm512_setzero_ps(); TN];
        for b in 0..nb {
            let base = p.data.as_slice().as_ptr().add((g * nb + b) * p.gb);
            if TN == 1 {
                prefetch_ahead(base, p.gb);
            }
            let dw = _mm512_cvtph_ps(_mm256_loadu_si256(base as *const __m256i));
            let mw = if q41 {
                _mm512_cvtph_ps(_mm256_loadu_si256(base.add(32) as *const __m256i))
            } else {
                _mm512_setzero_ps()
            };
            let mut lo = [_mm512_setzero_si512(); 4];
            let mut hi = [_mm512_setzero_si512(); 4];
            for c in 0..4 {
                let v = _mm512_loadu_si512(base.add(32 + mins + 64 * c) as *const _);
                lo[c] = _mm512_and_si512(v, low);
                hi[c] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
            }
            for j in 0..TN {
                let tb = (t0 + j) * nb + b;
                let x = act.qs.as_ptr().add(tb * 32) as *const i32;
                // nibbles are 0..15; Q4_0 subtracts 8 * sum(x) for its offset, Q4_1 adds m * s
                let mut isum = _mm512_set1_epi32(if q41 { 0 } else { -8 * xsum[tb] });
                for c in 0..4 {
                    isum = _mm512_dpbusd_epi32(
                        isum,
                        lo[c],
                        _mm512_set1_epi32(std::ptr::read_unaligned(x.add(c))),
                    );
                    isum = _mm512_dpbusd_epi32(
                        isum,
                        hi[c],
                        _mm512_set1_epi32(std::ptr::read_unaligned(x.add(4 + c))),
                    );
                }
                let scale = _mm512_mul_ps(dw, _mm512_set1_ps(act.d[tb]));
                acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), scale, acc[j]);
                if q41 {
                    macc[j] = _mm512_fmadd_ps(mw, _mm512_set1_ps(act.s[tb]), macc[j]);
                }
            }
        }
        for j in 0..TN {
            let r = if q41 {
                _mm512_add_ps(acc[j], macc[j])
            } else {
                acc[j]
            };
            _mm512_storeu_ps(res[j].as_mut_ptr(), r);
        }
    }

    /// One group of 16 Q8_0 rows against TN tokens.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,fma,f16c")]
    pub unsafe fn group_q8<const TN: usize>(
        p: &PackedQ4,
        g: usize,
        act: &Q8_1Act,
        t0: usize,
        res: &mut [[f32; G]; TT],
    ) {
        let nb = p.cols / 32;
        let flip = _mm512_set1_epi32(0x8080_8080u32 as i32);
        let mut acc = [_mm512_setzero_ps(); TN];
        for b in 0..nb {
            let base = p.data.as_slice().as_ptr().add((g * nb + b) * p.gb);
            if TN == 1 {
                prefetch_ahead(base, p.gb);
            }
            let dw = _mm512_cvtph_ps(_mm256_loadu_si256(base as *const __m256i));
            // -128 * sum(w): x enters as x + 128
            let sums = _mm512_cvtepi16_epi32(_mm256_loadu_si256(base.add(32) as *const __m256i));
            let bias = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32::<7>(sums));
            let mut w = [_mm512_setzero_si512(); 8];
            for c in 0..8 {
                w[c] = _mm512_loadu_si512(base.add(64 + 64 * c) as *const _);
            }
            for j in 0..TN {
                let tb = (t0 + j) * nb + b;
                let x = act.qs.as_ptr().add(tb * 32) as *const i32;
                let mut isum = bias;
                for c in 0..8 {
                    let xu = _mm512_xor_si512(
                        _mm512_set1_epi32(std::ptr::read_unaligned(x.add(c))),
                        flip,
                    );
                    isum = _mm512_dpbusd_epi32(isum, xu, w[c]);
                }
                let scale = _mm512_mul_ps(dw, _mm512_set1_ps(act.d[tb]));
                acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), scale, acc[j]);
            }
        }
        for j in 0..TN {
            _mm512_storeu_ps(res[j].as_mut_ptr(), acc[j]);
        }
    }

    /// Bits `shift..shift + 4` of each lane's fifth-bit mask, moved to bit 4 of the lane's 4
    /// bytes (x * 0x00204081 places bit i at bit 8i; no partial products overlap).
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn fifth(qh: __m512i, shift: i32) -> __m512i {
        let b = _mm512_and_si512(
            _mm512_srlv_epi32(qh, _mm512_set1_epi32(shift)),
            _mm512_set1_epi32(0xF),
        );
        let spread = _mm512_mullo_epi32(b, _mm512_set1_epi32(0x0020_4081));
        _mm512_slli_epi32::<4>(_mm512_and_si512(spread, _mm512_set1_epi32(0x0101_0101)))
    }

    /// One group of 16 Q5_0 rows against TN tokens: nibbles plus fifth bits (spread from each
    /// lane's 32-bit mask into bit 4 of the bytes by a multiply), values 0..31 less 16.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,fma,f16c")]
    pub unsafe fn group_q5<const TN: usize>(
        p: &PackedQ4,
        g: usize,
        act: &Q8_1Act,
        xsum: &[i32],
        t0: usize,
        res: &mut [[f32; G]; TT],
    ) {
        let nb = p.cols / 32;
        let low = _mm512_set1_epi8(0x0F);

        let mut acc = [_mm512_setzero_ps(); TN];
        for b in 0..nb {
            let base = p.data.as_slice().as_ptr().add((g * nb + b) * p.gb);
            let dw = _mm512_cvtph_ps(_mm256_loadu_si256(base as *const __m256i));
            let qh = _mm512_loadu_si512(base.add(32) as *const _);
            let mut lo = [_mm512_setzero_si512(); 4];
            let mut hi = [_mm512_setzero_si512(); 4];
            for c in 0..4 {
                let v = _mm512_loadu_si512(base.add(96 + 64 * c) as *const _);
                lo[c] = _mm512_or_si512(_mm512_and_si512(v, low), fifth(qh, 4 * c as i32));
                hi[c] = _mm512_or_si512(
                    _mm512_and_si512(_mm512_srli_epi16(v, 4), low),
                    fifth(qh, 16 + 4 * c as i32),
                );
            }
            for j in 0..TN {
                let tb = (t0 + j) * nb + b;
                let x = act.qs.as_ptr().add(tb * 32) as *const i32;
                let mut isum = _mm512_set1_epi32(-16 * xsum[tb]);
                for c in 0..4 {
                    isum = _mm512_dpbusd_epi32(
                        isum,
                        lo[c],
                        _mm512_set1_epi32(std::ptr::read_unaligned(x.add(c))),
                    );
                    isum = _mm512_dpbusd_epi32(
                        isum,
                        hi[c],
                        _mm512_set1_epi32(std::ptr::read_unaligned(x.add(4 + c))),
                    );
                }
                let scale = _mm512_mul_ps(dw, _mm512_set1_ps(act.d[tb]));
                acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), scale, acc[j]);
            }
        }
        for j in 0..TN {
            _mm512_storeu_ps(res[j].as_mut_ptr(), acc[j]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::qdot::{dot_q4_0_ref, dot_q4_1_ref, dot_q8_0_ref};

    #[test]
    fn packed_q4_0_matches_row_dots() {
        if !has_packed_kernel() {
            eprintln!("no AVX-512 VNNI here: Q4_0 stays on the row kernels");
            assert!(PackedQ4::new(&QMat {
                ty: GgmlType::Q4_0,
                rows: 0,
                cols: 32,
                data: &[],
                packed: None
            })
            .is_none());
            return;
        }
        for (ty, n, k, t) in [
            (GgmlType::Q4_0, 16, 64, 1),
            (GgmlType::Q4_0, 37, 576, 5),
            (GgmlType::Q4_0, 5, 1536, 2),
            (GgmlType::Q4_1, 37, 576, 5),
            (GgmlType::Q4_1, 16, 1536, 1),
            (GgmlType::Q8_0, 37, 576, 5),
            (GgmlType::Q8_0, 3, 64, 1),
            (GgmlType::Q5_0, 37, 576, 5),
            (GgmlType::Q5_0, 16, 1536, 1),
        ] {
            let bytes = super::super::test_matrix(ty, n, k, 3);
            let w = QMat::new(ty, n, k, &bytes).unwrap();
            let p = PackedQ4::new(&w).expect("packable");
            let (mut got, mut want) = (vec![0f32; k], vec![0f32; k]);
            for r in 0..n {
                p.dequantize_row(r, &mut got);
                crate::quant::dequantize(ty, w.row(r), &mut want).unwrap();
                assert_eq!(got, want, "{ty} row {r} read back from the copy");
            }
            let x = super::super::test_data(t * k, 4);
            let mut act = Q8_1Act::default();
            act.quantize(&x);
            let mut sums = Vec::new();
            block_sums(&act, &mut sums);
            let mut y = vec![0f32; t * n];
            // SAFETY: kernel detected; y is (t, n).
            unsafe { p.gemm_groups(0, p.groups(), &act, &sums, t, y.as_mut_ptr(), n) };
            for i in 0..t {
                for r in 0..n {
                    let a = act.token(i, k / 32);
                    let want = match ty {
                        GgmlType::Q4_0 => dot_q4_0_ref(w.row(r), &a),
                        GgmlType::Q4_1 => dot_q4_1_ref(w.row(r), &a),
                        GgmlType::Q5_0 => crate::kernels::qdot_q5::dot_q5_0_ref(w.row(r), &a),
                        _ => dot_q8_0_ref(w.row(r), &a),
                    };
                    let got = y[i * n + r];
                    assert!(
                        (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
                        "n={n} k={k} ({i},{r}): {got} vs {want}"
                    );
                }
            }
            // one token at a time gives the same bits as the batch
            for i in 0..t {
                let xi = &x[i * k..(i + 1) * k];
                let mut a1 = Q8_1Act::default();
                a1.quantize(xi);
                let mut s1 = Vec::new();
                block_sums(&a1, &mut s1);
                let mut y1 = vec![0f32; n];
                // SAFETY: as above.
                unsafe { p.gemm_groups(0, p.groups(), &a1, &s1, 1, y1.as_mut_ptr(), n) };
                assert_eq!(&y1[..], &y[i * n..(i + 1) * n]);
            }
        }
    }
}
