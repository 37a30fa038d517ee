//! Causal scaled dot-product attention (Vaswani et al. 2017) with grouped-query heads
//! (Ainslie et al. 2023, GQA) over a preallocated KV cache: queries of T new tokens at
//! positions pos0.. attend to cached keys 0..=pos. Query head h reads key/value head
//! h / (H / Hkv). The cache holds each KV head's rows contiguously: (Hkv, P, D).

use super::act::softmax;
use super::dot::{axpy, dot};
use rayon::prelude::*;
use std::cell::RefCell;

/// The shape of one attention call.
#[derive(Clone, Copy, Debug)]
pub struct AttnShape {
    pub n_head: usize,
    pub n_kv_head: usize,
    pub head_dim: usize,
    /// Capacity P of the cache, in positions.
    pub ctx: usize,
    /// Accumulate values in f16 as ggml's flash attention does over an f16 cache, so that
    /// results agree with llama.cpp to the last bit that matters at near-ties.
    pub f16_accumulate: bool,
}

thread_local! {
    static SCORES: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// q (T, H, D) at positions pos0..pos0+T; k, v caches (Hkv, P, D) -> out (T, H, D).
pub fn causal_attention(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    s: AttnShape,
    pos0: usize,
    out: &mut [f32],
) {
    let (h, d) = (s.n_head, s.head_dim);
    let group = h / s.n_kv_head;
    let scale = 1.0 / (d as f32).sqrt();
    out.par_chunks_mut(d).enumerate().for_each(|(i, o)| {
        let (t, head) = (i / h, i % h);
        let kv = head / group;
        let n = pos0 + t + 1;
        let qv = &q[i * d..(i + 1) * d];
        let base = kv * s.ctx * d;
        let kv_rows = |p: usize| {
            (
                &k[base + p * d..base + (p + 1) * d],
                &v[base + p * d..base + (p + 1) * d],
            )
        };
        if s.f16_accumulate {
            #[cfg(target_arch = "x86_64")]
            if d % 16 == 0 && d <= 256 && super::dot::simd_level() == super::dot::SimdLevel::Avx512
            {
                // SAFETY: AVX-512 was detected; rows base.. hold n positions of D each.
                unsafe { online_f16_avx512(qv, &k[base..], &v[base..], n, scale, o) };
                return;
            }
            online_f16(qv, n, scale, kv_rows, o);
            return;
        }
        SCORES.with(|sc| {
            let mut sc = sc.borrow_mut();
            sc.resize(n, 0.0);
            for (p, sp) in sc.iter_mut().enumerate() {
                *sp = dot(qv, kv_rows(p).0) * scale;
            }
            softmax(&mut sc);
            o.fill(0.0);
            for (p, w) in sc.iter().enumerate() {
                axpy(o, *w, kv_rows(p).1);
            }
        })
    });
}

thread_local! {
    static ACC16: RefCell<Vec<half::f16>> = const { RefCell::new(Vec::new()) };
}

/// Round `o` to f16 in place through a slice conversion (F16C where the CPU has it).
fn round16(o: &mut [f32], tmp: &mut [half::f16]) {
    use half::slice::HalfFloatSliceExt;
    tmp.convert_from_f32_slice(o);
    tmp.convert_to_f32_slice(o);
}

/// One query over `n` positions with ggml's flash-attention recurrence for an f16 cache
/// (`ggml_compute_forward_flash_attn_ext_f16_one_chunk`): a running max M and sum S, and
/// the weighted sum of values kept in f16, rescaled when M grows.
fn online_f16<'a>(
    q: &[f32],
    n: usize,
    scale: f32,
    rows: impl Fn(usize) -> (&'a [f32], &'a [f32]),
    o: &mut [f32],
) {
    let (mut m, mut sum) = (f32::NEG_INFINITY, 0f32);
    o.fill(0.0);
    ACC16.with(|tmp| {
        let mut tmp = tmp.borrow_mut();
        tmp.resize(o.len(), half::f16::ZERO);
        for p in 0..n {
            let (kr, vr) = rows(p);
            let sc = dot(q, kr) * scale;
            let (mut ms, mut vs) = (1f32, 1f32);
            if sc > m {
                let old = m;
                m = sc;
                ms = (old - m).exp();
                o.iter_mut().for_each(|x| *x *= ms);
                round16(o, &mut tmp);
            } else {
                vs = (sc - m).exp();
            }
            axpy(o, vs, vr);
            round16(o, &mut tmp);
            sum = sum * ms + vs;
        }
    });
    let inv = 1.0 / sum;
    o.iter_mut().for_each(|x| *x *= inv);
}

