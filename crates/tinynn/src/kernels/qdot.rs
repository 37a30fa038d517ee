//! Integer dot products of a quantized weight row with activations quantized to 8 bits,
//! as ggml's `ggml_vec_dot_q4_1_q8_1`: per 32-block, d_w * d_x * sum(q_w * q_x) + m_w * s_x,
//! where s_x = fp16(d_x * sum(q_x)) is stored with the activation block. This is decode's
//! hot loop: it streams each Q4_1 weight once, as 4-bit integers, with no f32 copy.
//! An AVX2 build (maddubs + madd, as ggml's `mul_sum_us8_pairs_float`) sits beside the
//! scalar reference that the tests compare it with.

use half::f16;

/// Activations quantized to Q8_1 blocks of 32: scale d, stored sum s, and 8-bit values.
#[derive(Default)]
pub struct Q8_1Act {
    pub d: Vec<f32>,
    pub s: Vec<f32>,
    pub qs: Vec<i8>,
}

/// Round to nearest, ties to even, for |x| < 2^22.
#[inline(always)]
fn rne(x: f32) -> f32 {
    (x + 12582912.0) - 12582912.0
}

/// One token's blocks of a quantized (T, K) matrix, borrowed as a row.
#[derive(Clone, Copy)]
pub struct Q8_1Row<'a> {
    pub d: &'a [f32],
    pub s: &'a [f32],
    pub qs: &'a [i8],
}

impl Q8_1Act {
    /// Token `t`'s `nb` blocks.
    pub fn token(&self, t: usize, nb: usize) -> Q8_1Row<'_> {
        Q8_1Row {
            d: &self.d[t * nb..(t + 1) * nb],
            s: &self.s[t * nb..(t + 1) * nb],
            qs: &self.qs[t * nb * 32..(t + 1) * nb * 32],
        }
    }

    /// All blocks, as a row.
    pub fn row(&self) -> Q8_1Row<'_> {
        Q8_1Row {
            d: &self.d,
            s: &self.s,
            qs: &self.qs,
        }
    }

    /// Quantize `x` (a multiple of 32 long) as ggml's AVX2 `quantize_row_q8_1`.
    pub fn quantize(&mut self, x: &[f32]) {
        let nb = x.len() / 32;
        self.d.resize(nb, 0.0);
        self.s.resize(nb, 0.0);
        self.qs.resize(nb * 32, 0);
        #[cfg(target_arch = "x86_64")]
        if super::dot::simd_level() == super::dot::SimdLevel::Avx512
            && is_x86_feature_detected!("f16c")
        {
            // SAFETY: AVX-512 and F16C were detected; the buffers were sized above.
            unsafe { self.quantize_avx512(x) };
            return;
        }
        self.quantize_ref(x)
    }

    /// The portable quantizer (the reference the SIMD one must equal); buffers must be sized.
    pub fn quantize_ref(&mut self, x: &[f32]) {
        for (b, blk) in x.chunks_exact(32).enumerate() {
            let amax = blk.iter().fold(0f32, |m, v| m.max(v.abs()));
            let d = amax / 127.0;
            let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
            let mut sum = 0i32;
            for (o, v) in self.qs[b * 32..(b + 1) * 32].iter_mut().zip(blk) {
                let q = rne(v * id) as i32;
                sum += q;
                *o = q as i8;
            }
            self.d[b] = f16::from_f32(d).to_f32();
            self.s[b] = f16::from_f32(d * sum as f32).to_f32();
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512bw,f16c")]
    unsafe fn quantize_avx512(&mut self, x: &[f32]) {
        use std::arch::x86_64::*;
        #[inline(always)]
        unsafe fn round_f16(v: f32) -> f32 {
            _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtps_ph::<{ _MM_FROUND_TO_NEAREST_INT }>(
                _mm_set_ss(v),
            )))
        }
        let nb = x.len() / 32;
        assert!(self.qs.len() >= nb * 32 && self.d.len() >= nb && self.s.len() >= nb);
        for b in 0..nb {
            let a = _mm512_loadu_ps(x.as_ptr().add(b * 32));
            let c = _mm512_loadu_ps(x.as_ptr().add(b * 32 + 16));
            let amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(c)));
            let d = amax / 127.0;
            let id = _mm512_set1_ps(if amax != 0.0 { 127.0 / amax } else { 0.0 });
            // vcvtps2dq rounds to nearest even under the default MXCSR, as ggml's AVX path
            let qa = _mm512_cvtps_epi32(_mm512_mul_ps(a, id));
            let qc = _mm512_cvtps_epi32(_mm512_mul_ps(c, id));
            let sum = _mm512_reduce_add_epi32(_mm512_add_epi32(qa, qc));
            let out = self.qs.as_mut_ptr().add(b * 32);
            _mm_storeu_si128(out as *mut __m128i, _mm512_cvtepi32_epi8(qa));
            _mm_storeu_si128(out.add(16) as *mut __m128i, _mm512_cvtepi32_epi8(qc));
            self.d[b] = round_f16(d);
            self.s[b] = round_f16(d * sum as f32);
        }
    }
}

