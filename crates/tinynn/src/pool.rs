//! Graceful degradation on a busy machine. A decode step runs ~150 small parallel kernels;
//! when another process takes a core, the thread that shares it is descheduled mid-kernel
//! and every kernel waits for it (a scheduler time slice, milliseconds), so two threads on a
//! contended core are slower than one thread on the free core. `Adaptive` runs repeated,
//! similar jobs (decode steps) either on the current rayon pool or on one thread, keeps a
//! moving average of each mode's time, takes the faster, and probes the other now and then.

use std::time::Instant;

/// How often the slower mode is tried again (runs).
const PROBE_EVERY: u64 = 16;

pub struct Adaptive {
    single: Option<rayon::ThreadPool>,
    /// Seconds per run: [current pool, one thread]; 0 until measured.
    ema: [f64; 2],
    runs: u64,
}

impl Default for Adaptive {
    fn default() -> Self {
        Self::new()
    }
}

impl Adaptive {
    /// For the current rayon pool (a no-op when it has one thread).
    pub fn new() -> Self {
        let single = (rayon::current_num_threads() > 1)
            .then(|| rayon::ThreadPoolBuilder::new().num_threads(1).build().ok())
            .flatten();
        Self {
            single,
            ema: [0.0; 2],
            runs: 0,
        }
    }

    /// Which mode the next run takes: 0 the pool, 1 one thread.
    fn mode(&self) -> usize {
        if self.single.is_none() || self.runs < 4 {
            return 0;
        }
        if self.ema[1] == 0.0 {
            return 1;
        }
        let best = if self.ema[0] <= self.ema[1] { 0 } else { 1 };
        if self.runs.is_multiple_of(PROBE_EVERY) {
            1 - best
        } else {
            best
        }
    }

    /// Run `f` in the mode that has been faster lately.
    pub fn run<R: Send>(&mut self, f: impl FnOnce() -> R + Send) -> R {
        let mode = self.mode();
        let t = Instant::now();
        let r = match (&self.single, mode) {
            (Some(one), 1) => one.install(f),
            _ => f(),
        };
        let dt = t.elapsed().as_secs_f64();
        let e = &mut self.ema[mode];
        *e = if *e == 0.0 { dt } else { 0.75 * *e + 0.25 * dt };
        self.runs += 1;
        r
    }

    /// Whether one thread is the faster mode at present.
    pub fn prefers_one_thread(&self) -> bool {
        self.single.is_some() && self.ema[1] > 0.0 && self.ema[1] < self.ema[0]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_the_faster_mode_and_keeps_probing() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        pool.install(|| {
            let mut a = Adaptive::new();
            // make the pool mode look slow: sleep when not on the single-thread pool
            let mut modes = Vec::new();
            for _ in 0..40 {
                let on_single = a.run(|| {
                    let single = rayon::current_num_threads() == 1;
                    if !single {
                        std::thread::sleep(std::time::Duration::from_millis(2));
                    }
                    single
                });
                modes.push(on_single);
            }
            assert!(a.prefers_one_thread());
            let singles = modes[8..].iter().filter(|m| **m).count();
            assert!(
                singles >= 28,
                "mostly one thread once it is known faster: {modes:?}"
            );
            assert!(modes[8..].iter().any(|m| !m), "still probes the pool");
            let r = a.run(|| 7);
            assert_eq!(r, 7);
        });
        assert!(!Adaptive::new().prefers_one_thread());
    }
}
