//! The AVX-512 VNNI kernels of the repacked Q4_0, Q4_1, Q5_0 and Q8_0 weights (`repack`'s
//! layout): one group of 16 rows against a tile of up to TT tokens. Activations arrive as two
//! 8-bit planes (`act_split`): each plane is one round of `vpdpbusd` against the same unpacked
//! weights, and the two meet in the integers as `(Σw·hi << 7) + Σw·lo`, so a block costs one
//! conversion and one multiply-add in f32 as before.

use super::act_split::SplitAct;
use super::group_tiles::G;
use super::repack::{PackedQ4, TT};
use super::stream::prefetch_ahead;
use std::arch::x86_64::*;

/// 16 lanes of Σ w·(128·hi + lo) over one 32-block of token block `tb`, plus `bias` (the
/// weight offset times the block's sum, for Q4_0, Q5_0 and Q8_0): `w` holds the block's 8
/// vectors of 4 unsigned weight bytes per row (elements 4c..4c+4 in vector c: for the 4-bit
/// types the low nibbles' four chunks, then the high ones'), against the signed activations of both planes. COARSE:
/// Σ w·hi alone (+ bias), half the work, for a draft model (`coarse_activations`).
#[inline(always)]
unsafe fn planes<const COARSE: bool>(
    w: &[__m512i; 8],
    act: &SplitAct,
    tb: usize,
    bias: __m512i,
) -> __m512i {
    let xh = act.hi.qs.as_ptr().add(tb * 32) as *const i32;
    let xl = act.lo.qs.as_ptr().add(tb * 32) as *const i32;
    let bcast = |x: *const i32, c: usize| _mm512_set1_epi32(std::ptr::read_unaligned(x.add(c)));
    if COARSE {
        let mut ih = bias;
        for (c, w) in w.iter().enumerate() {
            ih = _mm512_dpbusd_epi32(ih, *w, bcast(xh, c));
        }
        return ih;
    }
    let (mut ih, mut il) = (_mm512_setzero_si512(), bias);
    for (c, w) in w.iter().enumerate() {
        ih = _mm512_dpbusd_epi32(ih, *w, bcast(xh, c));
        il = _mm512_dpbusd_epi32(il, *w, bcast(xl, c));
    }
    _mm512_add_epi32(_mm512_slli_epi32::<7>(ih), il)
}

/// The tokens' part of one block of 16 rows: for each token j of the tile, Σw·x over the
/// planes (`planes`, plus `offset` times the block's integer sum: the weights' zero point),
/// times the weight scales `dw` and the block's unit into acc[j]; with `mw` (Q4_1, Q5_1),
/// the mins times the block's represented sum into macc[j].
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn block_tokens<const TN: usize, const COARSE: bool>(
    w: &[__m512i; 8],
    dw: __m512,
    mw: Option<__m512>,
    offset: i32,
    act: &SplitAct,
    (t0, nb, b): (usize, usize, usize),
    acc: &mut [__m512; TN],
    macc: &mut [__m512; TN],
) {
    for j in 0..TN {
        let tb = (t0 + j) * nb + b;
        let (sum, d, xs) = act.unit_sums::<COARSE>(tb);
        let isum = planes::<COARSE>(w, act, tb, _mm512_set1_epi32(offset * sum));
        let scale = _mm512_mul_ps(dw, _mm512_set1_ps(d));
        acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), scale, acc[j]);
        if let Some(mw) = mw {
            macc[j] = _mm512_fmadd_ps(mw, _mm512_set1_ps(xs), macc[j]);
        }
    }
}

/// The tile's results (acc, plus macc where the type has mins) into `res`.
#[inline(always)]
unsafe fn store<const TN: usize>(
    acc: &[__m512; TN],
    macc: Option<&[__m512; TN]>,
    res: &mut [[f32; G]; TT],
) {
    for j in 0..TN {
        let r = macc.map_or(acc[j], |m| _mm512_add_ps(acc[j], m[j]));
        _mm512_storeu_ps(res[j].as_mut_ptr(), r);
    }
}

/// A block's 16 rows of 32 nibbles at `qs` (4 x 64 bytes, `repack`'s layout) as 8 vectors of
/// 4 bytes per row: vector c holds elements 4c..4c+4 (low nibbles), vector 4 + c elements
/// 16+4c..16+4c+4 (high nibbles).
#[inline(always)]
unsafe fn nibbles(qs: *const u8) -> [__m512i; 8] {
    let low = _mm512_set1_epi8(0x0F);
    let mut w = [_mm512_setzero_si512(); 8];
    for c in 0..4 {
        let v = _mm512_loadu_si512(qs.add(64 * c) as *const _);
        w[c] = _mm512_and_si512(v, low);
        w[4 + c] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
    }
    w
}