const Q4_1_BYTES: usize = 20;

/// Scalar reference: a Q4_1 row (K/32 blocks of 20 bytes) against Q8_1 activations.
pub fn dot_q4_1_ref(row: &[u8], a: &Q8_1Row) -> f32 {
    let mut sum = 0f32;
    for (b, blk) in row.chunks_exact(Q4_1_BYTES).enumerate() {
        let d = f16::from_le_bytes([blk[0], blk[1]]).to_f32();
        let m = f16::from_le_bytes([blk[2], blk[3]]).to_f32();
        let q = &a.qs[b * 32..(b + 1) * 32];
        let mut isum = 0i32;
        for j in 0..16 {
            isum += (blk[4 + j] & 0x0F) as i32 * q[j] as i32
                + (blk[4 + j] >> 4) as i32 * q[j + 16] as i32;
        }
        sum += d * a.d[b] * isum as f32 + m * a.s[b];
    }
    sum
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q4_1_avx2(row: &[u8], a: &Q8_1Row) -> f32 {
    use std::arch::x86_64::*;
    let nb = row.len() / Q4_1_BYTES;
    assert!(a.qs.len() >= nb * 32 && a.d.len() >= nb && a.s.len() >= nb);
    let low = _mm256_set1_epi8(0x0F);
    let ones = _mm256_set1_epi16(1);
    let mut acc = _mm256_setzero_ps();
    let mut msum = 0f32;
    for b in 0..nb {
        let p = row.as_ptr().add(b * Q4_1_BYTES);
        let dm = _mm_cvtph_ps(_mm_cvtsi32_si128(std::ptr::read_unaligned(p as *const i32)));
        let (d, m) = (_mm_cvtss_f32(dm), _mm_cvtss_f32(_mm_shuffle_ps(dm, dm, 1)));
        let raw = _mm_loadu_si128(p.add(4) as *const __m128i);
        // elements 0..15 are the low nibbles, 16..31 the high ones
        let w = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), low);
        let x = _mm256_loadu_si256(a.qs.as_ptr().add(b * 32) as *const __m256i);
        let prod = _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), ones);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d * a.d[b]), _mm256_cvtepi32_ps(prod), acc);
        msum += m * a.s[b];
    }
    hsum8(acc) + msum
}

/// Horizontal sum of 8 lanes in ggml's `hsum_float_8` order (the tiles use it too, so that
/// both give the same bits).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) unsafe fn hsum8(acc: std::arch::x86_64::__m256) -> f32 {
    use std::arch::x86_64::*;
    let h = _mm_add_ps(_mm256_extractf128_ps(acc, 1), _mm256_castps256_ps128(acc));
    let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    let h = _mm_add_ss(h, _mm_movehdup_ps(h));
    _mm_cvtss_f32(h)
}

const Q8_0_BYTES: usize = 34;

/// Scalar reference: a Q8_0 row (K/32 blocks of 34 bytes) against 8-bit activations, as
/// ggml's `ggml_vec_dot_q8_0_q8_0` (the activation's stored sum is not used).
pub fn dot_q8_0_ref(row: &[u8], a: &Q8_1Row) -> f32 {
    let mut sum = 0f32;
    for (b, blk) in row.chunks_exact(Q8_0_BYTES).enumerate() {
        let d = f16::from_le_bytes([blk[0], blk[1]]).to_f32();
        let q = &a.qs[b * 32..(b + 1) * 32];
        let isum: i32 = blk[2..]
            .iter()
            .zip(q)
            .map(|(w, x)| (*w as i8) as i32 * *x as i32)
            .sum();
        sum += d * a.d[b] * isum as f32;
    }
    sum
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q8_0_avx2(row: &[u8], a: &Q8_1Row) -> f32 {
    use std::arch::x86_64::*;
    let nb = row.len() / Q8_0_BYTES;
    assert!(a.qs.len() >= nb * 32 && a.d.len() >= nb);
    let ones = _mm256_set1_epi16(1);
    let mut acc = _mm256_setzero_ps();
    for b in 0..nb {
        let p = row.as_ptr().add(b * Q8_0_BYTES);
        let d = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(std::ptr::read_unaligned(
            p as *const u16,
        ) as i32)));
        let w = _mm256_loadu_si256(p.add(2) as *const __m256i);
        let x = _mm256_loadu_si256(a.qs.as_ptr().add(b * 32) as *const __m256i);
        // |w| (unsigned) times x with w's sign, so maddubs sees u8 x i8
        let prod = _mm256_madd_epi16(
            _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w)),
            ones,
        );
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d * a.d[b]), _mm256_cvtepi32_ps(prod), acc);
    }
    hsum8(acc)
}

