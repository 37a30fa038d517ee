//! Decoding the k-quants: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and Q8_K, super-blocks of 256
//! elements split into sub-blocks of 16 or 32 that each carry a small integer scale (and
//! min), themselves scaled by the super-block's f16 `d` (and `dmin`). Ports of
//! ggml-quants.c's `dequantize_row_q{2,3,4,5,6,8}_K` and `get_scale_min_k4`, bit for bit.
//!
//! Byte layouts (`block_q*_K` in ggml-common.h; f16/f32/i16 little-endian):
//! - Q2_K (84):  scales[16] (scale low nibble, min high nibble), qs[64], d, dmin
//! - Q3_K (110): hmask[32], qs[64], scales[12] (16 six-bit scales), d
//! - Q4_K (144): d, dmin, scales[12] (8 six-bit scales + 8 mins), qs[128]
//! - Q5_K (176): d, dmin, scales[12], qh[32], qs[128]
//! - Q6_K (210): ql[128], qh[64], scales[16] (i8), d
//! - Q8_K (292): d (f32), qs[256] (i8), bsums[16] (i16, sums of 16 quants)

use super::float::f16_at;
use super::QK_K;

/// Sub-block `j`'s 6-bit scale and min from Q4_K/Q5_K's packed 12 bytes: bytes 0..4 hold
/// scales 0..4 and bytes 4..8 mins 0..4 in their low 6 bits; scales and mins 4..8 keep
/// their low nibbles in bytes 8..12 and their top 2 bits in the spare bits of bytes 0..8.
#[inline(always)]
pub fn get_scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// Q3_K's 16 scales, each 6 bits biased by 32: low nibbles in bytes 0..8 (scale `j` in
/// byte `j % 8`, low half for `j < 8`), top 2 bits in byte `8 + j % 4` at bit `2 * (j / 4)`.
#[inline(always)]
pub fn q3_k_scales(s: &[u8]) -> [i8; 16] {
    let mut out = [0i8; 16];
    for (j, o) in out.iter_mut().enumerate() {
        let lo = if j < 8 { s[j] & 0x0f } else { s[j - 8] >> 4 };
        let hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
        *o = (lo | (hi << 4)) as i8 - 32;
    }
    out
}

pub fn dequantize_block_q2_k(x: &[u8; 84], y: &mut [f32; QK_K]) {
    let (scales, qs) = (&x[0..16], &x[16..80]);
    let (d, min) = (f16_at(x, 80), f16_at(x, 82));
    // Each 128-element half reads 32 bytes of quants four times, 2 bits deeper each time.
    for (n, out) in y.chunks_exact_mut(128).enumerate() {
        let q = &qs[32 * n..32 * n + 32];
        for (k, out) in out.chunks_exact_mut(16).enumerate() {
            let sc = scales[8 * n + k];
            let (dl, ml) = (d * (sc & 0x0f) as f32, min * (sc >> 4) as f32);
            let (shift, q) = (2 * (k / 2), &q[16 * (k % 2)..16 * (k % 2) + 16]);
            for (o, &b) in out.iter_mut().zip(q) {
                *o = dl * ((b >> shift) & 3) as f32 - ml;
            }
        }
    }
}

pub fn dequantize_block_q3_k(x: &[u8; 110], y: &mut [f32; QK_K]) {
    let mut q = [0i8; 32];
    for (b, y) in y.chunks_exact_mut(32).enumerate() {
        let sc = q3_k_block16x2(x, b, &mut q);
        for (j, (y, &q)) in y.iter_mut().zip(&q).enumerate() {
            *y = sc[j / 16] * q as f32;
        }
    }
}

