//! Integer dot products of k-quant weight rows (Q4_K, Q5_K, Q6_K) with activations quantized
//! to Q8_K, for decode. Mirrors ggml-cpu's `quantize_row_q8_K_ref` (ggml-quants.c; the x86
//! build uses it as is) and the AVX2 paths of `ggml_vec_dot_q{4,5,6}_K_q8_K`
//! (ggml-cpu/arch/x86/quants.c), operation for operation where it decides the f32 result.
//!
//! Q8_K: per 256 elements, d = max / -127 (max the value of largest magnitude, kept in f32),
//! q = min(127, round(x / d)), and bsums, the sums of q over each 16 elements, which fold the
//! weights' per-sub-block mins (Q4_K, Q5_K) into 8 products per block.
//!
//! The scalar references reproduce the AVX2 kernels' lanes: lane l of every 32-element
//! product holds elements 4l..4l+4 (`maddubs` adds pairs, `madd` pairs of pairs); integer
//! sums are exact, so only the f32 steps (one fma per block and lane, `hsum_float_8`) need
//! the same order, and the two agree bit for bit.

use super::qdot::has_fast_q4_1;
use crate::quant::float::f16_at;
use crate::quant::QK_K;

/// Activations quantized to Q8_K blocks of 256: scale d (f32), 8-bit values, 16-element sums.
#[derive(Default)]
pub struct Q8KAct {
    pub d: Vec<f32>,
    pub qs: Vec<i8>,
    pub bsums: Vec<i16>,
}

/// The blocks of one row of Q8_K activations, borrowed.
pub struct Q8KRow<'a> {
    pub d: &'a [f32],
    pub qs: &'a [i8],
    pub bsums: &'a [i16],
}

/// Round to nearest, ties to even, for |x| < 2^22 (ggml's `nearest_int`).
#[inline(always)]
fn rne(x: f32) -> f32 {
    (x + 12582912.0) - 12582912.0
}

impl Q8KAct {
    /// Quantize `x` (a multiple of 256 long; a shorter tail is ignored) as ggml's
    /// `quantize_row_q8_K_ref`.
    pub fn quantize(&mut self, x: &[f32]) {
        self.clear();
        self.append(x);
    }

    fn clear(&mut self) {
        self.d.clear();
        self.qs.clear();
        self.bsums.clear();
    }

    /// [`Q8KAct::quantize`] of `x`'s blocks after those already held.
    fn append(&mut self, x: &[f32]) {
        #[cfg(target_arch = "x86_64")]
        if super::q8k_avx512::available() {
            let (b0, nb) = (self.d.len(), x.len() / QK_K);
            self.qs.resize((b0 + nb) * QK_K, 0);
            self.bsums.resize((b0 + nb) * QK_K / 16, 0);
            for (b, blk) in (b0..).zip(x.chunks_exact(QK_K)) {
                let qs = &mut self.qs[b * QK_K..(b + 1) * QK_K];
                let bs = &mut self.bsums[b * 16..(b + 1) * 16];
                // SAFETY: the CPU has the instructions; the slices hold one block
                self.d
                    .push(unsafe { super::q8k_avx512::block(blk, qs, bs) });
            }
            return;
        }
        self.append_scalar(x)
    }

    /// [`Q8KAct::quantize`] in scalar code (the reference of `q8k_avx512`).
    #[cfg(test)]
    pub(crate) fn quantize_scalar(&mut self, x: &[f32]) {
        self.clear();
        self.append_scalar(x);
    }

    fn append_scalar(&mut self, x: &[f32]) {
        for blk in x.chunks_exact(QK_K) {
            let (mut max, mut amax) = (0f32, 0f32);
            for &v in blk {
                if v.abs() > amax {
                    (amax, max) = (v.abs(), v);
                }
            }
            if amax == 0.0 {
                // ggml leaves bsums unset here; they only ever meet d = 0.
                self.d.push(0.0);
                self.qs.extend([0i8; QK_K]);
                self.bsums.extend([0i16; QK_K / 16]);
                continue;
            }
            // -127, not -128: ggml keeps the grid symmetric for its IQ kernels.
            let iscale = -127.0 / max;
            let start = self.qs.len();
            self.qs
                .extend(blk.iter().map(|v| rne(iscale * v).min(127.0) as i8));
            for g in self.qs[start..].chunks_exact(16) {
                self.bsums.push(g.iter().map(|&q| q as i16).sum());
            }
            self.d.push(1.0 / iscale);
        }
    }

