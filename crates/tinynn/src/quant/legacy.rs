//! The legacy 32-element block types: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1. One f16 scale `d`
//! per block (plus a min `m` or sum `s` for the `_1` kinds), then the quants. Ports of
//! ggml-quants.c's `dequantize_row_*` and `quantize_row_*_ref`, bit for bit.
//!
//! Nibble layout (Q4/Q5): byte `j` holds element `j` in its low half and `j + 16` in its
//! high half; Q5's fifth bits sit in a little-endian u32 `qh`, bit `j` for element `j`.

use super::float::{f16_at, f16_bytes};

/// Elements per block.
pub const QK: usize = 32;

pub fn dequantize_block_q4_0(x: &[u8; 18], y: &mut [f32; QK]) {
    let d = f16_at(x, 0);
    for j in 0..QK / 2 {
        let q = x[2 + j];
        y[j] = ((q & 0x0f) as i32 - 8) as f32 * d;
        y[j + 16] = ((q >> 4) as i32 - 8) as f32 * d;
    }
}

pub fn dequantize_block_q4_1(x: &[u8; 20], y: &mut [f32; QK]) {
    let (d, m) = (f16_at(x, 0), f16_at(x, 2));
    for j in 0..QK / 2 {
        let q = x[4 + j];
        y[j] = (q & 0x0f) as f32 * d + m;
        y[j + 16] = (q >> 4) as f32 * d + m;
    }
}

pub fn dequantize_block_q5_0(x: &[u8; 22], y: &mut [f32; QK]) {
    let d = f16_at(x, 0);
    let qh = u32::from_le_bytes([x[2], x[3], x[4], x[5]]);
    for j in 0..QK / 2 {
        let q = x[6 + j] as u32;
        let h0 = ((qh >> j) << 4) & 0x10;
        let h1 = (qh >> (j + 12)) & 0x10;
        y[j] = (((q & 0x0f) | h0) as i32 - 16) as f32 * d;
        y[j + 16] = (((q >> 4) | h1) as i32 - 16) as f32 * d;
    }
}

pub fn dequantize_block_q5_1(x: &[u8; 24], y: &mut [f32; QK]) {
    let (d, m) = (f16_at(x, 0), f16_at(x, 2));
    let qh = u32::from_le_bytes([x[4], x[5], x[6], x[7]]);
    for j in 0..QK / 2 {
        let q = x[8 + j] as u32;
        let h0 = ((qh >> j) << 4) & 0x10;
        let h1 = (qh >> (j + 12)) & 0x10;
        y[j] = ((q & 0x0f) | h0) as f32 * d + m;
        y[j + 16] = ((q >> 4) | h1) as f32 * d + m;
    }
}

pub fn dequantize_block_q8_0(x: &[u8; 34], y: &mut [f32; QK]) {
    let d = f16_at(x, 0);
    for (y, &q) in y.iter_mut().zip(&x[2..]) {
        *y = q as i8 as f32 * d;
    }
}

/// Q8_1 decodes like Q8_0; its `s` (= d * sum of quants) only serves dot products.
pub fn dequantize_block_q8_1(x: &[u8; 36], y: &mut [f32; QK]) {
    let d = f16_at(x, 0);
    for (y, &q) in y.iter_mut().zip(&x[4..]) {
        *y = q as i8 as f32 * d;
    }
}

/// The element of largest magnitude, signed (the first one on ties), as ggml picks `max`.
#[inline]
fn signed_absmax(x: &[f32]) -> f32 {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    max
}

