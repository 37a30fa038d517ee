//! Unquantized rows: f32, f16 and bf16, element by element, little-endian.
//!
//! f16 rounds to nearest-even (as ggml's `GGML_FP32_TO_FP16`); bf16 rounds as ggml's
//! `ggml_compute_fp32_to_bf16` (`ggml-impl.h`), NaNs kept quiet.

use half::f16;

pub fn dequantize_f32(src: &[u8], dst: &mut [f32]) {
    for (x, y) in src.as_chunks::<4>().0.iter().zip(dst) {
        *y = f32::from_le_bytes(*x);
    }
}

pub fn dequantize_f16(src: &[u8], dst: &mut [f32]) {
    for (x, y) in src.as_chunks::<2>().0.iter().zip(dst) {
        *y = f16::from_bits(u16::from_le_bytes(*x)).to_f32();
    }
}

pub fn dequantize_bf16(src: &[u8], dst: &mut [f32]) {
    for (x, y) in src.as_chunks::<2>().0.iter().zip(dst) {
        *y = bf16_to_f32(u16::from_le_bytes(*x));
    }
}

pub fn quantize_f32(src: &[f32], dst: &mut [u8]) {
    for (x, y) in src.iter().zip(dst.as_chunks_mut::<4>().0) {
        *y = x.to_le_bytes();
    }
}

pub fn quantize_f16(src: &[f32], dst: &mut [u8]) {
    for (x, y) in src.iter().zip(dst.as_chunks_mut::<2>().0) {
        *y = f16::from_f32(*x).to_bits().to_le_bytes();
    }
}

pub fn quantize_bf16(src: &[f32], dst: &mut [u8]) {
    for (x, y) in src.iter().zip(dst.as_chunks_mut::<2>().0) {
        *y = f32_to_bf16(*x).to_le_bytes();
    }
}

/// bf16 bits to f32: the bf16 is the top half of the f32.
#[inline]
pub fn bf16_to_f32(bits: u16) -> f32 {
    f32::from_bits((bits as u32) << 16)
}

/// f32 to bf16 bits, rounding to nearest-even; a NaN stays a (quiet) NaN.
#[inline]
pub fn f32_to_bf16(x: f32) -> u16 {
    let u = x.to_bits();
    if (u & 0x7fff_ffff) > 0x7f80_0000 {
        return ((u >> 16) | 64) as u16;
    }
    // Largest non-NaN input is 0xff80_0000 (-inf), so this cannot overflow.
    ((u + (0x7fff + ((u >> 16) & 1))) >> 16) as u16
}

/// The f16 stored little-endian at `b[i..i + 2]`, as f32 (`GGML_FP16_TO_FP32`).
#[inline(always)]
pub(crate) fn f16_at(b: &[u8], i: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[i], b[i + 1]])).to_f32()
}

/// `x` rounded to f16, as little-endian bytes (`GGML_FP32_TO_FP16`).
#[inline(always)]
pub(crate) fn f16_bytes(x: f32) -> [u8; 2] {
    f16::from_f32(x).to_bits().to_le_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_rounds_to_nearest_even() {
        // 1 + 2^-8 is halfway between two bf16 values; ties go to the even one (1.0).
        assert_eq!(f32_to_bf16(1.0 + 1.0 / 256.0), 0x3f80);
        // 1 + 3 * 2^-8 is halfway too; the even neighbour is 1 + 2^-6 (0x3f82).
        assert_eq!(f32_to_bf16(1.0 + 3.0 / 256.0), 0x3f82);
        assert_eq!(f32_to_bf16(-2.0), 0xc000);
        assert!(bf16_to_f32(f32_to_bf16(f32::NAN)).is_nan());
        assert_eq!(bf16_to_f32(0x3fc0), 1.5);
    }

    #[test]
    fn f16_and_f32_rows_round_trip() {
        let x = [0.0f32, 1.0, -2.5, 65504.0, 1.0 / 1024.0];
        let mut b = [0u8; 10];
        quantize_f16(&x, &mut b);
        assert_eq!(&b[2..4], &[0x00, 0x3c]); // 1.0 is 0x3c00
        let mut y = [0f32; 5];
        dequantize_f16(&b, &mut y);
        assert_eq!(x, y);
        let mut b = [0u8; 20];
        quantize_f32(&x, &mut b);
        dequantize_f32(&b, &mut y);
        assert_eq!(x, y);
    }
}