    /// Token `t`'s `nb` blocks.
    pub fn token(&self, t: usize, nb: usize) -> Q8KRow<'_> {
        Q8KRow {
            d: &self.d[t * nb..(t + 1) * nb],
            qs: &self.qs[t * nb * QK_K..(t + 1) * nb * QK_K],
            bsums: &self.bsums[t * nb * QK_K / 16..(t + 1) * nb * QK_K / 16],
        }
    }

    /// Two planes of each token of `x` (rows of `k`, a multiple of 256), as tokens 2t (x's
    /// Q8_K blocks) and 2t + 1 (Q8_K blocks of what they leave, x - d q): a product against
    /// both, summed, sees x about 250 times finer than against the first alone (toy's rounding
    /// of the legacy types' activations, `act_split`, for the k-quants). `scratch` holds a
    /// token's second plane in f32 on its way.
    pub fn quantize_planes(&mut self, x: &[f32], k: usize, scratch: &mut Vec<f32>) {
        self.clear();
        for xt in x.chunks_exact(k) {
            let b0 = self.d.len();
            self.append(xt);
            scratch.clear();
            for (b, blk) in (b0..).zip(xt.chunks_exact(QK_K)) {
                let (d, q) = (self.d[b], &self.qs[b * QK_K..(b + 1) * QK_K]);
                scratch.extend(blk.iter().zip(q).map(|(v, &q)| v - d * q as f32));
            }
            self.append(scratch);
        }
    }

    /// All blocks, as a row.
    pub fn row(&self) -> Q8KRow<'_> {
        Q8KRow {
            d: &self.d,
            qs: &self.qs,
            bsums: &self.bsums,
        }
    }
}

pub const Q4_K_BYTES: usize = 144;
pub const Q5_K_BYTES: usize = 176;
pub const Q6_K_BYTES: usize = 210;

/// Q4_K/Q5_K's 12 packed bytes as 8 scales then 8 mins, each 6 bits (ggml's `utmp` shuffle
/// with kmask1..3; the same values as `get_scale_min_k4`).
#[inline(always)]
pub(crate) fn scales_mins_k4(s: &[u8]) -> [u8; 16] {
    const KMASK1: u32 = 0x3f3f3f3f;
    const KMASK2: u32 = 0x0f0f0f0f;
    const KMASK3: u32 = 0x03030303;
    let u = |i: usize| u32::from_le_bytes([s[4 * i], s[4 * i + 1], s[4 * i + 2], s[4 * i + 3]]);
    let (u0, u1, u2) = (u(0), u(1), u(2));
    let t = [
        u0 & KMASK1,
        (u2 & KMASK2) | (((u0 >> 6) & KMASK3) << 4),
        u1 & KMASK1,
        ((u2 >> 4) & KMASK2) | (((u1 >> 6) & KMASK3) << 4),
    ];
    let mut out = [0u8; 16];
    for (o, v) in out.chunks_exact_mut(4).zip(t) {
        o.copy_from_slice(&v.to_le_bytes());
    }
    out
}

/// The 8 AVX2 lanes of a 32-element integer product: lane l = sum over e in 4l..4l+4.
#[inline(always)]
fn lanes(w: impl Fn(usize) -> i32, x: &[i8]) -> [i32; 8] {
    let mut out = [0i32; 8];
    for (e, &xe) in x[..32].iter().enumerate() {
        out[e / 4] += w(e) * xe as i32;
    }
    out
}

/// ggml's `hsum_float_8`, in scalar.
#[inline(always)]
pub(crate) fn hsum8_ref(a: &[f32; 8]) -> f32 {
    let h = [a[4] + a[0], a[5] + a[1], a[6] + a[2], a[7] + a[3]];
    (h[0] + h[2]) + (h[1] + h[3])
}

/// Sub-block j's sum of 32 activations from the 16-element bsums.
#[inline(always)]
fn sum32(bs: &[i16], j: usize) -> i32 {
    bs[2 * j] as i32 + bs[2 * j + 1] as i32
}