/// Elements 32b..32b+32 of a Q3_K super-block as the scales of its two 16-element
/// sub-blocks (d times the 6-bit scale less 32, exact in f32) and its 32 values in -4..=3:
/// element j decodes to exactly `scale[j / 16] * q[j]`. The low 2 bits of element
/// 128n + 32h + l are bits 2h.. of qs[32n + l]; its high bit is bit 4n + h of hmask[l]
/// (clear: the value is 4 less).
pub fn q3_k_block16x2(x: &[u8], b: usize, q: &mut [i8; 32]) -> [f32; 2] {
    let (hmask, qs) = (&x[0..32], &x[32..96]);
    let scales = q3_k_scales(&x[96..108]);
    let d_all = f16_at(x, 108);
    let (n, h) = (b / 4, b % 4);
    let m = 1u8 << (4 * n + h);
    for (l, q) in q.iter_mut().enumerate() {
        let lo = ((qs[32 * n + l] >> (2 * h)) & 3) as i8;
        *q = lo - if hmask[l] & m != 0 { 0 } else { 4 };
    }
    [
        d_all * scales[2 * b] as f32,
        d_all * scales[2 * b + 1] as f32,
    ]
}

pub fn dequantize_block_q4_k(x: &[u8; 144], y: &mut [f32; QK_K]) {
    let (d, min) = (f16_at(x, 0), f16_at(x, 2));
    let (scales, qs) = (&x[4..16], &x[16..144]);
    // Each 64 elements: 32 bytes, low nibbles then high nibbles, two sub-blocks.
    for (i, out) in y.chunks_exact_mut(64).enumerate() {
        let q = &qs[32 * i..32 * i + 32];
        let (sc1, m1) = get_scale_min_k4(2 * i, scales);
        let (sc2, m2) = get_scale_min_k4(2 * i + 1, scales);
        let (d1, m1) = (d * sc1 as f32, min * m1 as f32);
        let (d2, m2) = (d * sc2 as f32, min * m2 as f32);
        let (lo, hi) = out.split_at_mut(32);
        for l in 0..32 {
            lo[l] = d1 * (q[l] & 0x0f) as f32 - m1;
            hi[l] = d2 * (q[l] >> 4) as f32 - m2;
        }
    }
}

pub fn dequantize_block_q5_k(x: &[u8; 176], y: &mut [f32; QK_K]) {
    let (d, min) = (f16_at(x, 0), f16_at(x, 2));
    let (scales, qh, qs) = (&x[4..16], &x[16..48], &x[48..176]);
    // As Q4_K, plus fifth bits: bits 2i and 2i+1 of qh[l] for the i-th 64 elements.
    for (i, out) in y.chunks_exact_mut(64).enumerate() {
        let q = &qs[32 * i..32 * i + 32];
        let (u1, u2) = (1u8 << (2 * i), 2u8 << (2 * i));
        let (sc1, m1) = get_scale_min_k4(2 * i, scales);
        let (sc2, m2) = get_scale_min_k4(2 * i + 1, scales);
        let (d1, m1) = (d * sc1 as f32, min * m1 as f32);
        let (d2, m2) = (d * sc2 as f32, min * m2 as f32);
        let (lo, hi) = out.split_at_mut(32);
        for l in 0..32 {
            let h1 = if qh[l] & u1 != 0 { 16 } else { 0 };
            let h2 = if qh[l] & u2 != 0 { 16 } else { 0 };
            lo[l] = d1 * ((q[l] & 0x0f) + h1) as f32 - m1;
            hi[l] = d2 * ((q[l] >> 4) + h2) as f32 - m2;
        }
    }
}