/// One group of 16 Q4_0 (`Q41` false) or Q4_1 rows against TN tokens.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,fma,f16c")]
pub(super) unsafe fn group<const TN: usize, const Q41: bool, const COARSE: bool>(
    p: &PackedQ4,
    g: usize,
    act: &SplitAct,
    t0: usize,
    res: &mut [[f32; G]; TT],
) {
    let nb = p.cols / 32;
    let mins = if Q41 { 32 } else { 0 };
    let mut acc = [_mm512_setzero_ps(); TN];
    let mut macc = [_mm512_setzero_ps(); TN];
    for b in 0..nb {
        let base = p.block(g, b);
        if TN == 1 || t0 == 0 {
            prefetch_ahead(base, p.gb);
        }
        let dw = _mm512_cvtph_ps(_mm256_loadu_si256(base as *const __m256i));
        let mw = if Q41 {
            _mm512_cvtph_ps(_mm256_loadu_si256(base.add(32) as *const __m256i))
        } else {
            _mm512_setzero_ps()
        };
        let w = nibbles(base.add(32 + mins));
        // nibbles are 0..15: Q4_0 takes 8 · Σx off for its offset, Q4_1 adds m · s
        let mw = Q41.then_some(mw);
        let at = (t0, nb, b);
        block_tokens::<TN, COARSE>(
            &w,
            dw,
            mw,
            if Q41 { 0 } else { -8 },
            act,
            at,
            &mut acc,
            &mut macc,
        );
    }
    store(&acc, Q41.then_some(&macc), res);
}

/// One group of 16 Q8_0 rows against TN tokens: the weights are stored as w + 128
/// (`repack`), unsigned against the activations as they are, and 128 · Σx comes off the sum,
/// as Q4_0's 8 · Σx does: the same integers as Σw·x, with no per-token flip of the activations.
/// F32: the scales are f32 (the lattice types' blocks, `repack::is_lattice`), not f16.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,fma,f16c")]
pub(super) unsafe fn group_q8<const TN: usize, const F32: bool, const COARSE: bool>(
    p: &PackedQ4,
    g: usize,
    act: &SplitAct,
    t0: usize,
    res: &mut [[f32; G]; TT],
) {
    let nb = p.cols / 32;
    // (no mins: the second accumulators stay unused)
    let (mut acc, mut acc2) = ([_mm512_setzero_ps(); TN], [_mm512_setzero_ps(); TN]);
    for b in 0..nb {
        let base = p.block(g, b);
        if TN == 1 || t0 == 0 {
            prefetch_ahead(base, p.gb);
        }
        let (dw, at) = match F32 {
            true => (_mm512_loadu_ps(base as *const f32), 64),
            false => (
                _mm512_cvtph_ps(_mm256_loadu_si256(base as *const __m256i)),
                32,
            ),
        };
        let mut w = [_mm512_setzero_si512(); 8];
        for (c, w) in w.iter_mut().enumerate() {
            *w = _mm512_loadu_si512(base.add(at + 64 * c) as *const _);
        }
        block_tokens::<TN, COARSE>(&w, dw, None, -128, act, (t0, nb, b), &mut acc, &mut acc2);
    }
    store(&acc, None, res);
}

/// One group of 16 IQ2_XS, IQ2_S or Q3_K rows against TN tokens (`repack`'s halves layout): each
/// 32-block has two f32 scales per row, one per 16 weights, so each half is its own integer
/// sum. The weights stay signed (|q| <= 43; Q3_K's -4..=3) and the activations take `vpdpbusd`'s unsigned
/// side flipped to x + 128; the rows' weight sums per half (repacked) take the 128 · Σw (and,
/// with both planes, 128 · 129 · Σw) back off.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,fma")]
pub(super) unsafe fn group_halves<const TN: usize, const COARSE: bool>(
    p: &PackedQ4,
    g: usize,
    act: &SplitAct,
    t0: usize,
    res: &mut [[f32; G]; TT],
) {
    let nb = p.cols / 32;
    let flip = _mm512_set1_epi8(-128);
    let mut acc = [_mm512_setzero_ps(); TN];
    for b in 0..nb {
        let base = p.block(g, b);
        if TN == 1 || t0 == 0 {
            prefetch_ahead(base, p.gb);
        }
        let dw = [0, 64].map(|o| _mm512_loadu_ps(base.add(o) as *const f32));
        let k = if COARSE { 128 } else { 128 * 129 };
        let off = [128, 192].map(|o| {
            let sums = _mm512_loadu_si512(base.add(o) as *const _);
            _mm512_mullo_epi32(sums, _mm512_set1_epi32(-k))
        });
        let mut w = [_mm512_setzero_si512(); 8];
        for (c, w) in w.iter_mut().enumerate() {
            *w = _mm512_loadu_si512(base.add(256 + 64 * c) as *const _);
        }
        for j in 0..TN {
            let tb = (t0 + j) * nb + b;
            let (_, d, _) = act.unit_sums::<COARSE>(tb);
            let xh = act.hi.qs.as_ptr().add(tb * 32) as *const i32;
            let xl = act.lo.qs.as_ptr().add(tb * 32) as *const i32;
            let bcast = |x: *const i32, c: usize| {
                _mm512_xor_si512(_mm512_set1_epi32(std::ptr::read_unaligned(x.add(c))), flip)
            };
            let ds = _mm512_set1_ps(d);
            for h in 0..2 {
                let (mut ih, mut il) = (_mm512_setzero_si512(), _mm512_setzero_si512());
                for c in 4 * h..4 * h + 4 {
                    ih = _mm512_dpbusd_epi32(ih, bcast(xh, c), w[c]);
                    if !COARSE {
                        il = _mm512_dpbusd_epi32(il, bcast(xl, c), w[c]);
                    }
                }
                let isum = match COARSE {
                    true => _mm512_add_epi32(ih, off[h]),
                    false => {
                        _mm512_add_epi32(_mm512_add_epi32(_mm512_slli_epi32::<7>(ih), il), off[h])
                    }
                };
                acc[j] =
                    _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(dw[h], ds), acc[j]);
            }
        }
    }
    store(&acc, None, res);
}