/// Scalar reference: a Q4_K row (K/256 blocks of 144 bytes) against Q8_K activations.
pub fn dot_q4_k_ref(row: &[u8], a: &Q8KRow) -> f32 {
    let (mut acc, mut acc_m) = ([0f32; 8], [0f32; 4]);
    for (i, blk) in row.chunks_exact(Q4_K_BYTES).enumerate() {
        let d = a.d[i] * f16_at(blk, 0);
        let dmin = -a.d[i] * f16_at(blk, 2);
        let sm = scales_mins_k4(&blk[4..16]);
        let bs = &a.bsums[16 * i..16 * i + 16];
        for l in 0..4 {
            let prod = sm[8 + 2 * l] as i32 * sum32(bs, 2 * l)
                + sm[9 + 2 * l] as i32 * sum32(bs, 2 * l + 1);
            acc_m[l] = dmin.mul_add(prod as f32, acc_m[l]);
        }
        let q8 = &a.qs[QK_K * i..QK_K * (i + 1)];
        let mut sumi = [0i32; 8];
        // Each 64 elements: 32 bytes, low nibbles (sub-block 2j) then high (2j + 1).
        for j in 0..4 {
            let q = &blk[16 + 32 * j..48 + 32 * j];
            let lo = lanes(|e| (q[e] & 15) as i32, &q8[64 * j..]);
            let hi = lanes(|e| (q[e] >> 4) as i32, &q8[64 * j + 32..]);
            for l in 0..8 {
                sumi[l] += sm[2 * j] as i32 * lo[l] + sm[2 * j + 1] as i32 * hi[l];
            }
        }
        for l in 0..8 {
            acc[l] = d.mul_add(sumi[l] as f32, acc[l]);
        }
    }
    hsum8_ref(&acc) + ((acc_m[0] + acc_m[2]) + (acc_m[1] + acc_m[3]))
}

/// Scalar reference: a Q5_K row (K/256 blocks of 176 bytes) against Q8_K activations.
pub fn dot_q5_k_ref(row: &[u8], a: &Q8KRow) -> f32 {
    let (mut acc, mut summs) = ([0f32; 8], 0f32);
    for (i, blk) in row.chunks_exact(Q5_K_BYTES).enumerate() {
        let d = a.d[i] * f16_at(blk, 0);
        let dmin = -a.d[i] * f16_at(blk, 2);
        let sm = scales_mins_k4(&blk[4..16]);
        let bs = &a.bsums[16 * i..16 * i + 16];
        let mins: i32 = (0..8).map(|j| sm[8 + j] as i32 * sum32(bs, j)).sum();
        summs += dmin * mins as f32;
        let (qh, q8) = (&blk[16..48], &a.qs[QK_K * i..QK_K * (i + 1)]);
        let mut sumi = [0i32; 8];
        // As Q4_K, plus fifth bits: bits 2j and 2j + 1 of qh[e].
        for j in 0..4 {
            let q = &blk[48 + 32 * j..80 + 32 * j];
            let hb = |e: usize, b: usize| (((qh[e] >> b) & 1) << 4) as i32;
            let lo = lanes(|e| (q[e] & 15) as i32 + hb(e, 2 * j), &q8[64 * j..]);
            let hi = lanes(
                |e| (q[e] >> 4) as i32 + hb(e, 2 * j + 1),
                &q8[64 * j + 32..],
            );
            for l in 0..8 {
                sumi[l] += sm[2 * j] as i32 * lo[l] + sm[2 * j + 1] as i32 * hi[l];
            }
        }
        for l in 0..8 {
            acc[l] = d.mul_add(sumi[l] as f32, acc[l]);
        }
    }
    hsum8_ref(&acc) + summs
}

