//! The AVX2 kernels of `repack`'s 16-row Q4_0, Q4_1, Q5_0 and Q8_0 layout, for CPUs without
//! AVX-512 VNNI: rows side by side as in ggml-cpu's `ggml_gemv_q4_0_8x8_q8_0`
//! (arch/x86/repack.cpp), so each activation is broadcast once for 8 rows and a block's
//! scale, conversion and multiply-add are paid once per 8 rows instead of once per row.
//!
//! A group's 16 rows are two halves of 8, one per 256-bit vector, each 32-bit lane a row.
//! For the 4-bit types `maddubs` multiplies a lane's 4 nibbles by 4 broadcast activations of
//! a plane (`act_split`) into two i16 pair sums; a block's 8 such products stay in i16 (at
//! most 8 · 2 · 15 · 128 = 30720; Q5_0's values reach 31, so 4 at a time), and one `madd`
//! per plane, by 128 for the coarse plane and by 1 for the fine one, gives the exact i32 `(Σw·hi << 7) + Σw·lo` of the VNNI kernels.
//! Q8_0's signed weights go in as |w| against the activations with w's sign, one `madd` per
//! product (a pair reaches 2 · 128 · 127). Integer sums are exact and the f32 steps per block
//! and row are `repack_vnni`'s, so AVX2 and VNNI machines give the same bits.

use super::act_split::SplitAct;
use super::group_tiles::G;
use super::repack::{PackedQ4, TT};
use super::stream::prefetch_ahead;
use std::arch::x86_64::*;

/// The 4-byte activations c of one plane's block at `x`, broadcast to every lane.
#[inline(always)]
unsafe fn bcast(x: *const i8, c: usize) -> __m256i {
    _mm256_set1_epi32(std::ptr::read_unaligned((x as *const i32).add(c)))
}

/// 8 lanes of Σ w·(128·hi + lo) over one 32-block of token block `tb`, plus `bias`: `w` holds
/// the half's 8 vectors of 4 unsigned weights per row (elements 4c..4c+4 in vector c, the
/// low nibbles' four chunks, then the high ones'). FLUSH products stay in i16 before they
/// widen: all 8 for nibbles, 4 for Q5_0's values up to 31 (4 · 2 · 31 · 128 = 31744). COARSE:
/// Σ w·hi alone (+ bias), half the work, for a draft model (`coarse_activations`).
#[inline(always)]
unsafe fn planes<const FLUSH: usize, const COARSE: bool>(
    w: &[__m256i; 8],
    act: &SplitAct,
    tb: usize,
    bias: __m256i,
) -> __m256i {
    let xh = act.hi.qs.as_ptr().add(tb * 32);
    let xl = act.lo.qs.as_ptr().add(tb * 32);
    let mut isum = bias;
    for (k, part) in w.chunks_exact(FLUSH).enumerate() {
        let (mut ih, mut il) = (_mm256_setzero_si256(), _mm256_setzero_si256());
        for (i, w) in part.iter().enumerate() {
            let c = k * FLUSH + i;
            ih = _mm256_add_epi16(ih, _mm256_maddubs_epi16(*w, bcast(xh, c)));
            if !COARSE {
                il = _mm256_add_epi16(il, _mm256_maddubs_epi16(*w, bcast(xl, c)));
            }
        }
        if COARSE {
            isum = _mm256_add_epi32(isum, _mm256_madd_epi16(ih, _mm256_set1_epi16(1)));
            continue;
        }
        let hi = _mm256_madd_epi16(ih, _mm256_set1_epi16(128));
        let lo = _mm256_madd_epi16(il, _mm256_set1_epi16(1));
        isum = _mm256_add_epi32(isum, _mm256_add_epi32(hi, lo));
    }
    isum
}

/// Half h's nibbles of the four 64-byte vectors of quants at `qs`: w[c] holds elements
/// 4c..4c+4 (low nibbles), w[4 + c] elements 16+4c..16+4c+4 (high ones).
#[inline(always)]
unsafe fn nibbles(qs: *const u8, h: usize) -> [__m256i; 8] {
    let low = _mm256_set1_epi8(0x0F);
    let mut w = [_mm256_setzero_si256(); 8];
    for c in 0..4 {
        let v = _mm256_loadu_si256(qs.add(64 * c + 32 * h) as *const _);
        w[c] = _mm256_and_si256(v, low);
        w[4 + c] = _mm256_and_si256(_mm256_srli_epi16::<4>(v), low);
    }
    w
}

