//! Decoding ggml's lattice types IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S and IQ1_M
//! (ports of ggml-quants.c's `dequantize_row_iq*`, llama.cpp 0c1e570; the "i-quants" of
//! llama.cpp PR 4773 and after): each group of 8 (or 4) weights is one point of a fixed
//! lattice (`iq_grids`), stored as its index, with its signs and a per-32 (or 16) scale.
//!
//! Block layouts (256 elements each, `d` an f16 first unless said):
//! IQ2_XXS (66 B): `qs` 32 u16; per 32 elements two u32: 4 grid bytes, then 4 x 7 sign bits
//! and a 4-bit scale. IQ2_XS (74 B): `qs` 32 u16 (9-bit grid index, 7 sign bits), `scales`
//! 8 (two 4-bit scales). IQ2_S (82 B): `qs` 64 (32 grid low bytes, 32 sign bytes), `qh` 8,
//! `scales` 8. IQ3_XXS (98 B): `qs` 64 grid bytes, then per 32 a u32 of 4 x 7 sign bits and a
//! scale. IQ3_S (110 B): `qs` 64, `qh` 8, `signs` 32, `scales` 4. IQ1_S (50 B): `qs` 32,
//! `qh` 8 u16 (3 index bits per group, a 3-bit scale, the delta's sign). IQ1_M (56 B): `qs`
//! 32, `qh` 16, `scales` 8 (3-bit scales; the f16 super-scale in their top nibbles).

use super::float::f16_at;
use super::iq_grids::*;
use super::{GgmlType, QK_K};
use half::f16;

/// The signed offset every IQ1 weight carries.
const IQ1S_DELTA: f32 = 0.125;

#[inline(always)]
fn u16_at(x: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([x[i], x[i + 1]])
}

#[inline(always)]
fn u32_at(x: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([x[i], x[i + 1], x[i + 2], x[i + 3]])
}

pub fn dequantize_block_iq2_xxs(x: &[u8; 66], y: &mut [f32; QK_K]) {
    dequantize_by_block32(GgmlType::IQ2_XXS, x, y);
}

pub fn dequantize_block_iq2_xs(x: &[u8; 74], y: &mut [f32; QK_K]) {
    dequantize_by_halves(GgmlType::IQ2_XS, x, y);
}

pub fn dequantize_block_iq2_s(x: &[u8; 82], y: &mut [f32; QK_K]) {
    dequantize_by_halves(GgmlType::IQ2_S, x, y);
}

/// Whether each 16 weights of `ty` share one scale (IQ2_XS, IQ2_S): a 32-block is two f32
/// scales times 32 small integers (`block16x2`).
pub fn has_block16x2(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::IQ2_XS | GgmlType::IQ2_S)
}

/// Sub-block `ib` (of 8) of super-block `x` of IQ2_XS or IQ2_S as the scales of its two
/// halves and its 32 signed grid values (|q| <= 43): element j decodes to exactly
/// `scale[j / 16] * q[j]`, the bits of ggml's `db[l / 2] * grid * sign`.
pub fn block16x2(ty: GgmlType, x: &[u8], ib: usize, q: &mut [i8; 32]) -> [f32; 2] {
    let d = f16_at(x, 0);
    let sc = match ty {
        GgmlType::IQ2_XS => {
            for l in 0..4 {
                let v = u16_at(x, 2 + 2 * (4 * ib + l));
                let signs = KSIGNS_IQ2XS[(v >> 9) as usize];
                put_signed(
                    &mut q[8 * l..8 * l + 8],
                    IQ2XS_GRID[(v & 511) as usize],
                    signs,
                );
            }
            x[66 + ib]
        }
        _ => {
            let (qs, signs, qh) = (&x[2..34], &x[34..66], &x[66..74]);
            for l in 0..4 {
                let idx = qs[4 * ib + l] as usize | ((qh[ib] as usize) << (8 - 2 * l) & 0x300);
                put_signed(&mut q[8 * l..8 * l + 8], IQ2S_GRID[idx], signs[4 * ib + l]);
            }
            x[74 + ib]
        }
    };
    [
        d * (0.5 + (sc & 0xf) as f32) * 0.25,
        d * (0.5 + (sc >> 4) as f32) * 0.25,
    ]
}

/// The 8 magnitudes of grid entry `g`, negated where `signs` has the bit.
fn put_signed(q: &mut [i8], g: u64, signs: u8) {
    for (j, q) in q.iter_mut().enumerate() {
        let v = ((g >> (8 * j)) & 0xff) as i8;
        *q = if signs & (1 << j) != 0 { -v } else { v };
    }
}

/// A super-block of a `has_block16x2` type through `block16x2`.
fn dequantize_by_halves(ty: GgmlType, x: &[u8], y: &mut [f32; QK_K]) {
    let mut q = [0i8; 32];
    for (ib, y) in y.chunks_exact_mut(32).enumerate() {
        let s = block16x2(ty, x, ib, &mut q);
        for (j, (y, &q)) in y.iter_mut().zip(&q).enumerate() {
            *y = s[j / 16] * q as f32;
        }
    }
}

pub fn dequantize_block_iq3_xxs(x: &[u8; 98], y: &mut [f32; QK_K]) {
    dequantize_by_block32(GgmlType::IQ3_XXS, x, y);
}

pub fn dequantize_block_iq3_s(x: &[u8; 110], y: &mut [f32; QK_K]) {
    dequantize_by_block32(GgmlType::IQ3_S, x, y);
}

/// Whether every 32 weights of `ty` share one scale: then a block is exactly an f32 scale
/// times 32 small integers (`block32`), what the int8 kernels take (IQ2_XS and IQ2_S have a
/// scale per 16, the IQ1 types an offset).
pub fn has_block32(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::IQ2_XXS | GgmlType::IQ3_XXS | GgmlType::IQ3_S)
}

