//! The AVX-512 steps of `bf16pack`: f32 lines to bf16 pairs with `vcvtne2ps2bf16` (Intel SDM,
//! "VCVTNE2PS2BF16": nearest even, denormals to signed zero, as `bf16gemm::to_bf16`), the
//! interleave of two lines into pairs (`vpermw`), and 16 x 16 transposes of u32 in registers
//! (unpack 32, unpack 64, two 128-bit lane shuffles). Reads past an operand's end are masked
//! off, never made.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Where the 16 pairs from pair p0 (a multiple of 16) of row r go in a pack of A: plain rows
/// of w pairs, or AMX tiles (`tiled`): each 16-row group a run of k-steps, each step 16 rows
/// of 16 pairs (1 KiB, what one `tileloadd` reads at a 64-byte stride).
#[derive(Clone, Copy)]
pub(crate) struct RowLayout {
    pub w: usize,
    pub tiled: bool,
}

impl RowLayout {
    #[inline(always)]
    pub fn at(&self, r: usize, p0: usize) -> usize {
        if self.tiled {
            ((r / 16) * (self.w / 16) + p0 / 16) * 256 + (r % 16) * 16
        } else {
            r * self.w + p0
        }
    }
}

/// Word indices that interleave the two halves of a register: word 2j <- j, 2j+1 <- 16 + j.
static INTERLEAVE: [u16; 32] = {
    let mut t = [0u16; 32];
    let mut j = 0;
    while j < 16 {
        t[2 * j] = j as u16;
        t[2 * j + 1] = 16 + j as u16;
        j += 1;
    }
    t
};

#[inline(always)]
fn mask(n: usize) -> u16 {
    if n >= 16 {
        0xFFFF
    } else {
        ((1u32 << n) - 1) as u16
    }
}

/// The first `len` (at most 32, zero past) floats at `ptr` -> 16 pairs.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn cvt_pairs(ptr: *const f32, len: usize) -> __m512i {
    let lo = _mm512_maskz_loadu_ps(mask(len), ptr);
    let hi = _mm512_maskz_loadu_ps(mask(len.saturating_sub(16)), ptr.wrapping_add(16));
    std::mem::transmute::<__m512bh, __m512i>(_mm512_cvtne2ps_pbh(hi, lo))
}

/// 16 lanes of two lines -> 16 pairs (lo[j], hi[j]).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn interleave(lo: __m512, hi: __m512) -> __m512i {
    let v = std::mem::transmute::<__m512bh, __m512i>(_mm512_cvtne2ps_pbh(hi, lo));
    _mm512_permutexvar_epi16(_mm512_loadu_si512(INTERLEAVE.as_ptr().cast()), v)
}

/// The first `n` lanes of line `kk` (< k, else zeros) at `ptr + kk ks`.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn line(ptr: *const f32, ks: isize, kk: usize, k: usize, n: usize) -> __m512 {
    if kk < k {
        _mm512_maskz_loadu_ps(mask(n), ptr.offset(kk as isize * ks))
    } else {
        _mm512_setzero_ps()
    }
}

/// Rows r[i] -> columns: r[i] lane j becomes r[j] lane i.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn transpose16(r: &mut [__m512i; 16]) {
    let mut t = [_mm512_setzero_si512(); 16];
    for i in 0..8 {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    // u[4g + c], lane l: rows 4g..4g+4 of column 4l + c
    let mut u = [_mm512_setzero_si512(); 16];
    for g in 0..4 {
        let b = 4 * g;
        u[b] = _mm512_unpacklo_epi64(t[b], t[b + 2]);
        u[b + 1] = _mm512_unpackhi_epi64(t[b], t[b + 2]);
        u[b + 2] = _mm512_unpacklo_epi64(t[b + 1], t[b + 3]);
        u[b + 3] = _mm512_unpackhi_epi64(t[b + 1], t[b + 3]);
    }
    // column 4l + c: lane g from u[4g + c] lane l, a 4 x 4 transpose of 128-bit lanes
    for c in 0..4 {
        let x0 = _mm512_shuffle_i32x4::<0x44>(u[c], u[4 + c]);
        let x1 = _mm512_shuffle_i32x4::<0xEE>(u[c], u[4 + c]);
        let y0 = _mm512_shuffle_i32x4::<0x44>(u[8 + c], u[12 + c]);
        let y1 = _mm512_shuffle_i32x4::<0xEE>(u[8 + c], u[12 + c]);
        r[c] = _mm512_shuffle_i32x4::<0x88>(x0, y0);
        r[4 + c] = _mm512_shuffle_i32x4::<0xDD>(x0, y0);
        r[8 + c] = _mm512_shuffle_i32x4::<0x88>(x1, y1);
        r[12 + c] = _mm512_shuffle_i32x4::<0xDD>(x1, y1);
    }
}