/// What the one loop over a group's blocks (`group_of`) needs of a weight type.
trait Kind {
    /// A half's weights of one block, unpacked once for all the tile's tokens.
    type W;
    /// Q4_1: a min per block and row, summed apart from the products as the VNNI kernel does.
    const MINS: bool = false;
    /// The offset types: values stored as v + OFFSET, taken off as OFFSET · Σx.
    const OFFSET: i32 = 0;
    /// Half h (rows 8h..8h+8) of the block at `base`.
    unsafe fn weights(base: *const u8, h: usize) -> Self::W;
    /// 8 lanes of the block's exact integer sum against token block `tb`, plus `bias`.
    unsafe fn isum<const COARSE: bool>(
        w: &Self::W,
        act: &SplitAct,
        tb: usize,
        bias: __m256i,
    ) -> __m256i;
}

/// Q4_0 (`Q41` false) and Q4_1: nibbles 0..15.
struct Q4<const Q41: bool>;
/// Q5_0: nibbles plus fifth bits, 0..31.
struct Q5;
/// Q8_0: signed bytes.
struct Q8;

impl<const Q41: bool> Kind for Q4<Q41> {
    type W = [__m256i; 8];
    const MINS: bool = Q41;
    const OFFSET: i32 = if Q41 { 0 } else { 8 };

    #[inline(always)]
    unsafe fn weights(base: *const u8, h: usize) -> Self::W {
        nibbles(base.add(if Q41 { 64 } else { 32 }), h)
    }

    #[inline(always)]
    unsafe fn isum<const COARSE: bool>(
        w: &Self::W,
        act: &SplitAct,
        tb: usize,
        bias: __m256i,
    ) -> __m256i {
        planes::<8, COARSE>(w, act, tb, bias)
    }
}

impl Kind for Q5 {
    type W = [__m256i; 8];
    const OFFSET: i32 = 16;

    #[inline(always)]
    unsafe fn weights(base: *const u8, h: usize) -> Self::W {
        let qh = _mm256_loadu_si256(base.add(32 + 32 * h) as *const _);
        let mut w = nibbles(base.add(96), h);
        for (i, w) in w.iter_mut().enumerate() {
            // vector i holds elements 4i..4i+4 (i < 4: low nibbles; else 16 + 4(i - 4) = 4i)
            *w = _mm256_or_si256(*w, fifth(qh, 4 * i as i32));
        }
        w
    }

    #[inline(always)]
    unsafe fn isum<const COARSE: bool>(
        w: &Self::W,
        act: &SplitAct,
        tb: usize,
        bias: __m256i,
    ) -> __m256i {
        planes::<4, COARSE>(w, act, tb, bias)
    }
}

impl Kind for Q8 {
    /// The weights (signed) and their magnitudes, elements 4c..4c+4 in vector c.
    type W = ([__m256i; 8], [__m256i; 8]);

    #[inline(always)]
    unsafe fn weights(base: *const u8, h: usize) -> Self::W {
        let mut w = [_mm256_setzero_si256(); 8];
        let mut aw = [_mm256_setzero_si256(); 8];
        for c in 0..8 {
            // stored as w + 128 (`repack`): the sign bit flipped back
            let stored = _mm256_loadu_si256(base.add(32 + 64 * c + 32 * h) as *const _);
            w[c] = _mm256_xor_si256(stored, _mm256_set1_epi8(i8::MIN));
            aw[c] = _mm256_abs_epi8(w[c]);
        }
        (w, aw)
    }

    #[inline(always)]
    unsafe fn isum<const COARSE: bool>(
        (w, aw): &Self::W,
        act: &SplitAct,
        tb: usize,
        bias: __m256i,
    ) -> __m256i {
        let ones = _mm256_set1_epi16(1);
        let xh = act.hi.qs.as_ptr().add(tb * 32);
        let xl = act.lo.qs.as_ptr().add(tb * 32);
        let (mut ih, mut il) = (_mm256_setzero_si256(), _mm256_setzero_si256());
        for c in 0..8 {
            let h = _mm256_maddubs_epi16(aw[c], _mm256_sign_epi8(bcast(xh, c), w[c]));
            ih = _mm256_add_epi32(ih, _mm256_madd_epi16(h, ones));
            if !COARSE {
                let l = _mm256_maddubs_epi16(aw[c], _mm256_sign_epi8(bcast(xl, c), w[c]));
                il = _mm256_add_epi32(il, _mm256_madd_epi16(l, ones));
            }
        }
        let isum = if COARSE {
            ih
        } else {
            _mm256_add_epi32(_mm256_slli_epi32::<7>(ih), il)
        };
        _mm256_add_epi32(isum, bias)
    }
}