/// Scalar reference: a Q6_K row (K/256 blocks of 210 bytes) against Q8_K activations.
pub fn dot_q6_k_ref(row: &[u8], a: &Q8KRow) -> f32 {
    let mut acc = [0f32; 8];
    for (i, blk) in row.chunks_exact(Q6_K_BYTES).enumerate() {
        let d = a.d[i] * f16_at(blk, 208);
        let (ql, qh, sc) = (&blk[..128], &blk[128..192], &blk[192..208]);
        let q8 = &a.qs[QK_K * i..QK_K * (i + 1)];
        let mut sumi = [0i32; 8];
        // Per 128 elements, four runs of 32: low or high nibbles of ql, 2 bits of qh each.
        for j in 0..2 {
            for k in 0..4 {
                let (l4, h) = (&ql[64 * j + 32 * (k & 1)..], &qh[32 * j..]);
                let q = |e: usize| {
                    let lo = (l4[e] >> (4 * (k >> 1))) & 15;
                    (lo | (((h[e] >> (2 * k)) & 3) << 4)) as i32 - 32
                };
                let p = lanes(q, &q8[128 * j + 32 * k..]);
                for l in 0..8 {
                    sumi[l] += sc[8 * j + 2 * k + l / 4] as i8 as i32 * p[l];
                }
            }
        }
        for l in 0..8 {
            acc[l] = d.mul_add(sumi[l] as f32, acc[l]);
        }
    }
    hsum8_ref(&acc)
}

#[cfg(target_arch = "x86_64")]
pub(super) mod avx2 {
    use super::*;
    use crate::kernels::qdot::hsum8;
    use std::arch::x86_64::*;

    #[inline(always)]
    pub(in crate::kernels) unsafe fn check(a: &Q8KRow, nb: usize) {
        assert!(a.qs.len() >= nb * QK_K && a.d.len() >= nb && a.bsums.len() >= nb * 16);
    }

    /// The two f16 at `p`, as f32.
    #[inline(always)]
    pub(in crate::kernels) unsafe fn f16x2(p: *const u8) -> (f32, f32) {
        let v = _mm_cvtph_ps(_mm_cvtsi32_si128(std::ptr::read_unaligned(p as *const i32)));
        (_mm_cvtss_f32(v), _mm_cvtss_f32(_mm_shuffle_ps::<1>(v, v)))
    }

    #[inline(always)]
    pub(in crate::kernels) unsafe fn load(p: *const u8) -> __m256i {
        _mm256_loadu_si256(p as *const __m256i)
    }

    /// 8 scales and 8 mins widened to i16, and the 4 lanes of mins times 32-element sums.
    #[inline(always)]
    pub(in crate::kernels) unsafe fn mins_and_scales(
        sm: &[u8; 16],
        bsums: *const i16,
    ) -> (__m256i, __m128i) {
        let ms = _mm256_cvtepu8_epi16(_mm_loadu_si128(sm.as_ptr() as *const __m128i));
        let q8sums = _mm256_loadu_si256(bsums as *const __m256i);
        let q8s = _mm_hadd_epi16(
            _mm256_castsi256_si128(q8sums),
            _mm256_extracti128_si256::<1>(q8sums),
        );
        (ms, _mm_madd_epi16(_mm256_extracti128_si256::<1>(ms), q8s))
    }

    /// Q4_K's 64 weights `j` of the block at `p` as low and high nibbles (32 each).
    #[inline(always)]
    pub(in crate::kernels) unsafe fn q4_k_nibbles(p: *const u8, j: usize) -> [__m256i; 2] {
        let (m4, bits) = (_mm256_set1_epi8(0x0F), load(p.add(16 + 32 * j)));
        [
            _mm256_and_si256(bits, m4),
            _mm256_and_si256(_mm256_srli_epi16::<4>(bits), m4),
        ]
    }

    /// Q4_K's result from its per-lane sums and its mins' four lanes (`hsum_float_8` + the
    /// mins' horizontal sum, in ggml's order).
    #[inline(always)]
    pub(in crate::kernels) unsafe fn q4_k_total(acc: __m256, acc_m: __m128) -> f32 {
        let acc_m = _mm_add_ps(acc_m, _mm_movehl_ps(acc_m, acc_m));
        let acc_m = _mm_add_ss(acc_m, _mm_movehdup_ps(acc_m));
        hsum8(acc) + _mm_cvtss_f32(acc_m)
    }