/// Row r of A, contiguous along k: `(x[2p], x[2p+1])` for p < lay.w (zero past k), placed by
/// `lay`.
///
/// # Safety
/// `ptr` must hold k floats, `out` the row; AVX512-BF16 must be there.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
pub(crate) unsafe fn pairs_along(
    ptr: *const f32,
    k: usize,
    out: &mut [u32],
    r: usize,
    lay: RowLayout,
) {
    for p0 in (0..lay.w).step_by(16) {
        let v = cvt_pairs(ptr.wrapping_add(2 * p0), k.saturating_sub(2 * p0));
        let dst = out.as_mut_ptr().add(lay.at(r, p0));
        _mm512_mask_storeu_epi32(dst.cast(), mask(lay.w - p0), v);
    }
}

/// Lines contiguous across k (element (kk, l) at `ptr[kk ks + l]`, l < n): `out[p stride + l]
/// = (line 2p, line 2p+1)[l]` for every p < out.len() / stride and l < stride (zero past k
/// and n).
///
/// # Safety
/// The elements with kk < k, l < n must be readable; stride a multiple of 16; AVX512-BF16.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
pub(crate) unsafe fn pairs_across(
    ptr: *const f32,
    ks: isize,
    k: usize,
    n: usize,
    out: &mut [u32],
    stride: usize,
) {
    debug_assert!(stride.is_multiple_of(16));
    for (p, g) in out.chunks_exact_mut(stride).enumerate() {
        for l0 in (0..stride).step_by(16) {
            let live = n.saturating_sub(l0).min(16);
            let v = if live == 0 {
                _mm512_setzero_si512()
            } else {
                let at = ptr.add(l0);
                interleave(
                    line(at, ks, 2 * p, k, live),
                    line(at, ks, 2 * p + 1, k, live),
                )
            };
            _mm512_storeu_si512(g.as_mut_ptr().add(l0).cast(), v);
        }
    }
}

/// Rows running across k (element (r, kk) at `ptr[r + kk ks]`, r < rows) into rows of pairs:
/// `(A(r, 2p), A(r, 2p+1))` for p < lay.w (zero past k), placed by `lay`.
///
/// # Safety
/// The elements with r < rows, kk < k must be readable; out must hold the rows; AVX512-BF16.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
pub(crate) unsafe fn pairs_across_transposed(
    ptr: *const f32,
    ks: isize,
    k: usize,
    rows: usize,
    out: &mut [u32],
    lay: RowLayout,
) {
    let w = lay.w;
    let mut v = [_mm512_setzero_si512(); 16];
    for r0 in (0..rows).step_by(16) {
        let nr = (rows - r0).min(16);
        let at = ptr.add(r0);
        for p0 in (0..w).step_by(16) {
            // v[q] lane r: pair p0 + q of row r0 + r
            for (q, x) in v.iter_mut().enumerate() {
                let p = p0 + q;
                *x = interleave(line(at, ks, 2 * p, k, nr), line(at, ks, 2 * p + 1, k, nr));
            }
            transpose16(&mut v);
            let m = mask(w - p0);
            for (r, x) in v.iter().enumerate().take(nr) {
                _mm512_mask_storeu_epi32(out.as_mut_ptr().add(lay.at(r0 + r, p0)).cast(), m, *x);
            }
        }
    }
}