/// q . k in the order of ggml's AVX-512 `ggml_vec_dot_f16` (four 16-lane accumulators over
/// 64-element steps, reduced pairwise, then GCC's `_mm512_reduce_add_ps` order; a tail of
/// fewer than 64 in f64), so attention scores carry llama.cpp's bits.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
unsafe fn dot_f16_order(q: &[std::arch::x86_64::__m512], k: *const f32) -> f32 {
    use std::arch::x86_64::*;
    let mut sum = [_mm512_setzero_ps(); 4];
    let steps = q.len() / 4;
    for c in 0..steps {
        for (j, acc) in sum.iter_mut().enumerate() {
            *acc = _mm512_fmadd_ps(q[4 * c + j], _mm512_loadu_ps(k.add(64 * c + 16 * j)), *acc);
        }
    }
    let v = _mm512_add_ps(_mm512_add_ps(sum[0], sum[2]), _mm512_add_ps(sum[1], sum[3]));
    let t3 = _mm256_add_ps(
        _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v))),
        _mm256_castpd_ps(_mm512_extractf64x4_pd::<0>(_mm512_castps_pd(v))),
    );
    let t6 = _mm_add_ps(_mm256_extractf128_ps::<1>(t3), _mm256_castps256_ps128(t3));
    let t8 = _mm_add_ps(t6, _mm_shuffle_ps::<0b01_00_11_10>(t6, t6));
    let mut f = [0f32; 4];
    _mm_storeu_ps(f.as_mut_ptr(), t8);
    let mut total = (f[0] + f[1]) as f64;
    for i in steps * 4..q.len() {
        let mut qa = [0f32; 16];
        _mm512_storeu_ps(qa.as_mut_ptr(), q[i]);
        for (l, qv) in qa.iter().enumerate() {
            total += (qv * *k.add(16 * i + l)) as f64;
        }
    }
    total as f32
}