    /// Q6_K's 128 weights `j` of the block at `p` as four runs of 32 unsigned 6-bit values.
    #[inline(always)]
    pub(in crate::kernels) unsafe fn q6_k_values(p: *const u8, j: usize) -> [__m256i; 4] {
        let (m4, m2) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(3));
        let bits1 = load(p.add(64 * j));
        let bits2 = load(p.add(64 * j + 32));
        let hb = load(p.add(128 + 32 * j));
        let high = |s: i32| {
            let h = _mm256_srl_epi16(hb, _mm_cvtsi32_si128(s));
            _mm256_slli_epi16::<4>(_mm256_and_si256(h, m2))
        };
        [
            _mm256_or_si256(_mm256_and_si256(bits1, m4), high(0)),
            _mm256_or_si256(_mm256_and_si256(bits2, m4), high(2)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(bits1), m4), high(4)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(bits2), m4), high(6)),
        ]
    }

    /// Q6_K's scales of run `is` widened to i16: ggml's get_scale_shuffle(is), scale 2is for
    /// elements 0..16, 2is+1 for 16..32.
    #[inline(always)]
    pub(in crate::kernels) unsafe fn q6_k_scale(scales: __m128i, is: usize) -> __m256i {
        let is = is as i64;
        let ctl = _mm_set_epi64x(
            0x0101010101010101 * (2 * is + 1),
            0x0101010101010101 * (2 * is),
        );
        _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, ctl))
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_q4_k(row: &[u8], a: &Q8KRow) -> f32 {
        let nb = row.len() / Q4_K_BYTES;
        check(a, nb);
        let (mut acc, mut acc_m) = (_mm256_setzero_ps(), _mm_setzero_ps());
        for i in 0..nb {
            let p = row.as_ptr().add(i * Q4_K_BYTES);
            let (xd, xmin) = f16x2(p);
            let (d, dmin) = (a.d[i] * xd, -a.d[i] * xmin);
            let sm = scales_mins_k4(&row[i * Q4_K_BYTES + 4..i * Q4_K_BYTES + 16]);
            let (_, prod) = mins_and_scales(&sm, a.bsums.as_ptr().add(16 * i));
            acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(prod), acc_m);
            let q8 = a.qs.as_ptr().add(QK_K * i) as *const u8;
            let mut sumi = _mm256_setzero_si256();
            for j in 0..4 {
                // = ggml's shuffle of the widened scales with get_scale_shuffle_k4(2j, 2j+1)
                let scale_l = _mm256_set1_epi16(sm[2 * j] as i16);
                let scale_h = _mm256_set1_epi16(sm[2 * j + 1] as i16);
                let [q4l, q4h] = q4_k_nibbles(p, j);
                let p16l =
                    _mm256_madd_epi16(scale_l, _mm256_maddubs_epi16(q4l, load(q8.add(64 * j))));
                let p16h = _mm256_madd_epi16(
                    scale_h,
                    _mm256_maddubs_epi16(q4h, load(q8.add(64 * j + 32))),
                );
                sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p16l, p16h));
            }
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        }
        q4_k_total(acc, acc_m)
    }

    /// Q5_K's fifth bits for one run of 32: ggml's ((qh & hmask) >> bit) << 4, hmask = 1 << bit.
    #[inline(always)]
    unsafe fn fifth(hbits: __m256i, bit: i32) -> __m256i {
        let h = _mm256_and_si256(hbits, _mm256_set1_epi8((1u8 << bit) as i8));
        _mm256_slli_epi16::<4>(_mm256_srl_epi16(h, _mm_cvtsi32_si128(bit)))
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_q5_k(row: &[u8], a: &Q8KRow) -> f32 {
        let nb = row.len() / Q5_K_BYTES;
        check(a, nb);
        let m4 = _mm256_set1_epi8(0x0F);
        let zero = _mm_setzero_si128();
        let (mut acc, mut summs) = (_mm256_setzero_ps(), 0f32);
        for i in 0..nb {
            let p = row.as_ptr().add(i * Q5_K_BYTES);
            let (xd, xmin) = f16x2(p);
            let (d, dmin) = (a.d[i] * xd, -a.d[i] * xmin);
            let sm = scales_mins_k4(&row[i * Q5_K_BYTES + 4..i * Q5_K_BYTES + 16]);
            let (_, prod) = mins_and_scales(&sm, a.bsums.as_ptr().add(16 * i));
            let hsum = _mm_hadd_epi32(_mm_hadd_epi32(prod, zero), zero);
            summs += dmin * _mm_cvtsi128_si32(hsum) as f32;
            let hbits = load(p.add(16));
            let q8 = a.qs.as_ptr().add(QK_K * i) as *const u8;
            let mut sumi = _mm256_setzero_si256();
            for j in 0..4 {
                let scale_0 = _mm256_set1_epi16(sm[2 * j] as i16);
                let scale_1 = _mm256_set1_epi16(sm[2 * j + 1] as i16);
                let bits = load(p.add(48 + 32 * j));
                let q5_0 = _mm256_add_epi8(_mm256_and_si256(bits, m4), fifth(hbits, 2 * j as i32));
                let q5l_1 = _mm256_and_si256(_mm256_srli_epi16::<4>(bits), m4);
                let q5_1 = _mm256_add_epi8(q5l_1, fifth(hbits, 2 * j as i32 + 1));
                let p16_0 = _mm256_maddubs_epi16(q5_0, load(q8.add(64 * j)));
                let p16_1 = _mm256_maddubs_epi16(q5_1, load(q8.add(64 * j + 32)));
                let p16_0 = _mm256_madd_epi16(scale_0, p16_0);
                let p16_1 = _mm256_madd_epi16(scale_1, p16_1);
                sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p16_0, p16_1));
            }
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        }
        hsum8(acc) + summs
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_q6_k(row: &[u8], a: &Q8KRow) -> f32 {
        let nb = row.len() / Q6_K_BYTES;
        check(a, nb);
        let m32s = _mm256_set1_epi8(32);
        let mut acc = _mm256_setzero_ps();
        for i in 0..nb {
            let p = row.as_ptr().add(i * Q6_K_BYTES);
            let d = a.d[i] * f16_at(&row[i * Q6_K_BYTES..], 208);
            let scales = _mm_loadu_si128(p.add(192) as *const __m128i);
            let q8 = a.qs.as_ptr().add(QK_K * i) as *const u8;
            let mut sumi = _mm256_setzero_si256();
            for j in 0..2 {
                let q6 = q6_k_values(p, j);
                let mut p16 = [_mm256_setzero_si256(); 4];
                for k in 0..4 {
                    let x = load(q8.add(128 * j + 32 * k));
                    // -32 offset: subtract 32 * x pairwise (ggml's m32s trick)
                    let prod = _mm256_sub_epi16(
                        _mm256_maddubs_epi16(q6[k], x),
                        _mm256_maddubs_epi16(m32s, x),
                    );
                    p16[k] = _mm256_madd_epi16(q6_k_scale(scales, 4 * j + k), prod);
                }
                sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p16[0], p16[1]));
                sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p16[2], p16[3]));
            }
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        }
        hsum8(acc)
    }
}

