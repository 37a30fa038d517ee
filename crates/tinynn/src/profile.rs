//! Where a training step's time goes, by kind of work (`toy bench --train`): each timed region
//! adds its thread-seconds to one counter per kind while profiling is on, and costs one
//! relaxed load when it is off. A region whose work the pool's threads share (the layers split
//! their work unless inside `layers::serial`) counts its wall time times the pool's threads;
//! one inside `serial` (a batch shard's work on one thread) counts its own time.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The linear layers' matrix products (f32 gemm or bf16).
    Products,
    /// Attention (scores, softmax, weighted values, their backward).
    Attention,
    /// LayerNorm and RMSNorm, forward and backward.
    Norms,
    /// AdamW and gradient clipping.
    Optimizer,
}

pub const KINDS: [Kind; 4] = [
    Kind::Products,
    Kind::Attention,
    Kind::Norms,
    Kind::Optimizer,
];

static ON: AtomicBool = AtomicBool::new(false);
static NANOS: [AtomicU64; 4] = [const { AtomicU64::new(0) }; 4];

/// Starts (clearing the counters) or stops profiling.
pub fn enable(on: bool) {
    if on {
        NANOS.iter().for_each(|n| n.store(0, Ordering::Relaxed));
    }
    ON.store(on, Ordering::Relaxed);
}

/// Thread-seconds per kind since [`enable`]`(true)`.
pub fn totals() -> [(Kind, f64); 4] {
    KINDS.map(|k| (k, NANOS[k as usize].load(Ordering::Relaxed) as f64 * 1e-9))
}

/// Times the region until it is dropped.
pub struct Timer {
    start: Option<(Kind, Instant)>,
}

#[inline]
pub fn timer(kind: Kind) -> Timer {
    Timer {
        start: ON.load(Ordering::Relaxed).then(|| (kind, Instant::now())),
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        if let Some((kind, t0)) = self.start {
            let threads = if crate::layers::in_serial() {
                1
            } else {
                rayon::current_num_threads() as u64
            };
            let ns = t0.elapsed().as_nanos() as u64 * threads;
            NANOS[kind as usize].fetch_add(ns, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Other tests may time regions concurrently while profiling is on, so only the lower
    /// bound is exact; with profiling off nothing is added at all.
    #[test]
    fn timers_count_only_while_on() {
        enable(true);
        {
            let _t = timer(Kind::Norms);
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        enable(false);
        let norms = totals()[2].1;
        assert!(norms >= 0.005, "{norms}");
        {
            let _t = timer(Kind::Norms);
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(
            totals()[2].1,
            norms,
            "a region counted while profiling was off"
        );
    }
}
