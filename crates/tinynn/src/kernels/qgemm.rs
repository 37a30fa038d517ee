//! Prefill's integer GEMM: Y (T, N) = X (T, K) W^T for the legacy weight types (Q4_0, Q4_1,
//! Q5_0, Q5_1, Q8_0), with X quantized once to Q8_1 blocks (as ggml does) and 8-bit products
//! summed by AVX-512 VNNI (`vpdpbusd`). Register tiling (4 weight rows x up to 4 tokens)
//! reuses each decoded weight block across tokens, which ggml's per-row `vec_dot` does not.
//! Per block the result is d_w * d_x * sum(q_w * q_x) (+ m_w * s_x for Q4_1 / Q5_1), the same
//! sum as `qdot`'s and `qdot_q5`'s row kernels (ports of ggml-cpu/arch/x86/quants.c), which
//! serve as the reference and for tails.
//!
//! Weights are decoded once per group of rows to 8-bit values: unsigned (Q4_1's nibble,
//! Q5_1's 5-bit value; the min goes to the m_w * s_x term) or signed (Q4_0's nibble - 8,
//! Q5_0's value - 16, Q8_0's byte). ggml multiplies signed weights with the sign trick
//! (|w| x sign(x, w)); we feed x + 128 as u8 and subtract 128 * sum(w) per lane. Both give
//! the exact integer sum of each lane's four products, so the floats that follow agree.

use super::act_split::SplitAct;
use super::qdot::Q8_1Act;
use super::qdot_q5::q5_values;
use super::QMat;
use crate::quant::GgmlType;

/// Weight rows per tile.
const RM: usize = 4;
/// Tokens per tile.
const RN: usize = 4;
/// Most blocks per row the tile keeps mins for (K up to 8192).
const MAX_NB: usize = 256;

/// Whether this CPU has the VNNI kernels.
pub fn has_vnni() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(detect_vnni)
}

fn detect_vnni() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::env::var_os("TOY_FORCE_SCALAR").is_none()
            && std::env::var_os("TOY_NO_VNNI").is_none()
            && is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vnni")
            && is_x86_feature_detected!("f16c")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether `gemm_rows` handles weights of this type and width.
pub fn supports(ty: GgmlType, k: usize) -> bool {
    use GgmlType::*;
    matches!(ty, Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0)
        && k.is_multiple_of(64)
        && k / 32 <= MAX_NB
        && has_vnni()
}

/// Whether the decoded weights are signed (i8) rather than unsigned (u8) values.
fn signed_weights(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0)
}

/// A group of RM weight rows decoded once for all tokens: 8-bit values in natural order,
/// the per-lane bias that turns signed products into `vpdpbusd`'s u8 x i8 form, the block
/// scales (eight copies each), and Q4_1 / Q5_1's block mins (zero for the others).
#[derive(Default)]
struct Packed {
    q: Vec<u8>,
    bias: Vec<i32>,
    dw: Vec<f32>,
    mins: Vec<f32>,
}

thread_local! {
    static PACKED: std::cell::RefCell<Packed> = std::cell::RefCell::new(Packed::default());
}

fn f16_at(p: &[u8], i: usize) -> f32 {
    half::f16::from_le_bytes([p[i], p[i + 1]]).to_f32()
}

/// Block `blk`'s 32 weights as the tile reads them (i8 bits for the signed types), and its
/// min (0 for the types without one).
fn decode_block(ty: GgmlType, blk: &[u8]) -> ([u8; 32], f32) {
    use GgmlType::*;
    let qh = |at: usize| u32::from_le_bytes([blk[at], blk[at + 1], blk[at + 2], blk[at + 3]]);
    // with no fifth bits, q5_values gives the plain nibbles
    match ty {
        Q4_0 => {
            let mut v = q5_values(&blk[2..18], 0);
            v.iter_mut().for_each(|b| *b = b.wrapping_sub(8));
            (v, 0.0)
        }
        Q4_1 => (q5_values(&blk[4..20], 0), f16_at(blk, 2)),
        Q5_0 => {
            let mut v = q5_values(&blk[6..22], qh(2));
            v.iter_mut().for_each(|b| *b = b.wrapping_sub(16));
            (v, 0.0)
        }
        Q5_1 => (q5_values(&blk[8..24], qh(4)), f16_at(blk, 2)),
        _ => {
            let mut v = [0u8; 32];
            v.copy_from_slice(&blk[2..34]);
            (v, 0.0)
        }
    }
}