/// Sub-block `ib` (of 8) of super-block `x` of IQ2_XXS, IQ3_XXS or IQ3_S as its scale and
/// its 32 signed grid values (|q| <= 62): element j decodes to exactly `scale * q[j]`, the
/// bits of ggml's `db * grid * sign` (a sign flip is exact).
pub fn block32(ty: GgmlType, x: &[u8], ib: usize, q: &mut [i8; 32]) -> f32 {
    let d = f16_at(x, 0);
    let mut put = |l: usize, g: u64, signs: u8| put_signed(&mut q[8 * l..8 * l + 8], g, signs);
    let halves = |a: u32, b: u32| a as u64 | (b as u64) << 32;
    match ty {
        GgmlType::IQ2_XXS => {
            let (a0, a1) = (u32_at(x, 2 + 8 * ib), u32_at(x, 6 + 8 * ib));
            for l in 0..4 {
                let grid = IQ2XXS_GRID[((a0 >> (8 * l)) & 0xff) as usize];
                put(l, grid, KSIGNS_IQ2XS[((a1 >> (7 * l)) & 127) as usize]);
            }
            d * (0.5 + (a1 >> 28) as f32) * 0.25
        }
        GgmlType::IQ3_XXS => {
            let (qs, aux) = (&x[2..66], u32_at(x, 66 + 4 * ib));
            for l in 0..4 {
                let g1 = IQ3XXS_GRID[qs[8 * ib + 2 * l] as usize];
                let g2 = IQ3XXS_GRID[qs[8 * ib + 2 * l + 1] as usize];
                put(
                    l,
                    halves(g1, g2),
                    KSIGNS_IQ2XS[((aux >> (7 * l)) & 127) as usize],
                );
            }
            d * (0.5 + (aux >> 28) as f32) * 0.5
        }
        _ => {
            let (qs, qh, signs, scales) = (&x[2..66], &x[66..74], &x[74..106], &x[106..110]);
            let h = qh[ib] as usize;
            for l in 0..4 {
                let i1 = qs[8 * ib + 2 * l] as usize | ((h << (8 - 2 * l)) & 256);
                let i2 = qs[8 * ib + 2 * l + 1] as usize | ((h << (7 - 2 * l)) & 256);
                put(l, halves(IQ3S_GRID[i1], IQ3S_GRID[i2]), signs[4 * ib + l]);
            }
            let sc = scales[ib / 2] >> (4 * (ib % 2)) & 0xf;
            d * (1 + 2 * sc as i32) as f32
        }
    }
}

/// A super-block of a `has_block32` type through `block32`.
fn dequantize_by_block32(ty: GgmlType, x: &[u8], y: &mut [f32; QK_K]) {
    let mut q = [0i8; 32];
    for (ib, y) in y.chunks_exact_mut(32).enumerate() {
        let scale = block32(ty, x, ib, &mut q);
        for (y, &q) in y.iter_mut().zip(&q) {
            *y = scale * q as f32;
        }
    }
}

pub fn dequantize_block_iq1_s(x: &[u8; 50], y: &mut [f32; QK_K]) {
    let d = f16_at(x, 0);
    let qs = &x[2..34];
    for ib in 0..QK_K / 32 {
        let qh = u16_at(x, 34 + 2 * ib) as usize;
        let dl = d * (2 * ((qh >> 12) & 7) + 1) as f32;
        let delta = if qh & 0x8000 != 0 {
            -IQ1S_DELTA
        } else {
            IQ1S_DELTA
        };
        for l in 0..4 {
            let grid = IQ1S_GRID[qs[4 * ib + l] as usize | (((qh >> (3 * l)) & 7) << 8)];
            for j in 0..8 {
                let g = ((grid >> (8 * j)) & 0xff) as u8 as i8;
                y[32 * ib + 8 * l + j] = dl * (g as f32 + delta);
            }
        }
    }
}

pub fn dequantize_block_iq1_m(x: &[u8; 56], y: &mut [f32; QK_K]) {
    let (qs, qh) = (&x[0..32], &x[32..48]);
    let sc = [u16_at(x, 48), u16_at(x, 50), u16_at(x, 52), u16_at(x, 54)];
    let bits = (sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000);
    let d = f16::from_bits(bits).to_f32();
    for ib in 0..QK_K / 32 {
        let s = sc[ib / 2] as i32;
        let dl1 = d * (2 * ((s >> (6 * (ib % 2))) & 7) + 1) as f32;
        let dl2 = d * (2 * ((s >> (6 * (ib % 2) + 3)) & 7) + 1) as f32;
        let (h0, h1) = (qh[2 * ib] as usize, qh[2 * ib + 1] as usize);
        let q = &qs[4 * ib..4 * ib + 4];
        let idx = [
            q[0] as usize | ((h0 << 8) & 0x700),
            q[1] as usize | ((h0 << 4) & 0x700),
            q[2] as usize | ((h1 << 8) & 0x700),
            q[3] as usize | ((h1 << 4) & 0x700),
        ];
        let delta = [h0 & 0x08, h0 & 0x80, h1 & 0x08, h1 & 0x80].map(|b| {
            if b != 0 {
                -IQ1S_DELTA
            } else {
                IQ1S_DELTA
            }
        });
        for l in 0..4 {
            let dl = if l < 2 { dl1 } else { dl2 };
            let grid = IQ1S_GRID[idx[l]];
            for j in 0..8 {
                let g = ((grid >> (8 * j)) & 0xff) as u8 as i8;
                y[32 * ib + 8 * l + j] = dl * (g as f32 + delta[l]);
            }
        }
    }
}
