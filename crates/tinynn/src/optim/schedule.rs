//! Learning-rate schedule: linear warm-up, then cosine decay to a floor (Loshchilov & Hutter
//! 2017, "SGDR", without restarts; the schedule of nanoGPT and llm.c).

/// Learning rate of 0-based `step`: `max_lr * (step + 1) / warmup` while step < warmup (so the
/// first step is not wasted at 0), then cosine from max_lr down to min_lr reached at `total`,
/// and min_lr after it.
pub fn lr_at(step: usize, warmup: usize, total: usize, max_lr: f32, min_lr: f32) -> f32 {
    if step < warmup {
        return max_lr * (step + 1) as f32 / warmup as f32;
    }
    if step >= total || total <= warmup {
        return min_lr;
    }
    let ratio = (step - warmup) as f64 / (total - warmup) as f64;
    let coeff = 0.5 * (1.0 + (std::f64::consts::PI * ratio).cos());
    (min_lr as f64 + coeff * (max_lr - min_lr) as f64) as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warmup_then_cosine_to_the_floor() {
        assert_eq!(lr_at(0, 10, 110, 1.0, 0.1), 0.1);
        assert_eq!(lr_at(9, 10, 110, 1.0, 0.1), 1.0);
        assert_eq!(lr_at(10, 10, 110, 1.0, 0.1), 1.0);
        assert!(
            (lr_at(60, 10, 110, 1.0, 0.1) - 0.55).abs() < 1e-6,
            "half way is the mean"
        );
        assert!((lr_at(109, 10, 110, 1.0, 0.1) - 0.1).abs() < 1e-3);
        assert_eq!(lr_at(110, 10, 110, 1.0, 0.1), 0.1);
        assert_eq!(lr_at(500, 10, 110, 1.0, 0.1), 0.1);
        assert_eq!(lr_at(0, 0, 10, 1.0, 0.0), 1.0, "no warm-up starts at max");
        // monotone after warm-up
        let lrs: Vec<f32> = (10..110).map(|s| lr_at(s, 10, 110, 1.0, 0.1)).collect();
        assert!(lrs.windows(2).all(|w| w[1] <= w[0]));
    }
}
