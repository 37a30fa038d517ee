//! IQ4_NL and IQ4_XS: 4-bit indices into a fixed non-linear table of 16 levels
//! (`kvalues_iq4nl` in ggml-common.h). Decoding only: ports of ggml-quants.c's
//! `dequantize_row_iq4_nl` / `dequantize_row_iq4_xs`.
//!
//! IQ4_NL (18 bytes / 32 elements): f16 `d`, 16 nibble bytes (low half element `j`, high
//! half `j + 16`). IQ4_XS (136 bytes / 256): f16 `d`, u16 `scales_h`, 4 bytes `scales_l`,
//! 128 nibble bytes; each 32-element sub-block has a 6-bit scale biased by 32.

use super::float::f16_at;
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
