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
            // a probe of the pool where one thread is faster: no polling workers
            _ if self.prefers_one_thread() => crate::spin::without(f),
            _ => f(),
        };
        self.record(mode, t.elapsed().as_secs_f64());
        r
    }

    /// Account a run of `mode` that took `dt` seconds.
    fn record(&mut self, mode: usize, dt: f64) {
        let e = &mut self.ema[mode];
        *e = if *e == 0.0 { dt } else { 0.75 * *e + 0.25 * dt };
        self.runs += 1;
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
            // simulated timings: the pool takes 2 ms a run, one thread 1 ms
            let mut modes = Vec::new();
            for _ in 0..64 {
                let m = a.mode();
                modes.push(m);
                a.record(m, if m == 0 { 2e-3 } else { 1e-3 });
            }
            assert!(
                modes[..4].iter().all(|m| *m == 0),
                "starts on the pool: {modes:?}"
            );
            assert_eq!(modes[4], 1, "then measures one thread");
            assert!(a.prefers_one_thread());
            let pool_runs: Vec<usize> = (5..64).filter(|&i| modes[i] == 0).collect();
            assert_eq!(pool_runs, vec![16, 32, 48], "probes the pool every 16 runs");
            // when the pool becomes faster again, it goes back to it
            for _ in 0..64 {
                let m = a.mode();
                a.record(m, if m == 0 { 5e-4 } else { 1e-3 });
            }
            assert!(!a.prefers_one_thread());
            // run executes the job, on one thread when that mode is chosen
            let mut one = Adaptive::new();
            for _ in 0..4 {
                assert_eq!(one.run(rayon::current_num_threads), 2);
            }
            assert_eq!(
                one.run(rayon::current_num_threads),
                1,
                "the fifth run measures one thread"
            );
        });
        assert!(!Adaptive::new().prefers_one_thread());
    }
}
