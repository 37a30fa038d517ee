//! Activation rounding before a product with a quantized weight, for the paths that
//! dequantize the weights and multiply in f32: the activations are rounded onto exactly the
//! values the integer kernels of that weight type see ("fake quantization"), so both paths
//! give one product up to f32 rounding. ggml converts activations to the weight type's
//! `vec_dot_type` (Q8_0 for Q4_0/Q5_0/Q8_0, Q8_1 for Q4_1/Q5_1, Q8_K for the k-quants, F16
//! for F16); toy keeps that pairing but rounds activations onto two 8-bit planes, far finer
//! than ggml's one: the legacy types' (`act_split`, scales and sums in f32) and the k-quants'
//! (x's Q8_K blocks, then Q8_K blocks of the remainder: `Q8KAct::quantize_planes`).

use super::rowdot::ROW_DOT_BATCH;
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

/// Round 256-element blocks onto Q8_K's grid: the value of largest magnitude maps to -127,
/// d = 1 / iscale kept in f32 (ggml's `quantize_row_q8_K_ref`; ggml moved from -128 to -127
/// to keep the grid symmetric for its IQ kernels).
fn round_q8k_blocks(x: &mut [f32]) {
    let mut lo = x.to_vec();
    round_q8k_plane(x);
    // the second plane: what the first leaves, on its own Q8_K grid
    lo.iter_mut().zip(x.iter()).for_each(|(l, h)| *l -= h);
    round_q8k_plane(&mut lo);
    x.iter_mut().zip(&lo).for_each(|(h, l)| *h += l);
}

/// One plane of [`round_q8k_blocks`].
fn round_q8k_plane(x: &mut [f32]) {
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

/// Round activations `x` (rows of K) for a product with weights of type `w`.
pub fn round_for(w: GgmlType, x: &mut [f32], k: usize) {
    match vec_dot_type(w) {
        Some(GgmlType::Q8_0 | GgmlType::Q8_1) if k.is_multiple_of(32) => {
            super::act_split::round_in_place(x)
        }
        // two planes where the integer kernels take two (decode, small batches: `rowdot`)
        Some(GgmlType::Q8_K) if k.is_multiple_of(QK_K) && x.len() / k < ROW_DOT_BATCH => {
            round_q8k_blocks(x)
        }
        Some(GgmlType::Q8_K) if k.is_multiple_of(QK_K) => round_q8k_plane(x),
        Some(GgmlType::F16) => x.iter_mut().for_each(|v| *v = f16::from_f32(*v).to_f32()),
        Some(GgmlType::BF16) => x.iter_mut().for_each(|v| *v = bf16::from_f32(*v).to_f32()),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legacy_types_round_onto_the_two_planes() {
        let before: Vec<f32> = (0..32).map(|i| (i as f32 - 10.0) / 3.0).collect();
        let mut x = before.clone();
        round_for(GgmlType::Q4_1, &mut x, 32);
        // within half a step of the fine plane (amax / 127 / 128), and not the identity
        let step = (21.0 / 3.0) / 127.0 / 128.0;
        assert!(x
            .iter()
            .zip(&before)
            .all(|(a, b)| (a - b).abs() <= step / 2.0 + 1e-6));
        assert!(x.iter().zip(&before).any(|(a, b)| a != b));
        let mut z = vec![0f32; 32];
        round_for(GgmlType::Q8_0, &mut z, 32);
        assert!(z.iter().all(|v| *v == 0.0));
    }

    #[test]
    fn q8k_grid_maps_extreme_to_minus_127() {
        let mut x: Vec<f32> = (0..256).map(|i| (i as f32 - 100.0) / 10.0).collect();
        let before = x.clone();
        round_q8k_plane(&mut x);
        assert!((x[255] - before[255]).abs() < 1e-5);
        let step = 15.5 / 127.0;
        assert!(x
            .iter()
            .zip(&before)
            .all(|(a, b)| (a - b).abs() <= step / 2.0 + 1e-6));
        let mut y = before.clone();
        round_for(GgmlType::F32, &mut y, 256);
        assert_eq!(y, before);
        // the k-quants' two planes: within half a step of the second plane's grid
        let mut z = before.clone();
        round_for(GgmlType::Q4_K, &mut z, 256);
        let fine = step / 2.0 / 127.0;
        assert!(z
            .iter()
            .zip(&before)
            .all(|(a, b)| (a - b).abs() <= fine / 2.0 + 1e-6));
        assert!(z.iter().zip(&before).any(|(a, b)| a != b));
    }
}
