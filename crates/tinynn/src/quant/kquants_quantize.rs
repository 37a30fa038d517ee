//! Encoding the k-quants: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and Q8_K, as ggml-quants.c's
//! `quantize_row_q{2,3,4,5,6,8}_K_ref` (no importance matrix), bit for bit.
//!
//! The pattern: fit each sub-block (`scale_search`), quantize the sub-block scales (and
//! mins) against the super-block's largest, then requantize every element against the
//! scale it will actually be decoded with. Byte layouts are listed in `kquants`.

use super::float::{f16_at, f16_bytes};
use super::kquants::{get_scale_min_k4, q3_k_scales};
use super::scale_search::{
    make_q3_quants, make_qkx2_quants, make_qx_quants, nearest_int, GROUP_MAX_EPS,
};
use super::QK_K;

/// Four 2-bit quants per byte: byte `l` of each 32-byte run holds elements `l`, `l + 32`,
/// `l + 64`, `l + 96` of its 128-element half (Q2_K and Q3_K `qs`).
pub(crate) fn pack_2bit(l: &[u8; QK_K], qs: &mut [u8]) {
    for (half, q) in l.chunks_exact(128).zip(qs.chunks_exact_mut(32)) {
        for (j, b) in q.iter_mut().enumerate() {
            *b = half[j] | (half[j + 32] << 2) | (half[j + 64] << 4) | (half[j + 96] << 6);
        }
    }
}

pub fn quantize_block_q2_k(x: &[f32; QK_K], y: &mut [u8; 84]) {
    const Q4SCALE: f32 = 15.0;
    let mut l = [0u8; QK_K];
    let (mut scales, mut mins) = ([0f32; 16], [0f32; 16]);
    let (mut max_scale, mut max_min) = (0f32, 0f32);
    for j in 0..QK_K / 16 {
        let xs = &x[16 * j..16 * j + 16];
        let mut weights = [0f32; 16];
        for (w, v) in weights.iter_mut().zip(xs) {
            *w = v.abs();
        }
        let ls = &mut l[16 * j..16 * j + 16];
        (scales[j], mins[j]) = make_qkx2_quants(xs, &weights, ls, 3, -0.5, 0.1, 15, true);
        if scales[j] > max_scale {
            max_scale = scales[j];
        }
        if mins[j] > max_min {
            max_min = mins[j];
        }
    }
    let sc = &mut y[0..16];
    sc.fill(0);
    if max_scale > 0.0 {
        let iscale = Q4SCALE / max_scale;
        for (b, &s) in sc.iter_mut().zip(&scales) {
            *b = nearest_int(iscale * s) as u8;
        }
    }
    if max_min > 0.0 {
        let iscale = Q4SCALE / max_min;
        for (b, &m) in sc.iter_mut().zip(&mins) {
            *b |= (nearest_int(iscale * m) << 4) as u8;
        }
    }
    let d = if max_scale > 0.0 {
        max_scale / Q4SCALE
    } else {
        0.0
    };
    let dmin = if max_min > 0.0 {
        max_min / Q4SCALE
    } else {
        0.0
    };
    y[80..82].copy_from_slice(&f16_bytes(d));
    y[82..84].copy_from_slice(&f16_bytes(dmin));
    let (d, dmin) = (f16_at(y, 80), f16_at(y, 82));
    let subs = x.chunks_exact(16).zip(l.chunks_exact_mut(16));
    for (&s, (xs, ls)) in y[0..16].iter().zip(subs) {
        let d = d * (s & 0x0f) as f32;
        if d == 0.0 {
            continue; // keep the quants from the fit
        }
        let dm = dmin * (s >> 4) as f32;
        for (q, &v) in ls.iter_mut().zip(xs) {
            *q = nearest_int((v + dm) / d).clamp(0, 3) as u8;
        }
    }
    pack_2bit(&l, &mut y[16..80]);
}

pub fn quantize_block_q3_k(x: &[f32; QK_K], y: &mut [u8; 110]) {
    let mut l = [0i8; QK_K];
    let mut scales = [0f32; 16];
    let (mut max_scale, mut amax) = (0f32, 0f32);
    for j in 0..QK_K / 16 {
        scales[j] = make_q3_quants(
            &x[16 * j..16 * j + 16],
            &mut l[16 * j..16 * j + 16],
            4,
            true,
        );
        if scales[j].abs() > amax {
            amax = scales[j].abs();
            max_scale = scales[j];
        }
    }
    y.fill(0);
    if max_scale != 0.0 {
        let iscale = -32.0 / max_scale;
        let sc = &mut y[96..108];
        for (j, &s) in scales.iter().enumerate() {
            let ls = ((nearest_int(iscale * s) as i8).clamp(-32, 31) + 32) as u8;
            if j < 8 {
                sc[j] = ls & 0x0f;
            } else {
                sc[j - 8] |= (ls & 0x0f) << 4;
            }
            sc[8 + j % 4] |= (ls >> 4) << (2 * (j / 4));
        }
        y[108..110].copy_from_slice(&f16_bytes(1.0 / iscale));
    } else {
        y[108..110].copy_from_slice(&f16_bytes(0.0));
    }
    finish_q3_k(x, &mut l, y);
}

