//! Causal scaled dot-product attention (Vaswani et al. 2017) with grouped-query heads
//! (Ainslie et al. 2023, GQA) over a preallocated f16 KV cache: queries of T new tokens at
//! positions pos0.. attend to cached keys 0..=pos. Query head h reads key/value head
//! h / (H / Hkv). The cache holds each KV head's rows contiguously: (Hkv, P, D).
//!
//! Each query runs the online-softmax recurrence of llama.cpp's CPU flash attention
//! (`ggml_compute_forward_flash_attn_ext_f16_one_chunk`): a running max M and sum S, the
//! weighted sum of values rescaled whenever M grows. With `f16_accumulate` that sum is kept
//! in f16, as ggml does over an f16 cache, so that results agree with llama.cpp to the bits
//! that matter at near-ties; without it, in f32.

use half::f16;
use std::cell::RefCell;

/// The shape of one attention call.
#[derive(Clone, Copy, Debug)]
pub struct AttnShape {
    pub n_head: usize,
    pub n_kv_head: usize,
    pub head_dim: usize,
    /// Capacity P of the cache, in positions.
    pub ctx: usize,
    /// Keep the weighted sum of values in f16 (ggml's one-chunk kernel) rather than f32.
    pub f16_accumulate: bool,
    /// Sliding-window attention: the query at position p sees the keys at p - window + 1 ..= p
    /// only (llama.cpp's `LLAMA_SWA_TYPE_STANDARD`); `None`: every key up to p.
    pub window: Option<usize>,
}

/// q (T, H, D) at positions pos0..pos0+T; k, v caches (Hkv, P, D) -> out (T, H, D).
pub fn causal_attention(
    q: &[f32],
    k: &[f16],
    v: &[f16],
    s: AttnShape,
    pos0: usize,
    out: &mut [f32],
) {
    let (h, d) = (s.n_head, s.head_dim);
    // the tiled kernel has no window: it runs where the window reaches back to position 0
    let t = out.len() / (h * d);
    if !s.f16_accumulate
        && s.window.is_none_or(|w| pos0 + t <= w)
        && t > 1
        && super::attention_tiled::supports(d)
    {
        return super::attention_tiled::causal_attention_tiled(q, k, v, s, pos0, out);
    }
    let group = h / s.n_kv_head;
    let scale = 1.0 / (d as f32).sqrt();
    // one task per token and KV head (the heads of a group are adjacent in (T, H, D), and the
    // f32 kernel takes them in one pass over the cache); per query head with the f16 sum,
    // whose kernel takes one head at a time: decode then has H tasks, not Hkv
    let per = if s.f16_accumulate { 1 } else { group };
    let (gd, outp) = (per * d, super::OutPtr(out.as_mut_ptr()));
    crate::team::par_for(out.len() / gd, |i| {
        // SAFETY: task i alone writes out[i * gd..(i + 1) * gd].
        let og = unsafe { std::slice::from_raw_parts_mut(outp.at(i * gd), gd) };
        let (t, kv) = (i * per / h, (i * per % h) / group);
        let n = pos0 + t + 1;
        // the first key this query sees: 0, or the window's start
        let first = s.window.map_or(0, |w| n.saturating_sub(w));
        let base = kv * s.ctx * d;
        let keys = base + first * d..base + n * d;
        let (k, v) = (&k[keys.clone()], &v[keys]);
        let qg = &q[i * gd..(i + 1) * gd];
        #[cfg(target_arch = "x86_64")]
        if d % 16 == 0 && d <= 256 && super::dot::simd_level() == super::dot::SimdLevel::Avx512 {
            // SAFETY: AVX-512 (with F16C) was detected; k and v hold n rows of D.
            unsafe {
                if per == group
                    && !s.f16_accumulate
                    && d <= 64
                    && group <= 4
                    && is_x86_feature_detected!("avx512dq")
                {
                    blocked_group_avx512(qg, k, v, scale, d, og);
                    return;
                }
                for (qv, o) in qg.chunks_exact(d).zip(og.chunks_exact_mut(d)) {
                    if s.f16_accumulate {
                        online_avx512::<true>(qv, k, v, scale, o)
                    } else if is_x86_feature_detected!("avx512dq") {
                        blocked_avx512(qv, k, v, scale, o)
                    } else {
                        online_avx512::<false>(qv, k, v, scale, o)
                    }
                }
            };
            return;
        }
        #[cfg(target_arch = "x86_64")]
        if super::attention_avx2::supports(d) {
            use super::attention_avx2::online_avx2;
            for (qv, o) in qg.chunks_exact(d).zip(og.chunks_exact_mut(d)) {
                // SAFETY: AVX2, FMA and F16C were detected for this D; k and v hold n rows.
                unsafe {
                    if s.f16_accumulate {
                        online_avx2::<true>(qv, k, v, scale, o)
                    } else {
                        online_avx2::<false>(qv, k, v, scale, o)
                    }
                }
            }
            return;
        }
        for (qv, o) in qg.chunks_exact(d).zip(og.chunks_exact_mut(d)) {
            online_portable(qv, k, v, scale, s.f16_accumulate, o);
        }
    });
}