/// Columns contiguous along k (column c at `ptr + c cs`, c < cols) into a panel of NR = 32
/// columns: `panel[p 32 + c] = (col c [2p], col c [2p+1])` (zero past k and cols).
///
/// # Safety
/// Each column c < cols must hold k floats; panel.len() a multiple of 32; AVX512-BF16.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
pub(crate) unsafe fn pairs_along_transposed(
    ptr: *const f32,
    cs: isize,
    k: usize,
    cols: usize,
    panel: &mut [u32],
) {
    const NR: usize = 32;
    let kp2 = panel.len() / NR;
    let mut v = [_mm512_setzero_si512(); 16];
    for c0 in (0..NR).step_by(16) {
        for p0 in (0..kp2).step_by(16) {
            // v[c] lane q: pair p0 + q of column c0 + c
            for (c, x) in v.iter_mut().enumerate() {
                *x = if c0 + c < cols {
                    let col = ptr.offset((c0 + c) as isize * cs);
                    cvt_pairs(col.wrapping_add(2 * p0), k.saturating_sub(2 * p0))
                } else {
                    _mm512_setzero_si512()
                };
            }
            transpose16(&mut v);
            for (q, x) in v.iter().enumerate().take(kp2 - p0) {
                _mm512_storeu_si512(panel.as_mut_ptr().add((p0 + q) * NR + c0).cast(), *x);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transpose16_transposes() {
        if !crate::kernels::bf16gemm::available() {
            eprintln!("no AVX512-BF16 on this CPU: the packers are not used here");
            return;
        }
        let src: Vec<u32> = (0..256).collect();
        let mut got = [0u32; 256];
        // SAFETY: AVX-512 is there (checked above); the arrays hold 16 x 16.
        unsafe {
            let mut v = [_mm512_setzero_si512(); 16];
            for (i, x) in v.iter_mut().enumerate() {
                *x = _mm512_loadu_si512(src.as_ptr().add(16 * i).cast());
            }
            transpose16(&mut v);
            for (i, x) in v.iter().enumerate() {
                _mm512_storeu_si512(got.as_mut_ptr().add(16 * i).cast(), *x);
            }
        }
        for i in 0..16 {
            for j in 0..16 {
                assert_eq!(got[i * 16 + j], src[j * 16 + i], "({i}, {j})");
            }
        }
    }

    /// The instruction's rounding is the scalar `to_bf16`, on every kind of value.
    #[test]
    fn vector_conversion_matches_to_bf16() {
        if !crate::kernels::bf16gemm::available() {
            eprintln!("no AVX512-BF16 on this CPU: the packers are not used here");
            return;
        }
        let mut bits: Vec<u32> = vec![
            0,
            0x8000_0000,
            1,
            0x8000_0001,
            0x007F_FFFF,
            0x0080_0000,
            0x7F80_0000,
            0xFF80_0000,
            0x7FC0_0000,
            0x7F80_0001,
            0x3F80_8000,
            0x3F81_8000,
            0x3F80_7FFF,
            0x7F7F_FFFF,
        ];
        let mut s = 0x1234_5678u32;
        while bits.len() < 4096 {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            bits.push(s);
        }
        let x: Vec<f32> = bits.iter().map(|&b| f32::from_bits(b)).collect();
        let mut out = vec![0u32; x.len() / 2];
        // SAFETY: checked above; x holds 2 * out.len() floats.
        let lay = RowLayout {
            w: out.len(),
            tiled: false,
        };
        unsafe { pairs_along(x.as_ptr(), x.len(), &mut out, 0, lay) };
        for (p, &o) in out.iter().enumerate() {
            let want = crate::kernels::bf16gemm::to_bf16(x[2 * p]) as u32
                | (crate::kernels::bf16gemm::to_bf16(x[2 * p + 1]) as u32) << 16;
            assert_eq!(o, want, "{:#x} {:#x}", bits[2 * p], bits[2 * p + 1]);
        }
    }
}