/// Q3_K's last steps once its scales and `d` are in `y` (the `hmask` bytes zero): every
/// element requantized against the scale it decodes with, high bits to `hmask`, low bits packed.
pub(crate) fn finish_q3_k(x: &[f32; QK_K], l: &mut [i8; QK_K], y: &mut [u8; 110]) {
    let d_all = f16_at(y, 108);
    let sc = q3_k_scales(&y[96..108]);
    for (&s, (xs, ls)) in sc
        .iter()
        .zip(x.chunks_exact(16).zip(l.chunks_exact_mut(16)))
    {
        let d = d_all * s as f32;
        if d == 0.0 {
            continue;
        }
        for (q, &v) in ls.iter_mut().zip(xs) {
            *q = (nearest_int(v / d).clamp(-4, 3) + 4) as i8;
        }
    }
    // High bits: element j's goes to hmask[j % 32], bit j / 32.
    let mut low = [0u8; QK_K];
    for (j, (&q, lo)) in l.iter().zip(low.iter_mut()).enumerate() {
        let q = q as u8;
        if q > 3 {
            y[j % 32] |= 1 << (j / 32);
        }
        *lo = q & 3;
    }
    pack_2bit(&low, &mut y[32..96]);
}

/// Q4_K and Q5_K share everything but the quant width: 8 sub-blocks of 32, each fit with
/// `make_qkx2_quants` under weights `rms + |x|`, scales and mins to 6 bits.
fn quantize_scales_mins_k(
    x: &[f32; QK_K],
    l: &mut [u8; QK_K],
    y: &mut [u8],
    nmax: i32,
    rmin: f32,
    nstep: i32,
) {
    let (mut scales, mut mins) = ([0f32; 8], [0f32; 8]);
    let (mut max_scale, mut max_min) = (0f32, 0f32);
    for j in 0..QK_K / 32 {
        let xs = &x[32 * j..32 * j + 32];
        let mut sum_x2 = 0f32;
        for v in xs {
            sum_x2 += v * v;
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        let mut weights = [0f32; 32];
        for (w, v) in weights.iter_mut().zip(xs) {
            *w = av_x + v.abs();
        }
        let ls = &mut l[32 * j..32 * j + 32];
        (scales[j], mins[j]) = make_qkx2_quants(xs, &weights, ls, nmax, rmin, 0.1, nstep, false);
        if scales[j] > max_scale {
            max_scale = scales[j];
        }
        if mins[j] > max_min {
            max_min = mins[j];
        }
    }
    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let (mut ls, mut lm) = ([0u8; 8], [0u8; 8]);
    for j in 0..QK_K / 32 {
        ls[j] = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        lm[j] = (nearest_int(inv_min * mins[j]) as u8).min(63);
    }
    finish_scales_mins_k(
        x,
        l,
        y,
        nmax,
        (&ls, &lm),
        (max_scale / 63.0, max_min / 63.0),
    );
}

/// Q4_K/Q5_K's last steps once the 6-bit sub-block scales `ls` and mins `lm` and the
/// super-block's `d`, `dmin` are chosen: pack them into `y[0..16]`, then requantize every
/// element against the scale and min it will decode with.
pub(crate) fn finish_scales_mins_k(
    x: &[f32; QK_K],
    l: &mut [u8; QK_K],
    y: &mut [u8],
    nmax: i32,
    (ls, lm): (&[u8; 8], &[u8; 8]),
    (d, dmin): (f32, f32),
) {
    let sc = &mut y[4..16];
    sc.fill(0);
    for j in 0..QK_K / 32 {
        let (ls, lm) = (ls[j], lm[j]);
        if j < 4 {
            sc[j] = ls;
            sc[j + 4] = lm;
        } else {
            sc[j + 4] = (ls & 0x0f) | ((lm & 0x0f) << 4);
            sc[j - 4] |= (ls >> 4) << 6;
            sc[j] |= (lm >> 4) << 6;
        }
    }
    y[0..2].copy_from_slice(&f16_bytes(d));
    y[2..4].copy_from_slice(&f16_bytes(dmin));
    let (d, dmin) = (f16_at(y, 0), f16_at(y, 2));
    for j in 0..QK_K / 32 {
        let (sc, m) = get_scale_min_k4(j, &y[4..16]);
        let d = d * sc as f32;
        if d == 0.0 {
            continue;
        }
        let dm = dmin * m as f32;
        for i in 32 * j..32 * j + 32 {
            l[i] = nearest_int((x[i] + dm) / d).clamp(0, nmax) as u8;
        }
    }
}

pub fn quantize_block_q4_k(x: &[f32; QK_K], y: &mut [u8; 144]) {
    let mut l = [0u8; QK_K];
    quantize_scales_mins_k(x, &mut l, y, 15, -1.0, 20);
    pack_q4_k(&l, y);
}

/// Q4_K's quants, two a byte: byte `j` of each 32-byte run holds elements `j` and `j + 32`
/// of its 64.
pub(crate) fn pack_q4_k(l: &[u8; QK_K], y: &mut [u8; 144]) {
    let qs = &mut y[16..144];
    for (run, q) in l.chunks_exact(64).zip(qs.chunks_exact_mut(32)) {
        for (j, b) in q.iter_mut().enumerate() {
            *b = run[j] | (run[j + 32] << 4);
        }
    }
}

pub fn quantize_block_q5_k(x: &[f32; QK_K], y: &mut [u8; 176]) {
    let mut l = [0u8; QK_K];
    quantize_scales_mins_k(x, &mut l, y, 31, -0.5, 15);
    pack_q5_k(&l, y);
}

/// Q5_K's quants: low nibbles as Q4_K's, the fifth bits in `qh` (element `j` of run `n`
/// at byte `j`, bit `2n`, element `j + 32` at bit `2n + 1`).
pub(crate) fn pack_q5_k(l: &[u8; QK_K], y: &mut [u8; 176]) {
    let (qh, qs) = y[16..176].split_at_mut(32);
    qh.fill(0);
    for (n, (run, q)) in l.chunks_exact(64).zip(qs.chunks_exact_mut(32)).enumerate() {
        let (m1, m2) = (1u8 << (2 * n), 2u8 << (2 * n));
        for (j, b) in q.iter_mut().enumerate() {
            let (mut l1, mut l2) = (run[j], run[j + 32]);
            if l1 > 15 {
                l1 -= 16;
                qh[j] |= m1;
            }
            if l2 > 15 {
                l2 -= 16;
                qh[j] |= m2;
            }
            *b = l1 | (l2 << 4);
        }
    }
}

pub fn quantize_block_q6_k(x: &[f32; QK_K], y: &mut [u8; 210]) {
    quantize_block_q6_k_weighted(x, y, None)
}

/// Q6_K with an importance matrix `qw` (this super-block's 256 weights) as the sub-block
/// fits' weights, as ggml's `quantize_row_q6_K_impl`; `None` is the reference quantizer.
pub(crate) fn quantize_block_q6_k_weighted(x: &[f32; QK_K], y: &mut [u8; 210], qw: Option<&[f32]>) {
    let mut l = [0i8; QK_K];
    let mut scales = [0f32; 16];
    let (mut max_scale, mut max_abs_scale) = (0f32, 0f32);
    for ib in 0..QK_K / 16 {
        let s = make_qx_quants(
            &x[16 * ib..16 * ib + 16],
            &mut l[16 * ib..16 * ib + 16],
            32,
            1,
            qw.map(|w| &w[16 * ib..16 * ib + 16]),
        );
        scales[ib] = s;
        if s.abs() > max_abs_scale {
            max_abs_scale = s.abs();
            max_scale = s;
        }
    }
    y.fill(0);
    if max_abs_scale < GROUP_MAX_EPS {
        return;
    }
    let iscale = -128.0 / max_scale;
    y[208..210].copy_from_slice(&f16_bytes(1.0 / iscale));
    for (b, &s) in y[192..208].iter_mut().zip(&scales) {
        *b = nearest_int(iscale * s).min(127) as i8 as u8;
    }
    let d_all = f16_at(y, 208);
    for j in 0..QK_K / 16 {
        let d = d_all * y[192 + j] as i8 as f32;
        if d == 0.0 {
            continue;
        }
        for i in 16 * j..16 * j + 16 {
            l[i] = (nearest_int(x[i] / d).clamp(-32, 31) + 32) as i8;
        }
    }
    // Per 128 elements: low nibbles of runs 0/2 and 1/3 share bytes; 2-bit highs pack 4 a byte.
    for (n, half) in l.chunks_exact(128).enumerate() {
        let q = |k: usize| half[k] as u8;
        for j in 0..32 {
            y[64 * n + j] = (q(j) & 0x0f) | ((q(j + 64) & 0x0f) << 4);
            y[64 * n + j + 32] = (q(j + 32) & 0x0f) | ((q(j + 96) & 0x0f) << 4);
            y[128 + 32 * n + j] = (q(j) >> 4)
                | ((q(j + 32) >> 4) << 2)
                | ((q(j + 64) >> 4) << 4)
                | ((q(j + 96) >> 4) << 6);
        }
    }
}

pub fn quantize_block_q8_k(x: &[f32; QK_K], y: &mut [u8; 292]) {
    let (mut max, mut amax) = (0f32, 0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    y.fill(0);
    if amax == 0.0 {
        return;
    }
    // ggml uses -127 (not -128) so the quants stay symmetric for its IQ dot products.
    let iscale = -127.0 / max;
    for (q, &v) in y[4..260].iter_mut().zip(x) {
        *q = nearest_int(iscale * v).min(127) as i8 as u8;
    }
    for j in 0..QK_K / 16 {
        let sum: i32 = y[4 + 16 * j..4 + 16 * j + 16]
            .iter()
            .map(|&q| q as i8 as i32)
            .sum();
        y[260 + 2 * j..262 + 2 * j].copy_from_slice(&(sum as i16).to_le_bytes());
    }
    y[0..4].copy_from_slice(&(1.0 / iscale).to_le_bytes());
}