thread_local! {
    static ROWS: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

fn round16(x: f32) -> f32 {
    f16::from_f32(x).to_f32()
}

/// The recurrence in plain Rust (the reference, and the kernel on other CPUs).
fn online_portable(q: &[f32], k: &[f16], v: &[f16], scale: f32, f16_acc: bool, o: &mut [f32]) {
    let d = o.len();
    let (mut m, mut sum) = (f32::NEG_INFINITY, 0f32);
    o.fill(0.0);
    ROWS.with(|rows| {
        let mut rows = rows.borrow_mut();
        rows.resize(2 * d, 0.0);
        let (kr, vr) = rows.split_at_mut(d);
        for (kp, vp) in k.chunks_exact(d).zip(v.chunks_exact(d)) {
            kp.iter()
                .zip(kr.iter_mut())
                .for_each(|(a, b)| *b = a.to_f32());
            vp.iter()
                .zip(vr.iter_mut())
                .for_each(|(a, b)| *b = a.to_f32());
            let sc = super::dot::dot(q, kr) * scale;
            let (mut ms, mut vs) = (1f32, 1f32);
            if sc > m {
                ms = (m - sc).exp();
                m = sc;
                o.iter_mut()
                    .for_each(|x| *x = if f16_acc { round16(*x * ms) } else { *x * ms });
            } else {
                vs = (sc - m).exp();
            }
            for (x, vv) in o.iter_mut().zip(vr.iter()) {
                let y = vv.mul_add(vs, *x);
                *x = if f16_acc { round16(y) } else { y };
            }
            sum = sum.mul_add(ms, vs);
        }
    });
    let inv = 1.0 / sum;
    o.iter_mut().for_each(|x| *x *= inv);
}

/// 16 cached f16 values at `p`, widened.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) unsafe fn load16(p: *const f16) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::*;
    _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i))
}

/// q . k in the order of ggml's AVX-512 `ggml_vec_dot_f16` (four 16-lane accumulators over
/// 64-element steps, reduced pairwise, then GCC's `_mm512_reduce_add_ps` order; a tail of
/// fewer than 64 in f64), so attention scores carry llama.cpp's bits.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma,f16c")]
unsafe fn dot_f16_order(q: &[std::arch::x86_64::__m512], k: *const f16) -> f32 {
    use std::arch::x86_64::*;
    let mut sum = [_mm512_setzero_ps(); 4];
    let steps = q.len() / 4;
    for c in 0..steps {
        for (j, acc) in sum.iter_mut().enumerate() {
            *acc = _mm512_fmadd_ps(q[4 * c + j], load16(k.add(64 * c + 16 * j)), *acc);
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
            total += (qv * (*k.add(16 * i + l)).to_f32()) as f64;
        }
    }
    total as f32
}