const Q4_0_BYTES: usize = 18;

/// Scalar reference: a Q4_0 row (K/32 blocks of 18 bytes) against 8-bit activations, as
/// ggml's AVX2 `ggml_vec_dot_q4_0_q8_0`: nibbles minus 8, lane l of the block's integer
/// product holding elements 4l..4l+4, one fma per block and lane, `hsum_float_8`.
pub fn dot_q4_0_ref(row: &[u8], a: &Q8_1Row) -> f32 {
    let mut acc = [0f32; 8];
    for (b, blk) in row.chunks_exact(Q4_0_BYTES).enumerate() {
        let d = f16::from_le_bytes([blk[0], blk[1]]).to_f32() * a.d[b];
        let q = &a.qs[b * 32..(b + 1) * 32];
        let mut lanes = [0i32; 8];
        for (e, &x) in q.iter().enumerate() {
            let nib = if e < 16 {
                blk[2 + e] & 0x0F
            } else {
                blk[2 + e - 16] >> 4
            };
            lanes[e / 4] += (nib as i32 - 8) * x as i32;
        }
        for (acc, lane) in acc.iter_mut().zip(lanes) {
            *acc = d.mul_add(lane as f32, *acc);
        }
    }
    super::qdot_k::hsum8_ref(&acc)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q4_0_avx2(row: &[u8], a: &Q8_1Row) -> f32 {
    use std::arch::x86_64::*;
    let nb = row.len() / Q4_0_BYTES;
    assert!(a.qs.len() >= nb * 32 && a.d.len() >= nb);
    let (low, off) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(8));
    let ones = _mm256_set1_epi16(1);
    let mut acc = _mm256_setzero_ps();
    for b in 0..nb {
        let p = row.as_ptr().add(b * Q4_0_BYTES);
        let d = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(std::ptr::read_unaligned(
            p as *const u16,
        ) as i32)));
        let raw = _mm_loadu_si128(p.add(2) as *const __m128i);
        // bytes_from_nibbles_32, then [0, 15] -> [-8, 7]
        let w = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), low);
        let w = _mm256_sub_epi8(w, off);
        let x = _mm256_loadu_si256(a.qs.as_ptr().add(b * 32) as *const __m256i);
        // mul_sum_i8_pairs_float: |w| times x with w's sign, so maddubs sees u8 x i8
        let prod = _mm256_madd_epi16(
            _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w)),
            ones,
        );
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d * a.d[b]), _mm256_cvtepi32_ps(prod), acc);
    }
    hsum8(acc)
}

/// A Q4_0 row against 8-bit activations (Q8_1's values and scales serve as Q8_0's), on the
/// best kernel this CPU has.
pub fn dot_q4_0(row: &[u8], a: &Q8_1Row) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if has_fast_q4_1() {
        // SAFETY: the features were detected on this CPU; lengths are checked inside.
        return unsafe { dot_q4_0_avx2(row, a) };
    }
    dot_q4_0_ref(row, a)
}

/// A Q8_0 row against 8-bit activations, on the best kernel this CPU has.
pub fn dot_q8_0(row: &[u8], a: &Q8_1Row) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if has_fast_q4_1() {
        // SAFETY: the features were detected on this CPU; lengths are checked inside.
        return unsafe { dot_q8_0_avx2(row, a) };
    }
    dot_q8_0_ref(row, a)
}

/// Whether the fast integer kernels (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) run on this CPU.
pub fn has_fast_q4_1() -> bool {
    use super::dot::{simd_level, SimdLevel};
    #[cfg(target_arch = "x86_64")]
    {
        simd_level() != SimdLevel::Scalar && is_x86_feature_detected!("f16c")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (simd_level(), SimdLevel::Scalar);
        false
    }
}

