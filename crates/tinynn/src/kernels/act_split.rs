//! Activations as two 8-bit planes for the integer products of the legacy types: per 32-block,
//! x ≈ u · (128·hi + lo) with u = amax / (127·128), hi the block's Q8 rounding (ggml's
//! `quantize_row_q8_0`) and lo the rounding of what hi leaves, in 128ths of its step. Both
//! planes go through `vpdpbusd` against the same unpacked weights and meet as
//! `(Σw·hi << 7) + Σw·lo` (`repack_vnni`); the AVX2 row dots and tiles run once per plane
//! and add (`rowdot`, `qgemm`), and the dequantizing f32 path multiplies the same values
//! (`fallback`): a 15-bit activation for twice the multiply-adds of one 8-bit plane.
//!
//! Why: SmolLM2's Q4_1 file dequantized to F32 *is* the unquantized model, so every bit of
//! KL divergence between the two is activation rounding. ggml's single 8-bit plane (with its
//! fp16 scale and fp16 block sum) costs KLD 0.0036 on gpl-3.txt; the second plane makes that
//! rounding 128 times finer (docs/benchmarks.md, "Fidelity", has the measured figures).

use super::qdot::Q8_1Act;

/// X (T, K) as two 8-bit planes per 32-block, each a Q8_1 form of its own (scales and sums
/// in f32) so that every Q8_1 kernel can take either plane: `hi` (d = amax / 127) and `lo`
/// (d = amax / (127 · 128)), whose values add up to x's rounding. Plus what the VNNI kernels
/// read for the two together.
#[derive(Default)]
pub struct SplitAct {
    /// The coarse plane: round(x · 127 / amax), in −127..=127; d = amax / 127, s = d · Σhi.
    pub hi: Q8_1Act,
    /// The fine plane: round((x · 127 / amax − hi) · 128), in −64..=64; d = amax / (127 · 128)
    /// (the unit of the combined integer 128·hi + lo), s = d · Σlo.
    pub lo: Q8_1Act,
    /// Per block: Σ(128·hi + lo), the integer sum of the block's values.
    pub sum: Vec<i32>,
    /// Per block: Σhi, the coarse plane's integer sum (the interleaved kernels' coarse mode).
    pub sum_hi: Vec<i32>,
    /// Per block: lo.d · sum, the block's represented sum in f32 (Q4_1's min term).
    pub s: Vec<f32>,
}

/// Round to nearest, ties to even, for |x| < 2^22.
#[inline(always)]
fn rne(x: f32) -> f32 {
    (x + 12582912.0) - 12582912.0
}

impl SplitAct {
    /// Block tb's integer sum, the unit of its integers and its represented sum: of the two
    /// planes together, or (COARSE) of the coarse plane alone.
    #[inline(always)]
    pub fn unit_sums<const COARSE: bool>(&self, tb: usize) -> (i32, f32, f32) {
        if COARSE {
            (self.sum_hi[tb], self.hi.d[tb], self.hi.s[tb])
        } else {
            (self.sum[tb], self.lo.d[tb], self.s[tb])
        }
    }

    /// Quantize `x` (a multiple of 32 long).
    pub fn quantize(&mut self, x: &[f32]) {
        let nb = x.len() / 32;
        for p in [&mut self.hi, &mut self.lo] {
            p.d.resize(nb, 0.0);
            p.s.resize(nb, 0.0);
            p.qs.resize(nb * 32, 0);
        }
        self.sum.resize(nb, 0);
        self.sum_hi.resize(nb, 0);
        self.s.resize(nb, 0.0);
        let out = Raw::of(self);
        let simd = cfg!(target_arch = "x86_64")
            && super::dot::simd_level() != super::dot::SimdLevel::Scalar;
        // a prefill's blocks split among the threads (each block is its own), decode's on
        // the caller
        crate::team::par_ranges(nb, 512, |range| {
            #[cfg(target_arch = "x86_64")]
            if simd {
                // SAFETY: AVX2 was detected; the buffers were sized above, and this task
                // alone writes these blocks.
                unsafe { quantize_avx2(&out, x, range) };
                return;
            }
            // SAFETY: as above.
            unsafe { quantize_ref(&out, x, range) };
        });
    }

    /// The portable quantizer (the reference the SIMD one must equal); buffers must be sized.
    pub fn quantize_ref(&mut self, x: &[f32]) {
        // SAFETY: the buffers hold x's blocks (sized by the caller), borrowed mutably here.
        unsafe { quantize_ref(&Raw::of(self), x, 0..x.len() / 32) }
    }
}

/// The planes' buffers as pointers, for tasks that each write their own blocks.
struct Raw {
    hq: *mut i8,
    lq: *mut i8,
    hd: *mut f32,
    hs: *mut f32,
    ld: *mut f32,
    ls: *mut f32,
    sum: *mut i32,
    sum_hi: *mut i32,
    s: *mut f32,
}