/// `online_portable` in AVX-512 registers (D a multiple of 16, at most 256): the query and
/// the accumulator stay in registers; with `ROUND` the accumulator is rounded to f16 with
/// F16C's `vcvtps2ph` after every update, as ggml's `ggml_vec_mad_f16` / `ggml_vec_scale_f16`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma,f16c")]
unsafe fn online_avx512<const ROUND: bool>(
    q: &[f32],
    k: &[f16],
    v: &[f16],
    scale: f32,
    o: &mut [f32],
) {
    use std::arch::x86_64::*;
    let d = o.len();
    let nv = d / 16;
    let n = k.len() / d;
    assert!(q.len() >= d && v.len() >= n * d && nv <= 16);
    #[inline(always)]
    unsafe fn r16<const ROUND: bool>(x: __m512) -> __m512 {
        if ROUND {
            _mm512_cvtph_ps(_mm512_cvtps_ph::<
                { _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC },
            >(x))
        } else {
            x
        }
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
                *a = r16::<ROUND>(_mm512_mul_ps(*a, msv));
            }
        } else {
            vs = (sc - m).exp();
        }
        let vsv = _mm512_set1_ps(vs);
        for i in 0..nv {
            acc[i] = r16::<ROUND>(_mm512_fmadd_ps(load16(vp.add(16 * i)), vsv, acc[i]));
        }
        // GCC contracts ggml's `S = S*ms + vs` into one FMA
        sum = sum.mul_add(ms, vs);
    }
    let inv = _mm512_set1_ps(1.0 / sum);
    for i in 0..nv {
        _mm512_storeu_ps(o.as_mut_ptr().add(16 * i), _mm512_mul_ps(acc[i], inv));
    }
}

/// The f32 regime (long batches) in blocks of 16 positions: 16 scores, one block maximum,
/// one vector `exp` for all 16 (ggml's polynomial, `act::expf16`), one rescale of the
/// accumulator per block instead of a branch and a scalar `expf` per position.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq,fma,f16c")]
pub(super) unsafe fn blocked_avx512(q: &[f32], k: &[f16], v: &[f16], scale: f32, o: &mut [f32]) {
    use std::arch::x86_64::*;
    let d = o.len();
    let nv = d / 16;
    let n = k.len() / d;
    assert!(q.len() >= d && v.len() >= n * d && nv <= 16);
    let mut qv = [_mm512_setzero_ps(); 16];
    let mut acc = [_mm512_setzero_ps(); 16];
    for i in 0..nv {
        qv[i] = _mm512_loadu_ps(q.as_ptr().add(16 * i));
    }
    let (mut m, mut sum) = (f32::NEG_INFINITY, 0f32);
    let mut sc = [f32::NEG_INFINITY; 16];
    for p0 in (0..n).step_by(16) {
        let len = 16.min(n - p0);
        for (j, s) in sc.iter_mut().enumerate() {
            *s = if j < len {
                dot_f16_order(&qv[..nv], k.as_ptr().add((p0 + j) * d)) * scale
            } else {
                f32::NEG_INFINITY
            };
        }
        let scv = _mm512_loadu_ps(sc.as_ptr());
        let bm = _mm512_reduce_max_ps(scv);
        if bm > m {
            let ms = (m - bm).exp();
            m = bm;
            let msv = _mm512_set1_ps(ms);
            for a in acc.iter_mut().take(nv) {
                *a = _mm512_mul_ps(*a, msv);
            }
            sum *= ms;
        }
        let mut w = [0f32; 16];
        _mm512_storeu_ps(
            w.as_mut_ptr(),
            crate::kernels::act::expf16(_mm512_sub_ps(scv, _mm512_set1_ps(m))),
        );
        for (j, wj) in w.iter().enumerate().take(len) {
            let wv = _mm512_set1_ps(*wj);
            let vp = v.as_ptr().add((p0 + j) * d);
            for i in 0..nv {
                acc[i] = _mm512_fmadd_ps(load16(vp.add(16 * i)), wv, acc[i]);
            }
            sum += wj;
        }
    }
    let inv = _mm512_set1_ps(1.0 / sum);
    for i in 0..nv {
        _mm512_storeu_ps(o.as_mut_ptr().add(16 * i), _mm512_mul_ps(acc[i], inv));
    }
}