pub fn dequantize_block_q6_k(x: &[u8; 210], y: &mut [f32; QK_K]) {
    let d = f16_at(x, 208);
    // Per 128 elements: 64 bytes of low nibbles, 32 bytes of 2-bit highs, 8 scales.
    for (n, out) in y.chunks_exact_mut(128).enumerate() {
        let ql = &x[64 * n..64 * n + 64];
        let qh = &x[128 + 32 * n..128 + 32 * n + 32];
        let sc = &x[192 + 8 * n..192 + 8 * n + 8];
        for l in 0..32 {
            let is = l / 16;
            let h = qh[l];
            let q1 = ((ql[l] & 0x0f) | ((h & 3) << 4)) as i32 - 32;
            let q2 = ((ql[l + 32] & 0x0f) | (((h >> 2) & 3) << 4)) as i32 - 32;
            let q3 = ((ql[l] >> 4) | (((h >> 4) & 3) << 4)) as i32 - 32;
            let q4 = ((ql[l + 32] >> 4) | (((h >> 6) & 3) << 4)) as i32 - 32;
            out[l] = d * sc[is] as i8 as f32 * q1 as f32;
            out[l + 32] = d * sc[is + 2] as i8 as f32 * q2 as f32;
            out[l + 64] = d * sc[is + 4] as i8 as f32 * q3 as f32;
            out[l + 96] = d * sc[is + 6] as i8 as f32 * q4 as f32;
        }
    }
}

