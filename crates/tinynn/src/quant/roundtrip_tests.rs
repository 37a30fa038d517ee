//! Round trips f32 -> type -> f32 over every quantizable type on pseudo-random rows: the
//! error stays within what each format's step size allows, and more bits mean less error.

use super::{dequantize, quantize, GgmlType, QK_K};
use GgmlType::*;

/// A tiny deterministic xorshift32 stream of floats in [-1, 1).
struct XorShift(u32);

impl XorShift {
    fn next_f32(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 17;
        self.0 ^= self.0 << 5;
        (self.0 >> 8) as f32 / (1u32 << 23) as f32 - 1.0
    }
}

/// 8 super-blocks of varied shape: plain uniform, scaled up and down, shifted off zero
/// (so min-carrying formats matter), with outliers, and one all zero.
fn test_row() -> Vec<f32> {
    let mut rng = XorShift(0x9e37_79b9);
    let mut x = Vec::with_capacity(8 * QK_K);
    for sb in 0..8 {
        for i in 0..QK_K {
            let u = rng.next_f32();
            x.push(match sb {
                0 => u,
                1 => 100.0 * u,
                2 => 0.001 * u,
                3 => 2.0 + 0.5 * u,
                4 if i % 37 == 0 => 8.0 * u,
                4 => 0.1 * u,
                5 => u * u * u,
                6 => 0.0,
                _ => -3.0 + u,
            });
        }
    }
    x
}

fn round_trip(ty: GgmlType, x: &[f32]) -> Vec<f32> {
    let mut bytes = vec![0u8; x.len() / ty.block_size() * ty.type_size()];
    quantize(ty, x, &mut bytes).unwrap();
    let mut y = vec![0f32; x.len()];
    dequantize(ty, &bytes, &mut y).unwrap();
    y
}

/// Checks every block of `block` elements: max |x - y| <= bound(absmax, min, max), plus
/// `f16_floor` units of 2^-25: small scales land among f16 subnormals, where rounding is
/// absolute (half a spacing, 2^-25), so pass the largest integer multiplier of each stored
/// f16 (e.g. 127 for Q8_0's `d`, 63 * 15 + 63 for Q4_K's `d * sc * q` and `dmin * m`).
fn assert_block_errors(
    ty: GgmlType,
    block: usize,
    f16_floor: f32,
    bound: impl Fn(f32, f32, f32) -> f32,
) {
    let x = test_row();
    let y = round_trip(ty, &x);
    for (b, (xs, ys)) in x.chunks(block).zip(y.chunks(block)).enumerate() {
        let amax = xs.iter().fold(0f32, |m, v| m.max(v.abs()));
        let (lo, hi) = xs
            .iter()
            .fold((f32::MAX, f32::MIN), |(lo, hi), &v| (lo.min(v), hi.max(v)));
        let limit = bound(amax, lo, hi) + f16_floor * 2f32.powi(-25) + 1e-6 * amax;
        let err = xs
            .iter()
            .zip(ys)
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(
            err <= limit,
            "{ty} block {b}: max error {err} > {limit} (absmax {amax})"
        );
    }
}

// f16 rounding of a normal stored scale moves a decoded value by at most |q| * d * 2^-11.
const F16_REL: f32 = 1.0 / 2048.0;

#[test]
fn float_types_round_trip_within_their_precision() {
    let x = test_row();
    assert_eq!(round_trip(F32, &x), x);
    for (ty, rel) in [(F16, 1.0 / 2048.0), (BF16, 1.0 / 256.0)] {
        for (a, b) in x.iter().zip(round_trip(ty, &x)) {
            assert!((a - b).abs() <= a.abs() * rel + 1e-7, "{ty}: {a} -> {b}");
        }
    }
}

#[test]
fn legacy_types_stay_within_half_a_step() {
    // Symmetric: step d = absmax / 127 (Q8), absmax / 8 (Q4_0: -absmax maps to +8, which
    // clips to 7, a full step), absmax / 16 (Q5_0, likewise).
    assert_block_errors(Q8_0, 32, 127.0, |amax, _, _| {
        amax / 127.0 * (0.5 + 127.0 * F16_REL)
    });
    assert_block_errors(Q8_1, 32, 127.0, |amax, _, _| {
        amax / 127.0 * (0.5 + 127.0 * F16_REL)
    });
    assert_block_errors(Q4_0, 32, 8.0, |amax, _, _| {
        amax / 8.0 * (1.0 + 8.0 * F16_REL)
    });
    assert_block_errors(Q5_0, 32, 16.0, |amax, _, _| {
        amax / 16.0 * (1.0 + 16.0 * F16_REL)
    });
    // With a min: step d = range / 15 or / 31; the min is f16-rounded too.
    assert_block_errors(Q4_1, 32, 16.0, |amax, lo, hi| {
        (hi - lo) / 15.0 * (0.5 + 15.0 * F16_REL) + amax * F16_REL
    });
    assert_block_errors(Q5_1, 32, 32.0, |amax, lo, hi| {
        (hi - lo) / 31.0 * (0.5 + 31.0 * F16_REL) + amax * F16_REL
    });
}