#[inline]
fn min_max(x: &[f32]) -> (f32, f32) {
    let (mut min, mut max) = (f32::MAX, -f32::MAX);
    for &v in x {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    (min, max)
}

#[inline]
fn inverse(d: f32) -> f32 {
    if d != 0.0 {
        1.0 / d
    } else {
        0.0
    }
}

pub fn quantize_block_q4_0(x: &[f32; QK], y: &mut [u8; 18]) {
    // The largest-magnitude element maps to -8 exactly, so the range -8..=7 is used whole.
    let d = signed_absmax(x) / -8.0;
    let id = inverse(d);
    y[0..2].copy_from_slice(&f16_bytes(d));
    for j in 0..QK / 2 {
        // `as i8` truncates toward zero like C's `(int8_t)` cast for these in-range values.
        let q0 = ((x[j] * id + 8.5) as i8).min(15) as u8;
        let q1 = ((x[j + 16] * id + 8.5) as i8).min(15) as u8;
        y[2 + j] = q0 | (q1 << 4);
    }
}

pub fn quantize_block_q4_1(x: &[f32; QK], y: &mut [u8; 20]) {
    let (min, max) = min_max(x);
    let d = (max - min) / 15.0;
    let id = inverse(d);
    y[0..2].copy_from_slice(&f16_bytes(d));
    y[2..4].copy_from_slice(&f16_bytes(min));
    for j in 0..QK / 2 {
        let q0 = (((x[j] - min) * id + 0.5) as i8).min(15) as u8;
        let q1 = (((x[j + 16] - min) * id + 0.5) as i8).min(15) as u8;
        y[4 + j] = q0 | (q1 << 4);
    }
}

pub fn quantize_block_q5_0(x: &[f32; QK], y: &mut [u8; 22]) {
    let d = signed_absmax(x) / -16.0;
    let id = inverse(d);
    y[0..2].copy_from_slice(&f16_bytes(d));
    let mut qh = 0u32;
    for j in 0..QK / 2 {
        let q0 = ((x[j] * id + 16.5) as i8).min(31) as u8;
        let q1 = ((x[j + 16] * id + 16.5) as i8).min(31) as u8;
        y[6 + j] = (q0 & 0x0f) | ((q1 & 0x0f) << 4);
        qh |= (((q0 & 0x10) >> 4) as u32) << j;
        qh |= (((q1 & 0x10) >> 4) as u32) << (j + 16);
    }
    y[2..6].copy_from_slice(&qh.to_le_bytes());
}

pub fn quantize_block_q5_1(x: &[f32; QK], y: &mut [u8; 24]) {
    let (min, max) = min_max(x);
    let d = (max - min) / 31.0;
    let id = inverse(d);
    y[0..2].copy_from_slice(&f16_bytes(d));
    y[2..4].copy_from_slice(&f16_bytes(min));
    let mut qh = 0u32;
    for j in 0..QK / 2 {
        // ggml has no clamp here: (max - min) * id rounds to at most 31.
        let q0 = ((x[j] - min) * id + 0.5) as u8;
        let q1 = ((x[j + 16] - min) * id + 0.5) as u8;
        y[8 + j] = (q0 & 0x0f) | ((q1 & 0x0f) << 4);
        qh |= (((q0 & 0x10) >> 4) as u32) << j;
        qh |= (((q1 & 0x10) >> 4) as u32) << (j + 16);
    }
    y[4..8].copy_from_slice(&qh.to_le_bytes());
}

/// `MAX(amax, fabsf(v))` over the block, with C's `MAX` (a NaN propagates).
#[inline]
fn absmax(x: &[f32]) -> f32 {
    x.iter()
        .fold(0f32, |amax, v| if amax > v.abs() { amax } else { v.abs() })
}

pub fn quantize_block_q8_0(x: &[f32; QK], y: &mut [u8; 34]) {
    let d = absmax(x) / 127.0;
    let id = inverse(d);
    y[0..2].copy_from_slice(&f16_bytes(d));
    for (q, &v) in y[2..].iter_mut().zip(x) {
        // roundf: halves away from zero, as f32::round.
        *q = (v * id).round() as i8 as u8;
    }
}

pub fn quantize_block_q8_1(x: &[f32; QK], y: &mut [u8; 36]) {
    let d = absmax(x) / 127.0;
    let id = inverse(d);
    y[0..2].copy_from_slice(&f16_bytes(d));
    let mut sum = 0i32;
    for (q, &v) in y[4..].iter_mut().zip(x) {
        let qi = (v * id).round() as i8;
        sum += qi as i32;
        *q = qi as u8;
    }
    y[2..4].copy_from_slice(&f16_bytes(sum as f32 * d));
}

#[cfg(test)]
mod tests {
    use super::*;

    const F16_ONE: [u8; 2] = [0x00, 0x3c];
    const F16_HALF: [u8; 2] = [0x00, 0x38];
    const F16_TWO: [u8; 2] = [0x00, 0x40];

    #[test]
    fn q8_0_block_by_hand() {
        let mut x = [0u8; 34];
        x[0..2].copy_from_slice(&F16_HALF);
        let qs: [i8; 5] = [0, 1, -1, 127, -128];
        for (i, q) in qs.iter().enumerate() {
            x[2 + i] = *q as u8;
        }
        let mut y = [9f32; QK];
        dequantize_block_q8_0(&x, &mut y);
        assert_eq!(&y[..5], &[0.0, 0.5, -0.5, 63.5, -64.0]);
        assert!(y[5..].iter().all(|&v| v == 0.0));
    }

    #[test]
    fn q4_0_block_by_hand() {
        let mut x = [0x88u8; 18]; // every nibble 8 -> 0
        x[0..2].copy_from_slice(&F16_TWO);
        x[2] = 0x3a; // element 0: (10 - 8) * 2 = 4; element 16: (3 - 8) * 2 = -10
        let mut y = [9f32; QK];
        dequantize_block_q4_0(&x, &mut y);
        let mut want = [0f32; QK];
        want[0] = 4.0;
        want[16] = -10.0;
        assert_eq!(y, want);
    }

    #[test]
    fn q4_1_block_by_hand() {
        let mut x = [0u8; 20];
        x[0..2].copy_from_slice(&F16_HALF); // d = 0.5
        x[2..4].copy_from_slice(&[0x00, 0xbc]); // m = -1
        x[4 + 1] = 0xf0; // element 1: 0 * 0.5 - 1; element 17: 15 * 0.5 - 1 = 6.5
        let mut y = [9f32; QK];
        dequantize_block_q4_1(&x, &mut y);
        let mut want = [-1f32; QK];
        want[17] = 6.5;
        assert_eq!(y, want);
    }

    #[test]
    fn q5_0_block_by_hand() {
        let mut x = [0u8; 22];
        x[0..2].copy_from_slice(&F16_ONE);
        x[2..6].copy_from_slice(&0x0002_0001u32.to_le_bytes()); // high bits of elements 0, 17
        x[6 + 1] = 0x21; // element 1: 1 - 16 = -15; element 17: (2 | 16) - 16 = 2
        let mut y = [9f32; QK];
        dequantize_block_q5_0(&x, &mut y);
        let mut want = [-16f32; QK];
        want[0] = 0.0;
        want[1] = -15.0;
        want[17] = 2.0;
        assert_eq!(y, want);
    }

    #[test]
    fn q5_1_block_by_hand() {
        let mut x = [0u8; 24];
        x[0..2].copy_from_slice(&[0x00, 0x34]); // d = 0.25
        x[2..4].copy_from_slice(&F16_ONE); // m = 1
        x[4..8].copy_from_slice(&0x8000_0000u32.to_le_bytes()); // high bit of element 31
        x[8 + 15] = 0xf0; // element 15: 0; element 31: 15 | 16 = 31 -> 31 * 0.25 + 1
        let mut y = [9f32; QK];
        dequantize_block_q5_1(&x, &mut y);
        let mut want = [1f32; QK];
        want[31] = 8.75;
        assert_eq!(y, want);
    }

    #[test]
    fn q4_0_maps_the_signed_absmax_to_minus_eight() {
        let mut x = [0f32; QK];
        x[3] = -4.0;
        x[7] = 2.0;
        let mut b = [0u8; 18];
        quantize_block_q4_0(&x, &mut b);
        // d = -4 / -8 = 0.5; -4 -> q 0 (nibble 0), 2 -> 4 + 8 = 12, 0 -> 8.
        assert_eq!(&b[0..2], &F16_HALF);
        assert_eq!(b[2 + 3] & 0x0f, 0);
        assert_eq!(b[2 + 7] & 0x0f, 12);
        assert_eq!(b[2], 0x88);
    }

    #[test]
    fn q8_1_sum_is_d_times_the_quant_sum() {
        let mut x = [0f32; QK];
        x[0] = 1.27;
        x[1] = -0.5;
        let mut b = [0u8; 36];
        quantize_block_q8_1(&x, &mut b);
        let d = f16_at(&b, 0);
        // quants 127 and round(-0.5 * 100) = -50 (halves away from zero)
        assert_eq!(b[4] as i8, 127);
        assert_eq!(b[5] as i8, -50);
        assert_eq!(
            f16_at(&b, 2),
            half::f16::from_f32(77.0 * (1.27f32 / 127.0)).to_f32()
        );
        assert_eq!(d, half::f16::from_f32(1.27f32 / 127.0).to_f32());
    }
}