/// `blocked_avx512` for all G (at most 4) query heads of one KV head at once (D at most 64):
/// the same arithmetic per head, with each cached value row loaded once for the group.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq,fma,f16c")]
unsafe fn blocked_group_avx512(
    q: &[f32],
    k: &[f16],
    v: &[f16],
    scale: f32,
    d: usize,
    o: &mut [f32],
) {
    use std::arch::x86_64::*;
    let (g, nv) = (q.len() / d, d / 16);
    let n = k.len() / d;
    assert!(g <= 4 && nv <= 4 && o.len() >= g * d && v.len() >= n * d);
    let mut qv = [[_mm512_setzero_ps(); 4]; 4];
    let mut acc = [[_mm512_setzero_ps(); 4]; 4];
    for h in 0..g {
        for i in 0..nv {
            qv[h][i] = _mm512_loadu_ps(q.as_ptr().add(h * d + 16 * i));
        }
    }
    let (mut m, mut sum) = ([f32::NEG_INFINITY; 4], [0f32; 4]);
    let mut sc = [[f32::NEG_INFINITY; 16]; 4];
    for p0 in (0..n).step_by(16) {
        let len = 16.min(n - p0);
        for j in 0..16 {
            if j >= len {
                for row in sc.iter_mut().take(g) {
                    row[j] = f32::NEG_INFINITY;
                }
                continue;
            }
            // the score of the one-head kernel, bit for bit (the row comes from L1 again)
            let kp = k.as_ptr().add((p0 + j) * d);
            for h in 0..g {
                sc[h][j] = dot_f16_order(&qv[h][..nv], kp) * scale;
            }
        }
        let mut w = [[0f32; 16]; 4];
        for h in 0..g {
            let scv = _mm512_loadu_ps(sc[h].as_ptr());
            let bm = _mm512_reduce_max_ps(scv);
            if bm > m[h] {
                let ms = (m[h] - bm).exp();
                m[h] = bm;
                for a in acc[h].iter_mut().take(nv) {
                    *a = _mm512_mul_ps(*a, _mm512_set1_ps(ms));
                }
                sum[h] *= ms;
            }
            _mm512_storeu_ps(
                w[h].as_mut_ptr(),
                crate::kernels::act::expf16(_mm512_sub_ps(scv, _mm512_set1_ps(m[h]))),
            );
        }
        for j in 0..len {
            let vp = v.as_ptr().add((p0 + j) * d);
            let mut vr = [_mm512_setzero_ps(); 4];
            for i in 0..nv {
                vr[i] = load16(vp.add(16 * i));
            }
            for h in 0..g {
                let wv = _mm512_set1_ps(w[h][j]);
                for i in 0..nv {
                    acc[h][i] = _mm512_fmadd_ps(vr[i], wv, acc[h][i]);
                }
                sum[h] += w[h][j];
            }
        }
    }
    for h in 0..g {
        let inv = _mm512_set1_ps(1.0 / sum[h]);
        for i in 0..nv {
            _mm512_storeu_ps(
                o.as_mut_ptr().add(h * d + 16 * i),
                _mm512_mul_ps(acc[h][i], inv),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn halves(x: &[f32]) -> Vec<f16> {
        x.iter().map(|v| f16::from_f32(*v)).collect()
    }

    #[test]
    fn single_position_returns_its_value_and_gqa_shares_heads() {
        let mut s = AttnShape {
            n_head: 2,
            n_kv_head: 1,
            head_dim: 2,
            ctx: 4,
            f16_accumulate: false,
            window: None,
        };
        let mut k = vec![0f32; 8];
        let mut v = vec![0f32; 8];
        k[..4].copy_from_slice(&[1.0, 0.0, 0.0, 1.0]);
        v[..4].copy_from_slice(&[5.0, 6.0, 7.0, 8.0]);
        let (k, v) = (halves(&k), halves(&v));
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
        // a window of one position sees only the query's own key
        s.window = Some(1);
        causal_attention(&q2, &k, &v, s, 1, &mut out);
        assert_eq!(out, [7.0, 8.0, 7.0, 8.0]);
        s.f16_accumulate = false;
        let two_rows = [0.0f32; 8];
        let mut out2 = [0f32; 8];
        causal_attention(&two_rows, &k, &v, s, 0, &mut out2);
        assert_eq!(out2, [5.0, 6.0, 5.0, 6.0, 7.0, 8.0, 7.0, 8.0]);
    }

    /// Plain two-pass softmax attention of one query over n rows.
    fn naive(q: &[f32], k: &[f16], v: &[f16], d: usize, scale: f32) -> Vec<f32> {
        let n = k.len() / d;
        let sc: Vec<f32> = (0..n)
            .map(|p| (0..d).map(|i| q[i] * k[p * d + i].to_f32()).sum::<f32>() * scale)
            .collect();
        let m = sc.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let w: Vec<f32> = sc.iter().map(|s| (s - m).exp()).collect();
        let z: f32 = w.iter().sum();
        (0..d)
            .map(|i| (0..n).map(|p| w[p] * v[p * d + i].to_f32()).sum::<f32>() / z)
            .collect()
    }

    #[test]
    fn kernels_match_plain_softmax_and_each_other() {
        for (d, n) in [(8, 40), (64, 37), (80, 5)] {
            let k = halves(&super::super::test_data(n * d, 1));
            let v = halves(&super::super::test_data(n * d, 2));
            let q: Vec<f32> = super::super::test_data(d, 3)
                .iter()
                .map(|x| x * 3.0)
                .collect();
            let want = naive(&q, &k, &v, d, 0.125);
            for f16_acc in [false, true] {
                let mut a = vec![0f32; d];
                online_portable(&q, &k, &v, 0.125, f16_acc, &mut a);
                let tol = if f16_acc { 3e-3 } else { 1e-5 };
                assert!(
                    a.iter().zip(&want).all(|(x, y)| (x - y).abs() < tol),
                    "d={d} f16={f16_acc}: {a:?} vs {want:?}"
                );
                #[cfg(target_arch = "x86_64")]
                if d % 16 == 0
                    && super::super::dot::simd_level() == super::super::dot::SimdLevel::Avx512
                {
                    let mut b = vec![0f32; d];
                    // SAFETY: AVX-512 detected; k and v hold n rows of d.
                    unsafe {
                        if f16_acc {
                            online_avx512::<true>(&q, &k, &v, 0.125, &mut b)
                        } else {
                            online_avx512::<false>(&q, &k, &v, 0.125, &mut b)
                        }
                    };
                    assert!(
                        a.iter().zip(&b).all(|(x, y)| (x - y).abs() < tol),
                        "d={d} f16={f16_acc}: {a:?} vs {b:?}"
                    );
                }
                #[cfg(target_arch = "x86_64")]
                if super::super::attention_avx2::supports(d) {
                    use super::super::attention_avx2::online_avx2;
                    let mut b = vec![0f32; d];
                    // SAFETY: AVX2/FMA/F16C detected for this d; k and v hold n rows of d.
                    unsafe {
                        if f16_acc {
                            online_avx2::<true>(&q, &k, &v, 0.125, &mut b)
                        } else {
                            online_avx2::<false>(&q, &k, &v, 0.125, &mut b)
                        }
                    };
                    assert!(
                        b.iter().zip(&want).all(|(x, y)| (x - y).abs() < tol),
                        "avx2 d={d} f16={f16_acc}: {b:?} vs {want:?}"
                    );
                }
            }
        }
    }

    /// The long-batch kernels: blocks of 16 positions with one vector exp, and the same for a
    /// GQA group of heads at once, which must give each head the bits it gets alone.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn blocked_kernels_match_plain_softmax_and_group_equals_alone() {
        if super::super::dot::simd_level() != super::super::dot::SimdLevel::Avx512
            || !is_x86_feature_detected!("avx512dq")
        {
            eprintln!("no AVX-512 DQ here: the blocked kernels are not used on this CPU");
            return;
        }
        for (d, n) in [(64, 37), (32, 100), (16, 3)] {
            let k = halves(&super::super::test_data(n * d, 1));
            let v = halves(&super::super::test_data(n * d, 2));
            let q: Vec<f32> = super::super::test_data(3 * d, 3)
                .iter()
                .map(|x| x * 3.0)
                .collect();
            let mut o3 = vec![0f32; 3 * d];
            // SAFETY: AVX-512 F/DQ detected; k and v hold n rows of d; three heads of d.
            unsafe { blocked_group_avx512(&q, &k, &v, 0.125, d, &mut o3) };
            for (h, qh) in q.chunks_exact(d).enumerate() {
                let want = naive(qh, &k, &v, d, 0.125);
                let mut one = vec![0f32; d];
                // SAFETY: as above.
                unsafe { blocked_avx512(qh, &k, &v, 0.125, &mut one) };
                assert!(
                    one.iter().zip(&want).all(|(x, y)| (x - y).abs() < 1e-5),
                    "d={d} head {h}: {one:?} vs {want:?}"
                );
                assert_eq!(
                    &o3[h * d..(h + 1) * d],
                    &one[..],
                    "d={d} head {h}: grouped differs from alone"
                );
            }
        }
    }
}