/// Whether the fast k-quant kernels run on this CPU (AVX2, FMA and F16C, as Q4_1's).
pub fn has_fast_k_quants() -> bool {
    has_fast_q4_1()
}

/// A Q4_K row against Q8_K activations, on the best kernel this CPU has.
pub fn dot_q4_k(row: &[u8], a: &Q8KRow) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if has_fast_k_quants() {
        // SAFETY: the features were detected on this CPU; lengths are checked inside.
        return unsafe { avx2::dot_q4_k(row, a) };
    }
    dot_q4_k_ref(row, a)
}

/// A Q5_K row against Q8_K activations, on the best kernel this CPU has.
pub fn dot_q5_k(row: &[u8], a: &Q8KRow) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if has_fast_k_quants() {
        // SAFETY: the features were detected on this CPU; lengths are checked inside.
        return unsafe { avx2::dot_q5_k(row, a) };
    }
    dot_q5_k_ref(row, a)
}

/// A Q6_K row against Q8_K activations, on the best kernel this CPU has.
pub fn dot_q6_k(row: &[u8], a: &Q8KRow) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if has_fast_k_quants() {
        // SAFETY: the features were detected on this CPU; lengths are checked inside.
        return unsafe { avx2::dot_q6_k(row, a) };
    }
    dot_q6_k_ref(row, a)
}