impl Packed {
    fn pack(&mut self, ty: GgmlType, rows: &[&[u8]; RM], k: usize) {
        let nb = k / 32;
        self.q.resize(RM * k, 0);
        self.dw.resize(RM * nb * 8, 0.0);
        self.mins.resize(RM * nb, 0.0);
        self.bias.resize(RM * k / 4, 0);
        let size = ty.type_size();
        for (r, row) in rows.iter().enumerate() {
            for b in 0..nb {
                let blk = &row[b * size..(b + 1) * size];
                let q = &mut self.q[r * k + b * 32..r * k + b * 32 + 32];
                let (v, min) = decode_block(ty, blk);
                q.copy_from_slice(&v);
                self.mins[r * nb + b] = min;
                self.dw[(r * nb + b) * 8..(r * nb + b + 1) * 8].fill(f16_at(blk, 0));
            }
            if signed_weights(ty) {
                // x is fed as x + 128 (u8): subtract 128 * sum(w) of each lane's four bytes
                for (j, c) in self.q[r * k..(r + 1) * k].chunks_exact(4).enumerate() {
                    self.bias[r * k / 4 + j] =
                        -128 * c.iter().map(|v| *v as i8 as i32).sum::<i32>();
                }
            }
        }
    }
}

/// Rows r0..r0+nr of Y for all T tokens: out[t * ldo + r] for r < nr. `act` holds X as two
/// 8-bit planes (T * K/32 blocks each, `act_split`): each tile runs once per plane and the
/// two results add, as the row dots do.
///
/// # Safety
/// `out` must be valid for writes at `t * ldo + r`, t < T, r < nr, and owned by the caller.
pub unsafe fn gemm_rows(
    w: &QMat,
    r0: usize,
    nr: usize,
    act: &SplitAct,
    t: usize,
    out: *mut f32,
    ldo: usize,
) {
    PACKED.with(|pk| {
        let mut pk = pk.borrow_mut();
        let mut r = 0;
        while r < nr {
            let n = RM.min(nr - r);
            // a short tail repeats its last row; the extra results are dropped
            let rows: [&[u8]; RM] = std::array::from_fn(|i| w.row(r0 + r + i.min(n - 1)));
            pk.pack(w.ty, &rows, w.cols);
            let wide = t >= WIDE_FROM && (w.cols / 32).is_multiple_of(2);
            let mut t0 = 0;
            while t0 < t {
                let tn = (t - t0).min(RN);
                let mut res = [[[0f32; RN]; RM]; 2];
                for (plane, res) in [&act.hi, &act.lo].into_iter().zip(res.iter_mut()) {
                    super::group_tiles::by_tile_width!(
                        tn, tile; w.ty, &pk, plane, w.cols, t0, wide, res
                    )
                }
                for i in 0..n {
                    for j in 0..tn {
                        *out.add((t0 + j) * ldo + r + i) = res[0][i][j] + res[1][i][j];
                    }
                }
                t0 += RN;
            }
            r += RM;
        }
    })
}

/// Batches of at least this many tokens take the wide tiles (two blocks per 512-bit step),
/// which sum in a different order than ggml's `vec_dot`; shorter ones keep its order, as
/// llama.cpp itself changes kernels (tiled attention) at 64 queries.
pub const WIDE_FROM: usize = 64;