// SAFETY: each task writes only its own blocks (see `SplitAct::quantize`).
unsafe impl Send for Raw {}
unsafe impl Sync for Raw {}

impl Raw {
    fn of(a: &mut SplitAct) -> Self {
        Self {
            hq: a.hi.qs.as_mut_ptr(),
            lq: a.lo.qs.as_mut_ptr(),
            hd: a.hi.d.as_mut_ptr(),
            hs: a.hi.s.as_mut_ptr(),
            ld: a.lo.d.as_mut_ptr(),
            ls: a.lo.s.as_mut_ptr(),
            sum: a.sum.as_mut_ptr(),
            sum_hi: a.sum_hi.as_mut_ptr(),
            s: a.s.as_mut_ptr(),
        }
    }

    /// Block b's scales and sums from its amax and the two planes' integer sums (its
    /// planes are written by the caller).
    ///
    /// # Safety
    /// Block b must be within the buffers and written by this caller alone.
    #[inline(always)]
    unsafe fn set_scales(&self, b: usize, amax: f32, sum_hi: i32, sum_lo: i32) {
        let unit = amax / (127.0 * 128.0);
        let d = amax / 127.0;
        *self.hd.add(b) = d;
        *self.hs.add(b) = d * sum_hi as f32;
        *self.ld.add(b) = unit;
        *self.ls.add(b) = unit * sum_lo as f32;
        let sum = 128 * sum_hi + sum_lo;
        *self.sum.add(b) = sum;
        *self.sum_hi.add(b) = sum_hi;
        *self.s.add(b) = unit * sum as f32;
    }
}

/// The portable quantizer of blocks `blocks` of x.
///
/// # Safety
/// As `Raw::set_block` for each of the blocks.
unsafe fn quantize_ref(out: &Raw, x: &[f32], blocks: std::ops::Range<usize>) {
    for b in blocks {
        let (amax, planes) = split_block(&x[b * 32..b * 32 + 32]);
        let (mut sh, mut sl) = (0i32, 0i32);
        for (j, (h, l)) in planes.enumerate() {
            *out.hq.add(b * 32 + j) = h as i8;
            *out.lq.add(b * 32 + j) = l as i8;
            (sh, sl) = (sh + h as i32, sl + l as i32);
        }
        out.set_scales(b, amax, sh, sl);
    }
}

/// The AVX2 quantizer of blocks `blocks` of x.
///
/// # Safety
/// AVX2 must be there; as `Raw::set_block` for each of the blocks.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn quantize_avx2(out: &Raw, x: &[f32], blocks: std::ops::Range<usize>) {
    use std::arch::x86_64::*;
    let k128 = _mm256_set1_ps(128.0);
    let abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFF_FFFF));
    for b in blocks {
        let p = x.as_ptr().add(b * 32);
        let v: [__m256; 4] = std::array::from_fn(|i| _mm256_loadu_ps(p.add(8 * i)));
        let m = v.iter().fold(_mm256_setzero_ps(), |m, v| {
            _mm256_max_ps(m, _mm256_and_ps(*v, abs))
        });
        let mut lanes = [0f32; 8];
        _mm256_storeu_ps(lanes.as_mut_ptr(), m);
        let amax = lanes.iter().fold(0f32, |a, b| a.max(*b));
        let id = _mm256_set1_ps(if amax != 0.0 { 127.0 / amax } else { 0.0 });
        let (mut h, mut l) = ([_mm256_setzero_si256(); 4], [_mm256_setzero_si256(); 4]);
        for i in 0..4 {
            let y = _mm256_mul_ps(v[i], id);
            // vcvtps2dq rounds to nearest even under the default MXCSR, as `rne`
            h[i] = _mm256_cvtps_epi32(y);
            l[i] = _mm256_cvtps_epi32(_mm256_mul_ps(
                _mm256_sub_ps(y, _mm256_cvtepi32_ps(h[i])),
                k128,
            ));
        }
        _mm256_storeu_si256(out.hq.add(b * 32) as *mut __m256i, pack32(&h));
        _mm256_storeu_si256(out.lq.add(b * 32) as *mut __m256i, pack32(&l));
        out.set_scales(b, amax, hsum(&h), hsum(&l));
    }
}

/// Four vectors of 8 i32 (each within i8) as 32 bytes in order: the packs interleave the
/// 128-bit lanes, the permute puts the 4-element runs back.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn pack32(v: &[std::arch::x86_64::__m256i; 4]) -> std::arch::x86_64::__m256i {
    use std::arch::x86_64::*;
    let a = _mm256_packs_epi32(v[0], v[1]);
    let b = _mm256_packs_epi32(v[2], v[3]);
    let c = _mm256_packs_epi16(a, b);
    _mm256_permutevar8x32_epi32(c, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7))
}