/// ggml's 16 IQ4 levels plus 128, as unsigned bytes: `vpshufb` maps a nibble to its level
/// (in each 128-bit lane), and 128 · Σx comes off the sum, as for Q8_0.
const IQ4_LEVELS_U8: [u8; 16] = {
    let kv = crate::quant::iq4::KVALUES_IQ4NL;
    let mut t = [0u8; 16];
    let mut i = 0;
    while i < 16 {
        t[i] = (kv[i] as i16 + 128) as u8;
        i += 1;
    }
    t
};

/// One group of 16 IQ4_NL or IQ4_XS rows against TN tokens: the nibbles of Q4_0's layout
/// looked up in the level table, each 32-block scaled by its f32 scale (`repack`). Both
/// activation planes, as for the legacy types: finer than ggml's Q8_K rounding of them.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,fma")]
pub(super) unsafe fn group_iq4<const TN: usize, const COARSE: bool>(
    p: &PackedQ4,
    g: usize,
    act: &SplitAct,
    t0: usize,
    res: &mut [[f32; G]; TT],
) {
    let nb = p.cols / 32;
    let table = _mm512_broadcast_i32x4(_mm_loadu_si128(IQ4_LEVELS_U8.as_ptr() as *const _));
    let (mut acc, mut acc2) = ([_mm512_setzero_ps(); TN], [_mm512_setzero_ps(); TN]);
    for b in 0..nb {
        let base = p.block(g, b);
        if TN == 1 || t0 == 0 {
            prefetch_ahead(base, p.gb);
        }
        let dw = _mm512_loadu_ps(base as *const f32);
        let mut w = nibbles(base.add(64));
        for w in w.iter_mut() {
            *w = _mm512_shuffle_epi8(table, *w);
        }
        block_tokens::<TN, COARSE>(&w, dw, None, -128, act, (t0, nb, b), &mut acc, &mut acc2);
    }
    store(&acc, None, res);
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

/// One group of 16 Q5_0 (`Q51` false) or Q5_1 rows against TN tokens: nibbles plus fifth
/// bits (spread from each lane's 32-bit mask into bit 4 of the bytes by a multiply), values
/// 0..31, less 16 for Q5_0, plus the min times the block's sum for Q5_1.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,fma,f16c")]
pub(super) unsafe fn group_q5<const TN: usize, const Q51: bool, const COARSE: bool>(
    p: &PackedQ4,
    g: usize,
    act: &SplitAct,
    t0: usize,
    res: &mut [[f32; G]; TT],
) {
    let nb = p.cols / 32;
    // Q5_1: the 16 mins (32 bytes) come before the fifth bits
    let (qh_at, qs_at) = if Q51 { (64, 128) } else { (32, 96) };
    let mut acc = [_mm512_setzero_ps(); TN];
    let mut macc = [_mm512_setzero_ps(); TN];
    for b in 0..nb {
        let base = p.block(g, b);
        if TN == 1 || t0 == 0 {
            prefetch_ahead(base, p.gb);
        }
        let dw = _mm512_cvtph_ps(_mm256_loadu_si256(base as *const __m256i));
        let mw = if Q51 {
            _mm512_cvtph_ps(_mm256_loadu_si256(base.add(32) as *const __m256i))
        } else {
            _mm512_setzero_ps()
        };
        let qh = _mm512_loadu_si512(base.add(qh_at) as *const _);
        // vector i holds elements 4i..4i+4: its fifth bits are bits 4i..4i+4 of the mask
        let mut w = nibbles(base.add(qs_at));
        for (i, w) in w.iter_mut().enumerate() {
            *w = _mm512_or_si512(*w, fifth(qh, 4 * i as i32));
        }
        let mw = Q51.then_some(mw);
        let at = (t0, nb, b);
        block_tokens::<TN, COARSE>(
            &w,
            dw,
            mw,
            if Q51 { 0 } else { -16 },
            act,
            at,
            &mut acc,
            &mut macc,
        );
    }
    store(&acc, Q51.then_some(&macc), res);
}
