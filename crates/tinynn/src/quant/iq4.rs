//! IQ4_NL and IQ4_XS: 4-bit indices into a fixed non-linear table of 16 levels
//! (`kvalues_iq4nl` in ggml-common.h). Ports of ggml-quants.c's `dequantize_row_iq4_nl` /
//! `dequantize_row_iq4_xs` and of the quantizer both share, `quantize_row_iq4_nl_impl`.
//!
//! IQ4_NL (18 bytes / 32 elements): f16 `d`, 16 nibble bytes (low half element `j`, high
//! half `j + 16`). IQ4_XS (136 bytes / 256): f16 `d`, u16 `scales_h`, 4 bytes `scales_l`,
//! 128 nibble bytes; each 32-element sub-block has a 6-bit scale biased by 32.

use super::float::{f16_at, f16_bytes};
use super::scale_search::nearest_int;
use super::QK_K;

/// The 16 levels of the non-linear 4-bit grid.
pub const KVALUES_IQ4NL: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

pub fn dequantize_block_iq4_nl(x: &[u8; 18], y: &mut [f32; 32]) {
    let d = f16_at(x, 0);
    for j in 0..16 {
        let q = x[2 + j];
        y[j] = d * KVALUES_IQ4NL[(q & 0x0f) as usize] as f32;
        y[j + 16] = d * KVALUES_IQ4NL[(q >> 4) as usize] as f32;
    }
}