/// The sum of four vectors of 8 i32.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn hsum(v: &[std::arch::x86_64::__m256i; 4]) -> i32 {
    use std::arch::x86_64::*;
    let s = _mm256_add_epi32(_mm256_add_epi32(v[0], v[1]), _mm256_add_epi32(v[2], v[3]));
    let s = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256::<1>(s));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
    _mm_cvtsi128_si32(s)
}

impl SplitAct {
    /// Block `b`'s element `j` as the kernels see it: lo.d · (128·hi + lo).
    pub fn value(&self, b: usize, j: usize) -> f32 {
        self.lo.d[b] * (128 * self.hi.qs[b * 32 + j] as i32 + self.lo.qs[b * 32 + j] as i32) as f32
    }
}

/// Round `x` (whole 32-blocks) in place onto the values the two planes represent, as
/// `SplitAct::value` gives them, without keeping the planes: the products that dequantize
/// weights and multiply in f32 then see the integer kernels' activations.
pub fn round_in_place(x: &mut [f32]) {
    for blk in x.chunks_exact_mut(32) {
        let (amax, planes) = split_block(blk);
        let unit = amax / (127.0 * 128.0);
        // the planes borrow the block: read them all before writing it
        let mut q = [(0f32, 0f32); 32];
        q.iter_mut().zip(planes).for_each(|(d, p)| *d = p);
        for (v, (h, l)) in blk.iter_mut().zip(q) {
            *v = unit * (128 * h as i32 + l as i32) as f32;
        }
    }
}

/// One 32-block's absolute maximum and each element's (hi, lo) plane values, rounded to
/// nearest even: hi = rne(x·127/amax), lo = rne((x·127/amax - hi)·128). The one definition
/// of the rounding that `quantize_ref` stores and `round_in_place` multiplies back.
fn split_block(blk: &[f32]) -> (f32, impl Iterator<Item = (f32, f32)> + '_) {
    let amax = blk.iter().fold(0f32, |m, v| m.max(v.abs()));
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    let planes = blk.iter().map(move |v| {
        let y = v * id;
        let h = rne(y);
        (h, rne((y - h) * 128.0))
    });
    (amax, planes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_simd_quantizer_equals_the_reference_and_both_planes_stay_in_range() {
        let mut x = crate::kernels::test_data(32 * 40, 7);
        x[5] = 3.0; // an outlier in block 0
        x[64..96].fill(0.0); // a zero block
        let (mut a, mut r) = (SplitAct::default(), SplitAct::default());
        a.quantize(&x);
        r.quantize(&x); // sizes the buffers
        r.quantize_ref(&x);
        assert_eq!((&a.hi.qs, &a.lo.qs, &a.sum), (&r.hi.qs, &r.lo.qs, &r.sum));
        assert_eq!(
            (&a.hi.d, &a.lo.d, &a.hi.s, &a.lo.s, &a.s),
            (&r.hi.d, &r.lo.d, &r.hi.s, &r.lo.s, &r.s)
        );
        assert!(a.hi.qs.iter().all(|v| (-127..=127).contains(v)));
        assert!(a.lo.qs.iter().all(|v| (-64..=64).contains(v)));
        assert!(a.lo.d[2] == 0.0 && a.sum[2] == 0);
    }

    #[test]
    fn two_planes_round_128_times_finer_than_one() {
        let x = crate::kernels::test_data(32 * 64, 3);
        let mut a = SplitAct::default();
        a.quantize(&x);
        for (b, blk) in x.chunks_exact(32).enumerate() {
            let amax = blk.iter().fold(0f32, |m, v| m.max(v.abs()));
            let step = amax / 127.0;
            let mut sum = 0f64;
            for (j, v) in blk.iter().enumerate() {
                let err = (a.value(b, j) - v).abs();
                assert!(
                    err <= step / 256.0 * 1.01 + 1e-7,
                    "block {b} elem {j}: {err} vs step {step}"
                );
                sum += a.value(b, j) as f64;
            }
            assert!((a.s[b] as f64 - sum).abs() <= 1e-4 * (1.0 + sum.abs()));
        }
    }

    #[test]
    fn rounding_in_place_gives_the_values_the_planes_hold() {
        let mut x = crate::kernels::test_data(32 * 8, 5);
        x[40..72].fill(0.0);
        let mut a = SplitAct::default();
        a.quantize(&x);
        round_in_place(&mut x);
        for (i, v) in x.iter().enumerate() {
            assert_eq!(*v, a.value(i / 32, i % 32), "element {i}");
        }
    }
}
