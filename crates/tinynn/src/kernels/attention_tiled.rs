//! Prefill's causal attention (the f32 regime of `attention`, long batches) in tiles, as
//! flash attention (Dao et al. 2022) tiles it: a task takes one KV head and `TQ` consecutive
//! tokens' queries of every query head of its group, and walks the cached keys in blocks of
//! 16. A block is widened from f16 once per task: its keys transposed to (D, 16), so that one
//! vector holds one dimension of 16 keys and 16 scores come out of D multiplies without a
//! horizontal sum per score, and its values as (16, D) for every query row to reuse.
//!
//! The arithmetic is `attention::blocked_avx512`'s in the same order: each score is summed
//! in the tree of ggml's `ggml_vec_dot_f16` (four chains over 64-element steps, then the
//! pairwise reduction), lane by lane, so every output carries the bits of the one-query
//! kernel (tested).

use super::attention::AttnShape;
use super::OutPtr;
use half::f16;
use rayon::prelude::*;

/// Tokens per task.
pub const TQ: usize = 16;
/// Keys per block (the lanes of a vector).
const B: usize = 16;

thread_local! {
    static SCRATCH: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Whether this CPU and head size take the tiled kernel (AVX-512 F/DQ, D = 64, 128 or 256).
pub fn supports(d: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        matches!(d, 64 | 128 | 256)
            && super::dot::simd_level() == super::dot::SimdLevel::Avx512
            && is_x86_feature_detected!("avx512dq")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = d;
        false
    }
}