/// `online_f16` in AVX-512 registers (D a multiple of 16, at most 256): the query and the f16
/// accumulator stay in registers, rounding with F16C's `vcvtps2ph`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma,f16c")]
unsafe fn online_f16_avx512(q: &[f32], k: &[f32], v: &[f32], n: usize, scale: f32, o: &mut [f32]) {
    use std::arch::x86_64::*;
    let d = o.len();
    let nv = d / 16;
    assert!(q.len() >= d && k.len() >= n * d && v.len() >= n * d && nv <= 16);
    #[inline(always)]
    unsafe fn r16(x: __m512) -> __m512 {
        _mm512_cvtph_ps(_mm512_cvtps_ph::<
            { _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC },
        >(x))
    }
    let mut qv = [_mm512_setzero_ps(); 16];
    let mut acc = [_mm512_setzero_ps(); 16];
    for i in 0..nv {
        qv[i] = _mm512_loadu_ps(q.as_ptr().add(16 * i));
    }
    let (mut m, mut sum) = (f32::NEG_INFINITY, 0f32);
    for p in 0..n {
        let (kp, vp) = (k.as_ptr().add(p * d), v.as_ptr().add(p * d));
        let sc = dot_f16_order(&qv[..nv], kp) * scale;
        let (mut ms, mut vs) = (1f32, 1f32);
        if sc > m {
            ms = (m - sc).exp();
            m = sc;
            let msv = _mm512_set1_ps(ms);
            for a in acc.iter_mut().take(nv) {
                *a = r16(_mm512_mul_ps(*a, msv));
            }
        } else {
            vs = (sc - m).exp();
        }
        let vsv = _mm512_set1_ps(vs);
        for i in 0..nv {
            acc[i] = r16(_mm512_fmadd_ps(
                _mm512_loadu_ps(vp.add(16 * i)),
                vsv,
                acc[i],
            ));
        }
        // GCC contracts ggml's `S = S*ms + vs` into one FMA
        sum = sum.mul_add(ms, vs);
    }
    let inv = _mm512_set1_ps(1.0 / sum);
    for i in 0..nv {
        _mm512_storeu_ps(o.as_mut_ptr().add(16 * i), _mm512_mul_ps(acc[i], inv));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_position_returns_its_value_and_gqa_shares_heads() {
        let mut s = AttnShape {
            n_head: 2,
            n_kv_head: 1,
            head_dim: 2,
            ctx: 4,
            f16_accumulate: false,
        };
        let mut k = vec![0f32; 8];
        let mut v = vec![0f32; 8];
        k[..4].copy_from_slice(&[1.0, 0.0, 0.0, 1.0]);
        v[..4].copy_from_slice(&[5.0, 6.0, 7.0, 8.0]);
        let q = [1.0f32, 0.0, 3.0, 3.0];
        let mut out = [0f32; 4];
        causal_attention(&q, &k, &v, s, 0, &mut out);
        assert_eq!(out, [5.0, 6.0, 5.0, 6.0]);
        // at position 1, with equal scores the output is the mean of both values
        let q2 = [0.0f32, 0.0, 0.0, 0.0];
        causal_attention(&q2, &k, &v, s, 1, &mut out);
        assert_eq!(out, [6.0, 7.0, 6.0, 7.0]);
        s.f16_accumulate = true;
        causal_attention(&q2, &k, &v, s, 1, &mut out);
        assert_eq!(out, [6.0, 7.0, 6.0, 7.0]);
    }

    #[test]
    fn f16_accumulation_stays_close_to_exact_softmax() {
        let (d, n) = (8, 40);
        let k: Vec<f32> = (0..n * d)
            .map(|i| ((i * 7 % 13) as f32 - 6.0) / 6.0)
            .collect();
        let v: Vec<f32> = (0..n * d)
            .map(|i| ((i * 5 % 11) as f32 - 5.0) / 5.0)
            .collect();
        let q: Vec<f32> = (0..d).map(|i| i as f32 / 4.0).collect();
        let mut s = AttnShape {
            n_head: 1,
            n_kv_head: 1,
            head_dim: d,
            ctx: n,
            f16_accumulate: false,
        };
        let (mut a, mut b) = (vec![0f32; d], vec![0f32; d]);
        causal_attention(&q, &k, &v, s, n - 1, &mut a);
        s.f16_accumulate = true;
        causal_attention(&q, &k, &v, s, n - 1, &mut b);
        assert!(
            a.iter().zip(&b).all(|(x, y)| (x - y).abs() < 5e-3),
            "{a:?} vs {b:?}"
        );
        assert!(a != b, "f16 accumulation should round");
    }

    #[test]
    fn simd_f16_attention_matches_portable() {
        let (d, n) = (64, 37);
        let k = super::super::test_data(n * d, 1);
        let v = super::super::test_data(n * d, 2);
        let q = super::super::test_data(d, 3);
        let mut a = vec![0f32; d];
        online_f16(
            &q,
            n,
            0.125,
            |p| (&k[p * d..(p + 1) * d], &v[p * d..(p + 1) * d]),
            &mut a,
        );
        #[cfg(target_arch = "x86_64")]
        if super::super::dot::simd_level() == super::super::dot::SimdLevel::Avx512 {
            let mut b = vec![0f32; d];
            // SAFETY: AVX-512 detected; k and v hold n rows of d.
            unsafe { online_f16_avx512(&q, &k, &v, n, 0.125, &mut b) };
            assert!(
                a.iter().zip(&b).all(|(x, y)| (x - y).abs() < 2e-3),
                "{a:?} vs {b:?}"
            );
        }
    }
}