/// One group of 16 rows of kind K against TN tokens from t0: row 8h + l of token j in
/// res[j][8h + l]. Per block and half: the weights unpacked once, then per token the exact
/// integer sum, one conversion and one fma with the weight scale times the activations' unit
/// (COARSE: the coarse plane's), and Q4_1's min term in its own accumulator.
#[inline(always)]
unsafe fn group_of<K: Kind, const TN: usize, const COARSE: bool>(
    p: &PackedQ4,
    g: usize,
    act: &SplitAct,
    t0: usize,
    res: &mut [[f32; G]; TT],
) {
    let nb = p.cols / 32;
    // (half, token): f32 lanes, a row each
    let mut acc = [[_mm256_setzero_ps(); TN]; 2];
    let mut macc = [[_mm256_setzero_ps(); TN]; 2];
    for b in 0..nb {
        let base = p.block(g, b);
        if TN == 1 {
            prefetch_ahead(base, p.gb);
        }
        for h in 0..2 {
            let dw = _mm256_cvtph_ps(_mm_loadu_si128(base.add(16 * h) as *const __m128i));
            let w = K::weights(base, h);
            for j in 0..TN {
                let tb = (t0 + j) * nb + b;
                let (sum, unit, s) = act.unit_sums::<COARSE>(tb);
                let isum = K::isum::<COARSE>(&w, act, tb, _mm256_set1_epi32(-K::OFFSET * sum));
                let scale = _mm256_mul_ps(dw, _mm256_set1_ps(unit));
                acc[h][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), scale, acc[h][j]);
                if K::MINS {
                    let mw = _mm256_cvtph_ps(_mm_loadu_si128(base.add(32 + 16 * h) as *const _));
                    macc[h][j] = _mm256_fmadd_ps(mw, _mm256_set1_ps(s), macc[h][j]);
                }
            }
        }
    }
    for h in 0..2 {
        for j in 0..TN {
            let r = if K::MINS {
                _mm256_add_ps(acc[h][j], macc[h][j])
            } else {
                acc[h][j]
            };
            _mm256_storeu_ps(res[j].as_mut_ptr().add(8 * h), r);
        }
    }
}

/// One group of 16 Q4_0 (`Q41` false) or Q4_1 rows against TN tokens from t0 (`group_of`).
///
/// # Safety
/// AVX2, FMA and F16C; `g` a group of `p` (of this type); tokens t0..t0+TN held by `act`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn group<const TN: usize, const Q41: bool, const COARSE: bool>(
    p: &PackedQ4,
    g: usize,
    act: &SplitAct,
    t0: usize,
    res: &mut [[f32; G]; TT],
) {
    group_of::<Q4<Q41>, TN, COARSE>(p, g, act, t0, res)
}

/// One group of 16 Q8_0 rows against TN tokens from t0 (`group_of`).
///
/// # Safety
/// As `group`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn group_q8<const TN: usize, const COARSE: bool>(
    p: &PackedQ4,
    g: usize,
    act: &SplitAct,
    t0: usize,
    res: &mut [[f32; G]; TT],
) {
    group_of::<Q8, TN, COARSE>(p, g, act, t0, res)
}

/// One group of 16 Q5_0 rows against TN tokens from t0 (`group_of`).
///
/// # Safety
/// As `group`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn group_q5<const TN: usize, const COARSE: bool>(
    p: &PackedQ4,
    g: usize,
    act: &SplitAct,
    t0: usize,
    res: &mut [[f32; G]; TT],
) {
    group_of::<Q5, TN, COARSE>(p, g, act, t0, res)
}

/// Bits `shift..shift + 4` of each lane's fifth-bit mask, moved to bit 4 of the lane's 4
/// bytes (x * 0x00204081 places bit i at bit 8i; no partial products overlap), as
/// `repack_vnni::fifth` does in 512 bits.
#[inline(always)]
unsafe fn fifth(qh: __m256i, shift: i32) -> __m256i {
    let b = _mm256_and_si256(
        _mm256_srl_epi32(qh, _mm_cvtsi32_si128(shift)),
        _mm256_set1_epi32(0xF),
    );
    let spread = _mm256_mullo_epi32(b, _mm256_set1_epi32(0x0020_4081));
    _mm256_slli_epi32::<4>(_mm256_and_si256(spread, _mm256_set1_epi32(0x0101_0101)))
}