pub fn dequantize_block_q8_k(x: &[u8; 292], y: &mut [f32; QK_K]) {
    let d = f32::from_le_bytes([x[0], x[1], x[2], x[3]]);
    for (o, &q) in y.iter_mut().zip(&x[4..260]) {
        *o = d * q as i8 as f32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const F16_ONE: [u8; 2] = [0x00, 0x3c];
    const F16_HALF: [u8; 2] = [0x00, 0x38];

    #[test]
    fn q2_k_block_by_hand() {
        let mut x = [0u8; 84];
        x[0] = 0x21; // sub-block 0 (elements 0..16): scale 1, min 2
        x[1] = 0x03; // sub-block 1 (16..32): scale 3, min 0
        x[2] = 0x12; // sub-block 2 (32..48): scale 2, min 1
        x[8] = 0x05; // sub-block 8 (128..144): scale 5
        x[16] = 0b11_10_01_00; // q for elements 0, 32, 64, 96: 0, 1, 2, 3
        x[16 + 16] = 0x03; // element 16: 3
        x[16 + 32] = 0x02; // element 128: 2
        x[80..82].copy_from_slice(&F16_ONE); // d = 1
        x[82..84].copy_from_slice(&F16_HALF); // dmin = 0.5
        let mut y = [9f32; QK_K];
        dequantize_block_q2_k(&x, &mut y);
        let mut want = [0f32; QK_K];
        want[0..16].fill(-1.0); // 1 * 0 - 0.5 * 2
        want[16] = 9.0; // 3 * 3 - 0
        want[32..48].fill(-0.5); // 2 * 0 - 0.5 * 1 ...
        want[32] = 1.5; // ... but element 32 has q 1: 2 * 1 - 0.5
        want[128] = 10.0; // 5 * 2
        assert_eq!(y, want);
    }

    #[test]
    fn q3_k_block_by_hand() {
        let mut x = [0u8; 110];
        x[0] = 0x11; // hmask: element 0's high bit (run 0), element 128's (run 4)
        x[32] = 0x03; // element 0: low bits 3
        x[32 + 32] = 0x02; // element 128: low bits 2
                           // six-bit scales: sub-block 0 -> 33, sub-block 8 -> 30, all others 32.
        x[96] = 0xe1; // low nibbles of scales 0 (1) and 8 (14)
        x[96 + 8] = 0x9a; // top bits of scales 0, 4, 8, 12: 2, 2, 1, 2
        x[96 + 9..96 + 12].fill(0xaa); // top bits 2 for the rest
        x[108..110].copy_from_slice(&F16_ONE);
        let mut y = [9f32; QK_K];
        dequantize_block_q3_k(&x, &mut y);
        let mut want = [0f32; QK_K];
        want[0..16].fill(-4.0); // scale 1, q 0 without high bit: 0 - 4
        want[0] = 3.0; // scale 1, q 3 with high bit
        want[128..144].fill(8.0); // scale -2, q -4
        want[128] = -4.0; // scale -2, q 2 with high bit
        assert_eq!(y, want);
    }

    #[test]
    fn q4_k_block_by_hand() {
        let mut x = [0u8; 144];
        x[0..2].copy_from_slice(&F16_ONE); // d = 1
        x[2..4].copy_from_slice(&F16_HALF); // dmin = 0.5
        let s = &mut x[4..16];
        s[0] = 2; // scale 0
        s[4] = 4; // min 0
        s[1] = 0x40; // top bits of scale 5: 01
        s[5] = 0x80; // top bits of min 5: 10
        s[9] = 0x11; // low nibbles of scale 5 and min 5 -> scale 17, min 33
        assert_eq!(get_scale_min_k4(5, s), (17, 33));
        x[16] = 0x07; // element 0: 7
        x[16 + 64] = 0x30; // element 160 (sub-block 5, high nibbles of bytes 64..96): 3
        let mut y = [9f32; QK_K];
        dequantize_block_q4_k(&x, &mut y);
        let mut want = [0f32; QK_K];
        want[0..32].fill(-2.0); // 2 * 0 - 0.5 * 4
        want[0] = 12.0; // 2 * 7 - 2
        want[160..192].fill(-16.5); // 17 * 0 - 0.5 * 33
        want[160] = 34.5; // 17 * 3 - 16.5
        assert_eq!(y, want);
    }

    #[test]
    fn q5_k_block_by_hand() {
        let mut x = [0u8; 176];
        x[0..2].copy_from_slice(&F16_HALF); // d = 0.5
        x[2..4].copy_from_slice(&F16_ONE); // dmin = 1
        x[4] = 3; // scale 0
        x[4 + 4] = 1; // min 0
        x[4 + 3] = 2; // scale 3 (min 3 = 0)
        x[16] = 0x09; // qh[0]: fifth bit of element 0 (bit 0) and element 96 (bit 3)
        x[48] = 0x05; // element 0: 5 | 16 = 21
        x[48 + 32] = 0xa0; // element 96 (high nibble of byte 32): 10 | 16 = 26
        let mut y = [9f32; QK_K];
        dequantize_block_q5_k(&x, &mut y);
        let mut want = [0f32; QK_K];
        want[0..32].fill(-1.0); // 0.5 * 3 * 0 - 1
        want[0] = 30.5; // 1.5 * 21 - 1
        want[96] = 26.0; // 0.5 * 2 * 26
        assert_eq!(y, want);
    }

    #[test]
    fn q6_k_block_by_hand() {
        let mut x = [0u8; 210];
        x[0] = 0x0f; // element 0 low nibble 15
        x[32] = 0x01; // element 32 low nibble 1
        x[128] = 0x0e; // qh[0]: element 0 top bits 2, element 32 top bits 3
        x[128 + 32] = 0x03; // element 128 top bits 3
        x[192] = 2; // scale of elements 0..16
        x[192 + 2] = (-3i8) as u8; // scale of 32..48
        x[192 + 8] = 1; // scale of 128..144
        x[208..210].copy_from_slice(&F16_HALF);
        let mut y = [9f32; QK_K];
        dequantize_block_q6_k(&x, &mut y);
        let mut want = [0f32; QK_K];
        want[0..16].fill(-32.0); // 0.5 * 2 * (0 - 32)
        want[0] = 15.0; // 0.5 * 2 * (47 - 32)
        want[32..48].fill(48.0); // 0.5 * -3 * -32
        want[32] = -25.5; // 0.5 * -3 * (49 - 32)
        want[128..144].fill(-16.0); // 0.5 * 1 * -32
        want[128] = 8.0; // 0.5 * (48 - 32)
        assert_eq!(y, want);
    }

    #[test]
    fn q8_k_block_by_hand() {
        let mut x = [0u8; 292];
        x[0..4].copy_from_slice(&0.25f32.to_le_bytes());
        x[4] = 4;
        x[4 + 255] = (-128i8) as u8;
        let mut y = [9f32; QK_K];
        dequantize_block_q8_k(&x, &mut y);
        let mut want = [0f32; QK_K];
        want[0] = 1.0;
        want[255] = -32.0;
        assert_eq!(y, want);
    }
}