/// q (T, H, D) at positions pos0..pos0+T; k, v caches (Hkv, P, D) -> out (T, H, D), with
/// f32 queries and accumulation. The caller checks `supports(D)`.
pub fn causal_attention_tiled(
    q: &[f32],
    k: &[f16],
    v: &[f16],
    s: AttnShape,
    pos0: usize,
    out: &mut [f32],
) {
    let (h, d, hkv) = (s.n_head, s.head_dim, s.n_kv_head);
    assert!(supports(d), "the tiled attention kernel does not run here");
    let t = out.len() / (h * d);
    assert!(q.len() >= t * h * d && pos0 + t <= s.ctx);
    assert!(k.len() >= hkv * s.ctx * d && v.len() >= hkv * s.ctx * d);
    let tiles = t.div_ceil(TQ);
    let o = OutPtr(out.as_mut_ptr());
    // the last tiles see the most keys: start them first
    (0..hkv * tiles).into_par_iter().for_each(|task| {
        let (kv, tile) = (task % hkv, tiles - 1 - task / hkv);
        let (t0, tn) = (tile * TQ, TQ.min(t - tile * TQ));
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `supports` checked the features; the caches hold pos0 + t positions of every
        // KV head (asserted); this task alone writes the rows of heads of KV head `kv` of
        // tokens t0..t0+tn.
        unsafe {
            match d {
                64 => avx512::tile::<4>(q, k, v, &s, kv, t0..t0 + tn, pos0, o),
                128 => avx512::tile::<8>(q, k, v, &s, kv, t0..t0 + tn, pos0, o),
                _ => avx512::tile::<16>(q, k, v, &s, kv, t0..t0 + tn, pos0, o),
            }
        };
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (q, k, v, kv, t0, tn, o);
    });
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::super::attention::load16;
    use super::*;
    use std::arch::x86_64::*;

    /// `vpermt2ps` indices of one butterfly stage of width b (8, 4, 2, 1): for the row of a
    /// pair with bit b clear, lanes with bit b set come from the partner row's lane - b; for
    /// the partner, lanes with bit b clear come from the first row's lane + b.
    const fn butterfly(b: usize, partner: bool) -> [i32; 16] {
        let mut idx = [0i32; 16];
        let mut c = 0;
        while c < 16 {
            idx[c] = match (c & b == 0, partner) {
                (true, false) => c as i32,
                (false, false) => (16 + c - b) as i32,
                (true, true) => (c + b) as i32,
                (false, true) => (16 + c) as i32,
            };
            c += 1;
        }
        idx
    }

    const STAGES: [(usize, [i32; 16], [i32; 16]); 4] = [
        (8, butterfly(8, false), butterfly(8, true)),
        (4, butterfly(4, false), butterfly(4, true)),
        (2, butterfly(2, false), butterfly(2, true)),
        (1, butterfly(1, false), butterfly(1, true)),
    ];

    /// The 16 x 16 block of floats in `r` transposed in place (butterflies of 8, 4, 2, 1).
    #[inline(always)]
    unsafe fn transpose16(r: &mut [__m512; 16]) {
        for (b, lo, hi) in STAGES {
            let (lo, hi) = (
                _mm512_loadu_si512(lo.as_ptr() as _),
                _mm512_loadu_si512(hi.as_ptr() as _),
            );
            for i in (0..16).filter(|i| i & b == 0) {
                let (a, c) = (r[i], r[i + b]);
                r[i] = _mm512_permutex2var_ps(a, lo, c);
                r[i + b] = _mm512_permutex2var_ps(a, hi, c);
            }
        }
    }

    /// Keys p0..p0+len of one KV head (rows of D halves at `k`) into kt (D, 16) and their
    /// values into vf (16, D), as f32; rows past `len` are zeros.
    #[inline(always)]
    unsafe fn widen_block(
        k: *const f16,
        v: *const f16,
        d: usize,
        len: usize,
        kt: *mut f32,
        vf: *mut f32,
    ) {
        for c in 0..d / 16 {
            let mut r = [_mm512_setzero_ps(); 16];
            for (j, rj) in r.iter_mut().enumerate().take(len) {
                *rj = load16(k.add(j * d + 16 * c));
            }
            transpose16(&mut r);
            for (l, rl) in r.iter().enumerate() {
                _mm512_storeu_ps(kt.add((16 * c + l) * B), *rl);
            }
        }
        for j in 0..B {
            for c in 0..d / 16 {
                let x = if j < len {
                    load16(v.add(j * d + 16 * c))
                } else {
                    _mm512_setzero_ps()
                };
                _mm512_storeu_ps(vf.add(j * d + 16 * c), x);
            }
        }
    }

    /// The 16 scores q . k_j of a block, each in `dot_f16_order`'s order: for lane l of the
    /// one-query kernel, four chains a_j over steps c of q[64c+16j+l] k[64c+16j+l], then
    /// (a0 + a2) + (a1 + a3), then lanes 8..16 onto 0..8, 4..8 onto 0..4, 2..4 onto 0..2 and
    /// 1 onto 0 (the pairs of GCC's `_mm512_reduce_add_ps`).
    /// Lane l of the one-query kernel's score: (a0 + a2) + (a1 + a3).
    #[inline(always)]
    unsafe fn lane_sum(q: *const f32, kt: *const f32, d: usize, l: usize) -> __m512 {
        let mut a = [_mm512_setzero_ps(); 4];
        for c in 0..d / 64 {
            for (j, aj) in a.iter_mut().enumerate() {
                let at = 64 * c + 16 * j + l;
                let kv = _mm512_loadu_ps(kt.add(at * B));
                *aj = _mm512_fmadd_ps(_mm512_set1_ps(*q.add(at)), kv, *aj);
            }
        }
        _mm512_add_ps(_mm512_add_ps(a[0], a[2]), _mm512_add_ps(a[1], a[3]))
    }

    #[inline(always)]
    unsafe fn scores(q: *const f32, kt: *const f32, d: usize) -> __m512 {
        // lanes 8..16 go onto 0..8 as soon as both exist, so few vectors are live at once
        // (a loop, not a closure: closures do not inherit the caller's target features)
        let mut v = [_mm512_setzero_ps(); 8];
        for (i, vi) in v.iter_mut().enumerate() {
            *vi = _mm512_add_ps(lane_sum(q, kt, d, i + 8), lane_sum(q, kt, d, i));
        }
        for w in [4, 2, 1] {
            for i in 0..w {
                v[i] = _mm512_add_ps(v[i + w], v[i]);
            }
        }
        v[0]
    }

    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f,avx512dq,fma,f16c")]
    pub(super) unsafe fn tile<const NV: usize>(
        q: &[f32],
        k: &[f16],
        v: &[f16],
        s: &AttnShape,
        kv: usize,
        tokens: std::ops::Range<usize>,
        pos0: usize,
        out: OutPtr,
    ) {
        let (h, d) = (s.n_head, s.head_dim);
        let g = h / s.n_kv_head;
        let (nv, rows) = (NV, tokens.len() * g);
        debug_assert_eq!(d, 16 * NV);
        let scale = 1.0 / (d as f32).sqrt();
        let base = kv * s.ctx * d;
        let n_max = pos0 + tokens.end;
        SCRATCH.with(|sc| {
            let mut sc = sc.borrow_mut();
            sc.resize(2 * d * B + rows * (d + 2), 0.0);
            let (kt, rest) = sc.split_at_mut(d * B);
            let (vf, rest) = rest.split_at_mut(d * B);
            let (acc, rest) = rest.split_at_mut(rows * d);
            let (m, sum) = rest.split_at_mut(rows);
            acc.fill(0.0);
            m.fill(f32::NEG_INFINITY);
            sum.fill(0.0);
            for p0 in (0..n_max).step_by(B) {
                let blen = B.min(n_max - p0);
                let at = base + p0 * d;
                widen_block(
                    k.as_ptr().add(at),
                    v.as_ptr().add(at),
                    d,
                    blen,
                    kt.as_mut_ptr(),
                    vf.as_mut_ptr(),
                );
                for (i, tok) in tokens.clone().enumerate() {
                    let n = pos0 + tok + 1;
                    if p0 >= n {
                        continue;
                    }
                    let len = B.min(n - p0);
                    let live = _mm512_cmplt_epi32_mask(
                        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                        _mm512_set1_epi32(len as i32),
                    );
                    for hh in 0..g {
                        let r = i * g + hh;
                        let qp = q.as_ptr().add((tok * h + kv * g + hh) * d);
                        let raw = _mm512_mul_ps(scores(qp, kt.as_ptr(), d), _mm512_set1_ps(scale));
                        let scv =
                            _mm512_mask_blend_ps(live, _mm512_set1_ps(f32::NEG_INFINITY), raw);
                        let ap = acc.as_mut_ptr().add(r * d);
                        let bm = _mm512_reduce_max_ps(scv);
                        if bm > m[r] {
                            let ms = (m[r] - bm).exp();
                            m[r] = bm;
                            for c in 0..nv {
                                let x = _mm512_loadu_ps(ap.add(16 * c));
                                _mm512_storeu_ps(
                                    ap.add(16 * c),
                                    _mm512_mul_ps(x, _mm512_set1_ps(ms)),
                                );
                            }
                            sum[r] *= ms;
                        }
                        let mut w = [0f32; B];
                        _mm512_storeu_ps(
                            w.as_mut_ptr(),
                            crate::kernels::act::expf16(_mm512_sub_ps(scv, _mm512_set1_ps(m[r]))),
                        );
                        let mut a = [_mm512_setzero_ps(); NV];
                        for (c, ac) in a.iter_mut().enumerate() {
                            *ac = _mm512_loadu_ps(ap.add(16 * c));
                        }
                        // the running sum in a register: through memory it chains stores
                        let mut total = sum[r];
                        for (j, wj) in w.iter().enumerate().take(len) {
                            let wv = _mm512_set1_ps(*wj);
                            let vp = vf.as_ptr().add(j * d);
                            for (c, ac) in a.iter_mut().enumerate() {
                                *ac = _mm512_fmadd_ps(_mm512_loadu_ps(vp.add(16 * c)), wv, *ac);
                            }
                            total += wj;
                        }
                        sum[r] = total;
                        for (c, ac) in a.iter().enumerate() {
                            _mm512_storeu_ps(ap.add(16 * c), *ac);
                        }
                    }
                }
            }
            for (i, tok) in tokens.clone().enumerate() {
                for hh in 0..g {
                    let r = i * g + hh;
                    let inv = _mm512_set1_ps(1.0 / sum[r]);
                    let op = out.at((tok * h + kv * g + hh) * d);
                    for c in 0..nv {
                        let x = _mm512_loadu_ps(acc.as_ptr().add(r * d + 16 * c));
                        _mm512_storeu_ps(op.add(16 * c), _mm512_mul_ps(x, inv));
                    }
                }
            }
        })
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    /// Every output equals, bit for bit, the one-query kernel's on the same cache.
    #[test]
    fn tiles_give_the_bits_of_the_one_query_kernel() {
        if !supports(64) {
            eprintln!("no AVX-512 DQ here: prefill attention takes the one-query kernels");
            return;
        }
        for (d, h, hkv, t, pos0) in [
            (64, 9, 3, 40, 0),
            (64, 4, 4, 17, 5),
            (128, 6, 2, 33, 21),
            (64, 3, 1, 1, 0),
            (256, 4, 1, 35, 9),
        ] {
            let ctx = pos0 + t + 3;
            let halves = |seed| -> Vec<f16> {
                crate::kernels::test_data(hkv * ctx * d, seed)
                    .iter()
                    .map(|x| f16::from_f32(*x))
                    .collect()
            };
            let (k, v) = (halves(1), halves(2));
            let q: Vec<f32> = crate::kernels::test_data(t * h * d, 3)
                .iter()
                .map(|x| x * 3.0)
                .collect();
            let s = AttnShape {
                n_head: h,
                n_kv_head: hkv,
                head_dim: d,
                ctx,
                f16_accumulate: false,
                window: None,
            };
            let mut got = vec![0f32; t * h * d];
            causal_attention_tiled(&q, &k, &v, s, pos0, &mut got);
            let g = h / hkv;
            for tok in 0..t {
                for head in 0..h {
                    let n = pos0 + tok + 1;
                    let base = (head / g) * ctx * d;
                    let row = (tok * h + head) * d;
                    let mut want = vec![0f32; d];
                    // SAFETY: `supports` checked AVX-512 F/DQ; k and v hold n rows of d.
                    unsafe {
                        super::super::attention::blocked_avx512(
                            &q[row..row + d],
                            &k[base..base + n * d],
                            &v[base..base + n * d],
                            1.0 / (d as f32).sqrt(),
                            &mut want,
                        )
                    };
                    assert_eq!(&got[row..row + d], &want[..], "d={d} t={tok} head={head}");
                }
            }
        }
    }
}
