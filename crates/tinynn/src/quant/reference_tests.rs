//! Bit-exactness against ggml's reference C code, pinned as checksums.
//!
//! The checksums were made by compiling ggml-quants.c's `quantize_row_*_ref` and
//! `dequantize_row_*` (gcc -O2, x86-64, no FMA) and running them on the same inputs these
//! tests generate: 96 super-blocks of varied pseudo-random rows for quantizing, and random
//! block bytes (f16 scales masked to stay finite) for dequantizing. Any change in rounding,
//! operation order or bit layout changes the hash.

use super::{dequantize, quantize, GgmlType};
use GgmlType::*;

/// 64-bit FNV-1a.
pub(super) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

pub(super) struct XorShift(pub(super) u32);

impl XorShift {
    pub(super) fn next_u32(&mut self) -> u32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 17;
        self.0 ^= self.0 << 5;
        self.0
    }

    pub(super) fn next_f32(&mut self) -> f32 {
        (self.next_u32() >> 8) as f32 / (1u32 << 23) as f32 - 1.0
    }
}

/// 96 super-blocks cycling through 6 magnitudes (1e-6 ..= 100) and 8 shapes: uniform,
/// cubed, offset from zero, outliers, one third zeros, all negative, on a 1/8 grid, and a
/// sum of three uniforms.
pub(super) fn reference_row() -> Vec<f32> {
    let mut rng = XorShift(0x1234_5678);
    let mut x = Vec::with_capacity(96 * 256);
    for sb in 0..96 {
        let scale = [1.0f32, 0.01, 100.0, 0.0001, 3.0, 1e-6][sb % 6];
        for i in 0..256 {
            let u = rng.next_f32();
            let v = match (sb / 6) % 8 {
                0 => u,
                1 => u * u * u,
                2 => 2.0 + 0.5 * u,
                3 if i % 29 == 0 => 10.0 * u,
                3 => 0.1 * u,
                4 if i % 3 == 0 => 0.0,
                4 => u,
                5 => -1.0 - u.abs(),
                6 => (u * 8.0).round() / 8.0,
                _ => u + rng.next_f32() + rng.next_f32(),
            };
            x.push(v * scale);
        }
    }
    x
}

#[test]
fn quantize_matches_ggml_reference_checksums() {
    let x = reference_row();
    let want = [
        (Q4_0, 0x49edef57594c5525u64),
        (Q4_1, 0xa587d162317915b8),
        (Q5_0, 0x585d35035370bc44),
        (Q5_1, 0x7043bee025131b12),
        (Q8_0, 0x5a9da536297cb0a1),
        (Q8_1, 0xc59417c6e74e2d0f),
        (Q2_K, 0x80561b37fb0d8062),
        (Q3_K, 0x8d91d9eb20ed0e13),
        (Q4_K, 0x49ba3c97bb1650fe),
        (Q5_K, 0x15079b909688081e),
        (Q6_K, 0x807f28c7f08a89fa),
        (Q8_K, 0x7a33f9a333218cc3),
    ];
    for (ty, hash) in want {
        let mut bytes = vec![0u8; x.len() / ty.block_size() * ty.type_size()];
        quantize(ty, &x, &mut bytes).unwrap();
        assert_eq!(
            fnv1a(&bytes),
            hash,
            "{ty} differs from ggml's quantize_row_*_ref"
        );
    }
}

#[test]
fn dequantize_matches_ggml_reference_checksums() {
    // (type, offsets of its f16 scale fields, checksum of the first 256 blocks' output)
    let cases: [(GgmlType, &[usize], u64); 11] = [
        (Q4_0, &[0], 0x853df3c30d245322),
        (Q4_1, &[0, 2], 0x7f82a537e1e7f711),
        (Q5_0, &[0], 0xf45c6244ee27489e),
        (Q5_1, &[0, 2], 0x6db5c50847c3d92f),
        (Q8_0, &[0], 0xa64e770326eaa19f),
        (Q2_K, &[80, 82], 0x7f22a12d13bfb1e7),
        (Q3_K, &[108], 0xf7c7e4901f984bc5),
        (Q4_K, &[0, 2], 0xb1e71930bbd74a50),
        (Q5_K, &[0, 2], 0x1c979048ae4d64d8),
        (Q6_K, &[208], 0x35ea8cc24aaf2d8c),
        (IQ4_XS, &[0], 0x15d4b9a8aaad8351),
    ];
    let mut rng = XorShift(0x8765_4321);
    for (ty, f16s, hash) in cases {
        // The byte stream runs on across types: 4000 blocks each, the first 256 checked.
        let mut bytes: Vec<u8> = (0..4000 * ty.type_size())
            .map(|_| (rng.next_u32() >> 11) as u8)
            .collect();
        bytes.truncate(256 * ty.type_size());
        for block in bytes.chunks_mut(ty.type_size()) {
            for &p in f16s {
                block[p + 1] &= 0xbb; // exponent never all ones: finite scales
            }
        }
        let mut y = vec![0f32; 256 * ty.block_size()];
        dequantize(ty, &bytes, &mut y).unwrap();
        let out: Vec<u8> = y.iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(
            fnv1a(&out),
            hash,
            "{ty} differs from ggml's dequantize_row_*"
        );
    }
}