#[allow(clippy::too_many_arguments)]
fn tile<const TN: usize>(
    ty: GgmlType,
    pk: &Packed,
    act: &Q8_1Act,
    k: usize,
    t0: usize,
    wide: bool,
    res: &mut [[f32; RN]; RM],
) {
    #[cfg(target_arch = "x86_64")]
    if has_vnni() {
        // SAFETY: the features were detected; the packed rows and act cover K for these tokens
        // (and K is a whole number of block pairs when `wide`).
        unsafe {
            match (signed_weights(ty), wide) {
                (true, false) => vnni::tile::<TN, true>(pk, act, k, t0, res),
                (false, false) => vnni::tile::<TN, false>(pk, act, k, t0, res),
                (true, true) => vnni::tile_wide::<TN, true>(pk, act, k, t0, res),
                (false, true) => vnni::tile_wide::<TN, false>(pk, act, k, t0, res),
            }
        };
        return;
    }
    let _ = wide;
    reference_tile::<TN>(ty, pk, act, k, t0, res)
}

/// The same tile in plain integer arithmetic (what the VNNI tile must equal).
fn reference_tile<const TN: usize>(
    ty: GgmlType,
    pk: &Packed,
    act: &Q8_1Act,
    k: usize,
    t0: usize,
    res: &mut [[f32; RN]; RM],
) {
    let (nb, signed) = (k / 32, signed_weights(ty));
    for (r, out) in res.iter_mut().enumerate() {
        for (j, o) in out.iter_mut().enumerate().take(TN) {
            let mut sum = 0f32;
            for b in 0..nb {
                let tb = (t0 + j) * nb + b;
                let (wq, xq) = (
                    &pk.q[r * k + b * 32..r * k + b * 32 + 32],
                    &act.qs[tb * 32..tb * 32 + 32],
                );
                let w = |v: u8| if signed { v as i8 as i32 } else { v as i32 };
                let isum: i32 = wq.iter().zip(xq).map(|(v, x)| w(*v) * *x as i32).sum();
                sum += pk.dw[(r * nb + b) * 8] * act.d[tb] * isum as f32
                    + pk.mins[r * nb + b] * act.s[tb];
            }
            *o = sum;
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod vnni {
    use super::*;
    use crate::kernels::qdot::hsum8;
    use std::arch::x86_64::*;

    /// Block by block in 256-bit lanes, in the order of ggml's `vec_dot` (and of `qdot`'s row
    /// kernels): acc = fma(d_w * d_x, sum, acc) per block, then a horizontal sum, plus Q4_1's / Q5_1's
    /// min terms added one block at a time. So a batched product equals the single-token one
    /// bit for bit, and logits do not depend on how a prompt is batched. (On Zen 4 a 512-bit
    /// op costs two 256-bit ones, so nothing is lost.)
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx512vl,avx2,fma,f16c")]
    pub unsafe fn tile<const TN: usize, const SIGNED_W: bool>(
        pk: &Packed,
        act: &Q8_1Act,
        k: usize,
        t0: usize,
        res: &mut [[f32; RN]; RM],
    ) {
        let nb = k / 32;
        let flip = _mm256_set1_epi8(-128);
        let mut acc = [[_mm256_setzero_ps(); TN]; RM];
        let mut msum = [_mm_setzero_ps(); RM];
        for b in 0..nb {
            // plain loops: closures (as in array::from_fn) do not inherit target features, so
            // the intrinsics inside them would become calls
            let mut wv = [_mm256_setzero_si256(); RM];
            let mut dw = [_mm256_setzero_ps(); RM];
            for r in 0..RM {
                wv[r] = _mm256_loadu_si256(pk.q.as_ptr().add(r * k + b * 32) as *const __m256i);
                dw[r] = _mm256_set1_ps(pk.dw[(r * nb + b) * 8]);
            }
            for j in 0..TN {
                let tb = (t0 + j) * nb + b;
                let x = _mm256_loadu_si256(act.qs.as_ptr().add(tb * 32) as *const __m256i);
                let dx = _mm256_set1_ps(act.d[tb]);
                for r in 0..RM {
                    // unsigned: u8 weights x i8 activations; signed: (x + 128) as u8 x i8
                    // weights, minus the bias
                    let prod = if SIGNED_W {
                        let bias = _mm256_loadu_si256(
                            pk.bias.as_ptr().add(r * k / 4 + b * 8) as *const __m256i
                        );
                        _mm256_dpbusd_epi32(bias, _mm256_xor_si256(x, flip), wv[r])
                    } else {
                        _mm256_dpbusd_epi32(_mm256_setzero_si256(), wv[r], x)
                    };
                    acc[r][j] = _mm256_fmadd_ps(
                        _mm256_mul_ps(dw[r], dx),
                        _mm256_cvtepi32_ps(prod),
                        acc[r][j],
                    );
                }
            }
            if !SIGNED_W {
                // m * s for TN tokens at once, lane j = token j, unfused like the row kernel
                let mut sv = [0f32; 4];
                for (j, v) in sv.iter_mut().enumerate().take(TN) {
                    *v = act.s[(t0 + j) * nb + b];
                }
                let sv = _mm_loadu_ps(sv.as_ptr());
                for r in 0..RM {
                    msum[r] = _mm_add_ps(msum[r], _mm_mul_ps(_mm_set1_ps(pk.mins[r * nb + b]), sv));
                }
            }
        }
        for r in 0..RM {
            let mut m = [0f32; 4];
            _mm_storeu_ps(m.as_mut_ptr(), msum[r]);
            for j in 0..TN {
                res[r][j] = hsum8(acc[r][j]) + m[j];
            }
        }
    }

    /// Two blocks per 512-bit step: lanes 0-7 carry block b, lanes 8-15 block b + 1, with the
    /// scale pair [d_b x8, d_b+1 x8] loaded as one vector (`Packed::dw` keeps 8 copies per
    /// block for this). Half the instructions of `tile` per multiply-add; even and odd blocks
    /// accumulate apart, so the sum's order differs from ggml's.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx512vl,avx2,fma,f16c")]
    pub unsafe fn tile_wide<const TN: usize, const SIGNED_W: bool>(
        pk: &Packed,
        act: &Q8_1Act,
        k: usize,
        t0: usize,
        res: &mut [[f32; RN]; RM],
    ) {
        let nb = k / 32;
        let flip = _mm512_set1_epi8(-128);
        let mut acc = [[_mm512_setzero_ps(); TN]; RM];
        let mut msum = [_mm_setzero_ps(); RM];
        for b in (0..nb).step_by(2) {
            let mut wv = [_mm512_setzero_si512(); RM];
            let mut dw = [_mm512_setzero_ps(); RM];
            for r in 0..RM {
                wv[r] = _mm512_loadu_si512(pk.q.as_ptr().add(r * k + b * 32) as *const _);
                dw[r] = _mm512_loadu_ps(pk.dw.as_ptr().add((r * nb + b) * 8));
            }
            for j in 0..TN {
                let tb = (t0 + j) * nb + b;
                let x = _mm512_loadu_si512(act.qs.as_ptr().add(tb * 32) as *const _);
                let dx = _mm512_mask_blend_ps(
                    0xFF00,
                    _mm512_set1_ps(act.d[tb]),
                    _mm512_set1_ps(act.d[tb + 1]),
                );
                for r in 0..RM {
                    let prod = if SIGNED_W {
                        let bias =
                            _mm512_loadu_si512(pk.bias.as_ptr().add(r * k / 4 + b * 8) as *const _);
                        _mm512_dpbusd_epi32(bias, _mm512_xor_si512(x, flip), wv[r])
                    } else {
                        _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv[r], x)
                    };
                    acc[r][j] = _mm512_fmadd_ps(
                        _mm512_mul_ps(dw[r], dx),
                        _mm512_cvtepi32_ps(prod),
                        acc[r][j],
                    );
                }
            }
            if !SIGNED_W {
                for bb in b..b + 2 {
                    let mut sv = [0f32; 4];
                    for (j, v) in sv.iter_mut().enumerate().take(TN) {
                        *v = act.s[(t0 + j) * nb + bb];
                    }
                    let sv = _mm_loadu_ps(sv.as_ptr());
                    for r in 0..RM {
                        msum[r] =
                            _mm_add_ps(msum[r], _mm_mul_ps(_mm_set1_ps(pk.mins[r * nb + bb]), sv));
                    }
                }
            }
        }
        for r in 0..RM {
            let mut m = [0f32; 4];
            _mm_storeu_ps(m.as_mut_ptr(), msum[r]);
            for j in 0..TN {
                res[r][j] = _mm512_reduce_add_ps(acc[r][j]) + m[j];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vnni_tiles_match_row_kernels() {
        if !has_vnni() {
            eprintln!("no AVX-512 VNNI on this CPU: the tile falls back to the row kernels");
        }
        use crate::kernels::qdot::{dot_q4_0, dot_q4_1, dot_q8_0, Q8_1Row};
        use crate::kernels::qdot_q5::{dot_q5_0, dot_q5_1};
        let dots = [
            (GgmlType::Q4_0, dot_q4_0 as fn(&[u8], &Q8_1Row) -> f32),
            (GgmlType::Q4_1, dot_q4_1),
            (GgmlType::Q5_0, dot_q5_0),
            (GgmlType::Q5_1, dot_q5_1),
            (GgmlType::Q8_0, dot_q8_0),
        ];
        for (ty, dot) in dots {
            for (n, k, t) in [
                (4, 64, 4),
                (7, 576, 5),
                (9, 1536, 3),
                (1, 128, 1),
                (5, 576, 70),
            ] {
                let bytes = super::super::test_matrix(ty, n, k, (n * k) as u64);
                let w = QMat::new(ty, n, k, &bytes).unwrap();
                let x = super::super::test_data(t * k, 99);
                let mut act = SplitAct::default();
                act.quantize(&x);
                let mut y = vec![0f32; t * n];
                // SAFETY: y is (t, n) and owned here.
                unsafe { gemm_rows(&w, 0, n, &act, t, y.as_mut_ptr(), n) };
                for i in 0..t {
                    let (hi, lo) = (act.hi.token(i, k / 32), act.lo.token(i, k / 32));
                    for r in 0..n {
                        let want = dot(w.row(r), &hi) + dot(w.row(r), &lo);
                        let got = y[i * n + r];
                        if has_vnni() && t < WIDE_FROM {
                            // same order of operations as the row kernel: the same bits
                            assert_eq!(
                                got.to_bits(),
                                want.to_bits(),
                                "{ty} n={n} k={k} t={t} ({i},{r}): {got} vs {want}"
                            );
                        }
                        assert!(
                            (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
                            "{ty} n={n} k={k} t={t} ({i},{r}): {got} vs {want}"
                        );
                    }
                }
            }
        }
    }

    /// Logits must not depend on how a prompt is batched: `matmul` over T tokens (the tiles)
    /// equals T calls of `matvec` (the row dots) bit for bit.
    #[test]
    fn batched_prefill_equals_token_by_token_decode() {
        use crate::kernels::qmatmul::{matmul, matvec};
        let (n, k, t) = (37, 576, 6);
        for ty in [GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::Q5_1] {
            let bytes = super::super::test_matrix(ty, n, k, 21);
            let w = QMat::new(ty, n, k, &bytes).unwrap();
            let x = super::super::test_data(t * k, 22);
            let mut y = vec![0f32; t * n];
            matmul(&w, &x, t, &mut y);
            let mut y1 = vec![0f32; n];
            for i in 0..t {
                matvec(&w, &x[i * k..(i + 1) * k], &mut y1);
                if supports(ty, k) {
                    assert_eq!(&y[i * n..(i + 1) * n], &y1[..], "{ty} token {i}");
                }
            }
        }
    }
}