fn span0(lo: f32, hi: f32) -> f32 {
    hi.max(0.0) - lo.min(0.0)
}

#[test]
fn k_types_stay_within_their_step() {
    // Q8_K keeps its scale in f32: pure rounding error.
    assert_block_errors(Q8_K, QK_K, 0.0, |amax, _, _| amax / 127.0 * 0.5);
    // Sub-block scales are themselves quantized (6 or 8 bits) against the super-block's
    // largest, so the bound is a step of the super-block's span, with slack. The span
    // includes 0: the min-carrying kinds clamp their min at 0 (`make_qkx2_quants`).
    assert_block_errors(Q6_K, QK_K, 128.0 * 32.0, |amax, _, _| amax / 32.0);
    assert_block_errors(Q5_K, QK_K, 63.0 * 31.0 + 63.0, |_, lo, hi| {
        span0(lo, hi) / 31.0
    });
    assert_block_errors(Q4_K, QK_K, 63.0 * 15.0 + 63.0, |_, lo, hi| {
        span0(lo, hi) / 15.0
    });
    assert_block_errors(Q3_K, QK_K, 32.0 * 4.0, |amax, _, _| amax / 4.0);
    assert_block_errors(Q2_K, QK_K, 15.0 * 3.0 + 15.0, |_, lo, hi| {
        span0(lo, hi) / 3.0
    });
}

fn rms_error(ty: GgmlType) -> f64 {
    let x = test_row();
    let y = round_trip(ty, &x);
    // Relative to each super-block's RMS, so the 100x block does not dominate.
    let mut total = 0f64;
    for (xs, ys) in x.chunks(QK_K).zip(y.chunks(QK_K)) {
        let ms: f64 = xs.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / QK_K as f64;
        let err: f64 = xs
            .iter()
            .zip(ys)
            .map(|(&a, &b)| (a as f64 - b as f64).powi(2))
            .sum();
        if ms > 0.0 {
            total += err / QK_K as f64 / ms;
        } else {
            assert_eq!(err, 0.0, "{ty}: an all-zero block must decode to zeros");
        }
    }
    total.sqrt()
}

#[test]
fn more_bits_mean_less_error() {
    // (Q8_K is left out: one scale per 256 loses to Q8_0's one per 32.)
    let order = [Q8_0, Q6_K, Q5_K, Q4_K, Q3_K, Q2_K];
    let errs: Vec<f64> = order.iter().map(|&t| rms_error(t)).collect();
    for (w, e) in order.windows(2).zip(errs.windows(2)) {
        assert!(
            e[0] < e[1],
            "{} ({}) should beat {} ({})",
            w[0],
            e[0],
            w[1],
            e[1]
        );
    }
    assert!(rms_error(Q5_0) < rms_error(Q4_0));
    assert!(rms_error(Q5_1) < rms_error(Q4_1));
}

#[test]
fn q8_0_requantizes_to_the_same_bytes() {
    let x = test_row();
    let mut first = vec![0u8; x.len() / 32 * 34];
    quantize(Q8_0, &x, &mut first).unwrap();
    let mut y = vec![0f32; x.len()];
    dequantize(Q8_0, &first, &mut y).unwrap();
    let mut second = vec![0u8; first.len()];
    quantize(Q8_0, &y, &mut second).unwrap();
    assert_eq!(first, second);
}

#[test]
fn exactly_representable_rows_survive_q4_0_and_q4_k() {
    // Values on Q4_0's grid with absmax at -8: d = 1 exactly, so decoding is lossless.
    let x: Vec<f32> = (0..64).map(|i| ((i * 7) % 16) as f32 - 8.0).collect();
    assert_eq!(round_trip(Q4_0, &x), x);
    // Q4_K on a 0..=15 ramp of step 63/64: sub-block scales 63 of d = 1/64, min 0.
    let x: Vec<f32> = (0..QK_K).map(|i| (i % 16) as f32 * (63.0 / 64.0)).collect();
    assert_eq!(round_trip(Q4_K, &x), x);
}
