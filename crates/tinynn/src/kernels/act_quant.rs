//! Activation rounding as llama.cpp's CPU backend does it: before a product with a quantized
//! weight, ggml converts the activations to the weight type's `vec_dot_type` (Q8_0 for
//! Q4_0/Q5_0/Q8_0, Q8_1 for Q4_1/Q5_1, Q8_K for the k-quants, F16 for F16). We round the f32
//! activations onto exactly the values that conversion can represent ("fake quantization"),
//! so the f32 product then equals ggml's integer product up to f32 rounding. This is what
//! makes our logits agree with llama.cpp's at near-ties.

use crate::quant::{GgmlType, QK_K};
use half::{bf16, f16};

/// The activation type ggml pairs with weights of type `w` (`None`: plain f32).
pub fn vec_dot_type(w: GgmlType) -> Option<GgmlType> {
    use GgmlType::*;
    match w {
        Q4_0 | Q5_0 | Q8_0 | IQ4_NL => Some(Q8_0),
        Q4_1 | Q5_1 => Some(Q8_1),
        Q2_K | Q3_K | Q4_K | Q5_K | Q6_K | IQ4_XS => Some(Q8_K),
        F16 => Some(F16),
        BF16 => Some(BF16),
        _ => None,
    }
}

/// Round to nearest, ties to even, for |x| < 2^22 (ggml's `nearest_int` trick: fast where
/// the CPU baseline has no round instruction).
#[inline(always)]
fn rne(x: f32) -> f32 {
    (x + 12582912.0) - 12582912.0
}

/// Round 32-element blocks onto Q8_0/Q8_1's grid: d = fp16(absmax / 127), q = round(x / d).
fn round_q8_blocks(x: &mut [f32]) {
    for b in x.chunks_mut(32) {
        let amax = b.iter().fold(0f32, |m, v| m.max(v.abs()));
        // ggml's AVX2/AVX-512 quantize_row_q8_0/q8_1 scale by 127 / amax, rounding to even.
        let d = amax / 127.0;
        let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
        let dh = f16::from_f32(d).to_f32();
        for v in b.iter_mut() {
            *v = rne(*v * id) * dh;
        }
    }
}

/// Round 256-element blocks onto Q8_K's grid: the value of largest magnitude maps to -127,
/// d = 1 / iscale kept in f32 (ggml's `quantize_row_q8_K_ref`; ggml moved from -128 to -127
/// to keep the grid symmetric for its IQ kernels).
fn round_q8k_blocks(x: &mut [f32]) {
    for b in x.chunks_mut(QK_K) {
        let max = b
            .iter()
            .fold(0f32, |m, v| if v.abs() > m.abs() { *v } else { m });
        if max == 0.0 {
            b.fill(0.0);
            continue;
        }
        let iscale = -127.0 / max;
        let d = 1.0 / iscale;
        for v in b.iter_mut() {
            *v = rne(iscale * *v).min(127.0) * d;
        }
    }
}

/// Whether ggml's dot for weights of type `w` has a per-block min term (Q4_1, Q5_1: the
/// product adds m * s, with s the Q8_1 block's stored fp16(d * sum(q))).
pub fn has_min_term(w: GgmlType) -> bool {
    matches!(w, GgmlType::Q4_1 | GgmlType::Q5_1)
}

/// Per 32-block of `x` (unrounded): ggml's stored s = fp16(d * sum(q)) minus what the rounded
/// activations contribute, fp16(d) * sum(q). Adding m * this to a fake-quantized product
/// makes it equal ggml's Q4_1 x Q8_1 dot.
pub fn q8_1_sum_corrections(x: &[f32], out: &mut Vec<f32>) {
    out.clear();
    for b in x.chunks(32) {
        let amax = b.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
        let sum: i32 = b.iter().map(|v| rne(*v * id) as i32).sum();
        let stored = f16::from_f32(d * sum as f32).to_f32();
        out.push(stored - f16::from_f32(d).to_f32() * sum as f32);
    }
}

/// The per-block mins m of a Q4_1 / Q5_1 row (fp16 at bytes 2..4 of each block).
pub fn block_mins(w: GgmlType, row: &[u8], out: &mut [f32]) {
    let size = w.type_size();
    for (o, blk) in out.iter_mut().zip(row.chunks_exact(size)) {
        *o = f16::from_le_bytes([blk[2], blk[3]]).to_f32();
    }
}

/// Round activations `x` (rows of K) for a product with weights of type `w`.
pub fn round_for(w: GgmlType, x: &mut [f32], k: usize) {
    match vec_dot_type(w) {
        Some(GgmlType::Q8_0 | GgmlType::Q8_1) if k.is_multiple_of(32) => round_q8_blocks(x),
        Some(GgmlType::Q8_K) if k.is_multiple_of(QK_K) => round_q8k_blocks(x),
        Some(GgmlType::F16) => x.iter_mut().for_each(|v| *v = f16::from_f32(*v).to_f32()),
        Some(GgmlType::BF16) => x.iter_mut().for_each(|v| *v = bf16::from_f32(*v).to_f32()),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q8_grid_keeps_absmax_and_rounds_the_rest() {
        let mut x: Vec<f32> = (0..32).map(|i| i as f32 - 10.0).collect();
        round_for(GgmlType::Q4_1, &mut x, 32);
        let d = f16::from_f32(21.0 / 127.0).to_f32();
        assert!((x[31] - 127.0 * d).abs() < 1e-6);
        assert!((x[11] - (1.0f32 / (21.0 / 127.0)).round() * d).abs() < 1e-6);
        let mut z = vec![0f32; 32];
        round_for(GgmlType::Q8_0, &mut z, 32);
        assert!(z.iter().all(|v| *v == 0.0));
    }

    #[test]
    fn q8k_grid_maps_extreme_to_minus_127() {
        let mut x: Vec<f32> = (0..256).map(|i| (i as f32 - 100.0) / 10.0).collect();
        let before = x.clone();
        round_for(GgmlType::Q4_K, &mut x, 256);
        assert!((x[255] - before[255]).abs() < 1e-5);
        let step = 15.5 / 127.0;
        assert!(x
            .iter()
            .zip(&before)
            .all(|(a, b)| (a - b).abs() <= step / 2.0 + 1e-6));
        let mut y = before.clone();
        round_for(GgmlType::F32, &mut y, 256);
        assert_eq!(y, before);
    }
}