pub fn dequantize_block_iq4_xs(x: &[u8; 136], y: &mut [f32; QK_K]) {
    let d = f16_at(x, 0);
    let scales_h = u16::from_le_bytes([x[2], x[3]]) as i32;
    let scales_l = &x[4..8];
    let qs = &x[8..136];
    for ib in 0..QK_K / 32 {
        let lo = ((scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0f) as i32;
        let ls = lo | (((scales_h >> (2 * ib)) & 3) << 4);
        let dl = d * (ls - 32) as f32;
        let (q, out) = (&qs[16 * ib..16 * ib + 16], &mut y[32 * ib..32 * ib + 32]);
        for j in 0..16 {
            out[j] = dl * KVALUES_IQ4NL[(q[j] & 0x0f) as usize] as f32;
            out[j + 16] = dl * KVALUES_IQ4NL[(q[j] >> 4) as usize] as f32;
        }
    }
}

/// `val`'s index nearest to `x` (ties to the lower), by bisection (`best_index_int8`).
fn best_index(val: &[i8; 16], x: f32) -> u8 {
    if x <= val[0] as f32 {
        return 0;
    }
    if x >= val[15] as f32 {
        return 15;
    }
    let (mut ml, mut mu) = (0usize, 15usize);
    while mu - ml > 1 {
        let mav = (ml + mu) / 2;
        if x < val[mav] as f32 {
            mu = mav;
        } else {
            ml = mav;
        }
    }
    if x - (val[mu - 1] as f32) < val[mu] as f32 - x {
        (mu - 1) as u8
    } else {
        mu as u8
    }
}

/// One super-block `x` (32 elements for IQ4_NL, 256 for IQ4_XS) as ggml's
/// `quantize_row_iq4_nl_impl` with `ntry` 7, what `quantize_iq4_nl` / `quantize_iq4_xs` (and
/// so llama-quantize) use: each 32-block's scale is the best of 15 trial scales under weights
/// `qw * sqrt(sigma2 + x^2)` (the importance matrix `qw`) or `x^2` without one; IQ4_XS then
/// rounds the block scales to 6 bits against the largest and reassigns every index. `y` is
/// the whole block: IQ4_NL `d, qs[16]`; IQ4_XS `d, scales_h, scales_l[4], qs[128]`.
pub(crate) fn quantize_iq4(x: &[f32], y: &mut [u8], qw: Option<&[f32]>) {
    const NTRY: i32 = 7;
    let values = &KVALUES_IQ4NL;
    let n = x.len();
    let nb = n / 32;
    let mut sigma2 = 0f32;
    for v in x {
        sigma2 += v * v;
    }
    sigma2 *= 2.0 / n as f32;
    let mut l = [0u8; QK_K];
    let mut scales = [0f32; QK_K / 32];
    let (mut max_scale, mut amax_scale) = (0f32, 0f32);
    for ib in 0..nb {
        let xb = &x[32 * ib..32 * ib + 32];
        let mut weight = [0f32; 32];
        for j in 0..32 {
            weight[j] = match qw {
                Some(qw) => qw[32 * ib + j] * (sigma2 + xb[j] * xb[j]).sqrt(),
                None => xb[j] * xb[j],
            };
        }
        let (mut amax, mut max) = (0f32, 0f32);
        for &v in xb {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        if amax < super::scale_search::GROUP_MAX_EPS {
            scales[ib] = 0.0;
            continue;
        }
        // (sum w q x, sum w q^2) with each element at its nearest level under scale 1 / id
        let fit = |id: f32| {
            let (mut sumqx, mut sumq2) = (0f32, 0f32);
            for j in 0..32 {
                let q = values[best_index(values, id * xb[j]) as usize] as f32;
                sumqx += weight[j] * q * xb[j];
                sumq2 += weight[j] * q * q;
            }
            (sumqx, sumq2)
        };
        let d0 = -max / values[0] as f32;
        let (sumqx, sumq2) = fit(1.0 / d0);
        let mut d = if sumq2 > 0.0 { sumqx / sumq2 } else { 0.0 };
        let mut best = d * sumqx;
        for itry in -NTRY..=NTRY {
            let id = (itry as f32 + values[0] as f32) / max;
            let (sumqx, sumq2) = fit(id);
            if sumq2 > 0.0 && sumqx * sumqx > best * sumq2 {
                d = sumqx / sumq2;
                best = d * sumqx;
            }
        }
        scales[ib] = d;
        if d.abs() > amax_scale {
            amax_scale = d.abs();
            max_scale = d;
        }
    }
    let qs_at = if nb > 1 {
        y[2..8].fill(0);
        let d = -max_scale / 32.0;
        y[0..2].copy_from_slice(&f16_bytes(d));
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut scales_h = 0u16;
        for ib in 0..nb {
            let ls = nearest_int(id * scales[ib]).clamp(-32, 31);
            let dl = d * ls as f32;
            let idl = if dl != 0.0 { 1.0 / dl } else { 0.0 };
            for j in 32 * ib..32 * ib + 32 {
                l[j] = best_index(values, idl * x[j]);
            }
            let ls = (ls + 32) as u8;
            y[4 + ib / 2] |= (ls & 0x0f) << (4 * (ib % 2));
            scales_h |= ((ls >> 4) as u16) << (2 * (ib % 8));
        }
        y[2..4].copy_from_slice(&scales_h.to_le_bytes());
        8
    } else {
        y[0..2].copy_from_slice(&f16_bytes(scales[0]));
        let id = if scales[0] != 0.0 {
            1.0 / scales[0]
        } else {
            0.0
        };
        for j in 0..32 {
            l[j] = best_index(values, id * x[j]);
        }
        2
    };
    for (i, q) in y[qs_at..].chunks_exact_mut(16).enumerate() {
        for (j, b) in q.iter_mut().enumerate() {
            *b = l[32 * i + j] | (l[32 * i + 16 + j] << 4);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iq4_nl_block_by_hand() {
        let mut x = [0u8; 18];
        x[0..2].copy_from_slice(&[0x00, 0x3c]); // d = 1
        x[2] = 0xf0; // element 0 -> level 0 (-127), element 16 -> level 15 (113)
        let mut y = [0f32; 32];
        dequantize_block_iq4_nl(&x, &mut y);
        let mut want = [-127f32; 32];
        want[16] = 113.0;
        assert_eq!(y, want);
    }

    #[test]
    fn iq4_xs_block_by_hand() {
        let mut x = [0u8; 136];
        x[0..2].copy_from_slice(&[0x00, 0x38]); // d = 0.5
        x[2..4].copy_from_slice(&0x000au16.to_le_bytes()); // high bits: sub-blocks 0, 1 -> 2
        x[4] = 0x21; // low bits: sub-block 0 -> 1, sub-block 1 -> 2
        x[8] = 0x98; // element 0 -> level 8 (1), element 16 -> level 9 (13)
        let mut y = [0f32; QK_K];
        dequantize_block_iq4_xs(&x, &mut y);
        // sub-block 0: scale 33 - 32 = 1 -> dl 0.5; sub-block 1: 34 - 32 -> dl 1;
        // the rest: scale 0 - 32 -> dl -16.
        assert_eq!((y[0], y[16], y[1]), (0.5, 6.5, -63.5));
        assert_eq!((y[32], y[63]), (-127.0, -127.0));
        assert_eq!((y[64], y[255]), (2032.0, 2032.0));
    }
}