/// A Q4_1 row against Q8_1 activations, on the best kernel this CPU has.
pub fn dot_q4_1(row: &[u8], a: &Q8_1Row) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if has_fast_q4_1() {
        // SAFETY: the features were detected on this CPU; lengths are checked inside.
        return unsafe { dot_q4_1_avx2(row, a) };
    }
    dot_q4_1_ref(row, a)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::{quantize, GgmlType};

    use super::super::test_data as data;

    #[test]
    fn simd_quantizer_equals_reference() {
        let mut x = super::super::test_data(32 * 37, 5);
        x[40..72].fill(0.0); // an all-zero block
        x[3] = 0.5 * 127.0 / 127.0; // ties are rounded to even by both
        let (mut a, mut b) = (Q8_1Act::default(), Q8_1Act::default());
        a.quantize(&x);
        b.d.resize(37, 0.0);
        b.s.resize(37, 0.0);
        b.qs.resize(37 * 32, 0);
        b.quantize_ref(&x);
        assert_eq!(a.qs, b.qs);
        assert_eq!(a.d, b.d);
        assert_eq!(a.s, b.s);
    }

    #[test]
    fn fast_q8_0_matches_reference_and_f32() {
        for k in [32, 576, 96] {
            let mut w = data(k, k as u64 + 3);
            w[5] = -1.0; // a block whose extreme is negative
            let mut row = vec![0u8; k / 32 * Q8_0_BYTES];
            quantize(GgmlType::Q8_0, &w, &mut row).unwrap();
            let x = data(k, 11 + k as u64);
            let mut a = Q8_1Act::default();
            a.quantize(&x);
            let (fast, slow) = (dot_q8_0(&row, &a.row()), dot_q8_0_ref(&row, &a.row()));
            assert!(
                (fast - slow).abs() <= 1e-4 * (1.0 + slow.abs()),
                "k={k}: {fast} vs {slow}"
            );
            let exact: f32 = w.iter().zip(&x).map(|(p, q)| p * q).sum();
            assert!(
                (slow - exact).abs() < 0.02 * (1.0 + exact.abs()),
                "k={k}: {slow} vs {exact}"
            );
        }
    }

    #[test]
    fn fast_q4_1_matches_reference_and_f32() {
        for k in [32, 576, 1536, 96] {
            let w = data(k, k as u64);
            let mut row = vec![0u8; k / 32 * Q4_1_BYTES];
            quantize(GgmlType::Q4_1, &w, &mut row).unwrap();
            let x = data(k, 7 + k as u64);
            let mut a = Q8_1Act::default();
            a.quantize(&x);
            let (fast, slow) = (dot_q4_1(&row, &a.row()), dot_q4_1_ref(&row, &a.row()));
            assert!(
                (fast - slow).abs() <= 1e-4 * (1.0 + slow.abs()),
                "k={k}: {fast} vs {slow}"
            );
            let mut wf = vec![0f32; k];
            crate::quant::dequantize(GgmlType::Q4_1, &row, &mut wf).unwrap();
            let exact: f32 = wf.iter().zip(&x).map(|(p, q)| p * q).sum();
            assert!(
                (slow - exact).abs() < 0.05 * (1.0 + exact.abs()),
                "k={k}: {slow} vs {exact}"
            );
        }
    }

    #[test]
    fn fast_q4_0_matches_reference_and_f32() {
        for k in [32, 256, 512, 1536, 96] {
            let w = data(k, k as u64 + 1);
            let mut row = vec![0u8; k / 32 * Q4_0_BYTES];
            quantize(GgmlType::Q4_0, &w, &mut row).unwrap();
            let x = data(k, 5 + k as u64);
            let mut a = Q8_1Act::default();
            a.quantize(&x);
            let (fast, slow) = (dot_q4_0(&row, &a.row()), dot_q4_0_ref(&row, &a.row()));
            // the reference keeps the AVX2 lanes and order
            assert_eq!(fast.to_bits(), slow.to_bits(), "k={k}: {fast} vs {slow}");
            let mut wf = vec![0f32; k];
            crate::quant::dequantize(GgmlType::Q4_0, &row, &mut wf).unwrap();
            let exact: f32 = wf.iter().zip(&x).map(|(p, q)| p * q).sum();
            assert!(
                (slow - exact).abs() < 0.03 * (1.0 + exact.abs()),
                "k={k}: {slow} vs {exact}"
            );
        }
    }
}
