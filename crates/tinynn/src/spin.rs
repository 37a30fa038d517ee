//! Keeping a pool's workers awake through a decode step. A step runs ~150 short parallel
//! kernels (tens of microseconds each on a 1.5B model) with serial work between them (norms,
//! attention, sampling). Between two kernels rayon's idle workers go to sleep after a few
//! dozen rounds, and every kernel then starts by waking them: a futex wake, and in a virtual
//! machine an inter-processor interrupt the host must deliver, so the woken thread joins the
//! kernel late (about 95 context switches a token on the Coder 1.5B, the second core idle a
//! fifth of the time). [`busy`] runs a step while the other workers poll for work instead,
//! as ggml's thread pool spins between the nodes of its graph: the workers run
//! `rayon::yield_now` (take a job from a deque, or the injector) in a loop until the step
//! ends. Measured on the Coder 1.5B Q4_K_M, 2 threads, alternating runs: decode 19.75 ->
//! 20.85 tok/s; SmolLM2-135M Q4_1 280 -> 301. Polling costs where another process holds a
//! core: there the decode loops' `pool::Adaptive` moves to one thread, where `busy` does
//! nothing, and probes the pool without polling (SmolLM2 beside a busy loop: 200 tok/s,
//! against 211 before polling and 186-195 with polling in those probes). The pollers also
//! take the step's `team` loops, which the step hands them through one shared slot instead of
//! rayon's jobs.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a worker polls without finding work before it gives up on the step and goes
/// back to rayon's own idle loop (which sleeps).
const MAX_IDLE: Duration = Duration::from_millis(2);

thread_local! {
    /// Whether this thread is inside `busy` already (a draft's step inside a target's).
    static INSIDE: Cell<bool> = const { Cell::new(false) };
    /// Whether this worker is polling for a step. A worker that waits inside a job (a join
    /// whose other half was stolen) runs whatever it finds, the next step's poller included;
    /// a poller nested that way returns at once, or the job under it, which that step may
    /// wait for, could not finish until the step ended.
    static POLLING: Cell<bool> = const { Cell::new(false) };
    /// Whether `busy` may poll: not while `pool::Adaptive` probes the pool on a machine
    /// where one thread has been faster (another process holds a core, and a poller only
    /// competes with it).
    static ALLOWED: Cell<bool> = const { Cell::new(true) };
}

/// Run `f` with `busy` a plain call on this thread.
pub fn without<R>(f: impl FnOnce() -> R) -> R {
    /// Puts the permission back, also when `f` panics.
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            ALLOWED.with(|a| a.set(self.0));
        }
    }
    let _restore = Restore(ALLOWED.with(|a| a.replace(false)));
    f()
}

/// Workers polling for a step now.
static SPINNING: AtomicUsize = AtomicUsize::new(0);

/// How many workers poll for a step now (`team` hands its loops to them).
pub(crate) fn spinning() -> usize {
    SPINNING.load(Ordering::Acquire)
}

/// Clears the flag the spinners watch, also when `f` panics.
struct Stop(Arc<AtomicBool>);

impl Drop for Stop {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
        INSIDE.with(|i| i.set(false));
    }
}

/// Run `f` with the current pool's other workers polling for its parallel work rather than
/// sleeping between kernels. Outside a pool, on a pool of one thread, or nested, it is `f()`.
pub fn busy<R>(f: impl FnOnce() -> R) -> R {
    let Some(me) = rayon::current_thread_index() else {
        return f();
    };
    if rayon::current_num_threads() < 2 || INSIDE.with(|i| i.get()) || !ALLOWED.with(|a| a.get()) {
        return f();
    }
    INSIDE.with(|i| i.set(true));
    let running = Arc::new(AtomicBool::new(true));
    let stop = Stop(running.clone());
    rayon::spawn_broadcast(move |ctx| {
        // the caller's own copy (it is running the step), or one nested in a poller
        if ctx.index() == me || POLLING.with(|p| p.replace(true)) {
            return;
        }
        SPINNING.fetch_add(1, Ordering::AcqRel);
        poll(&running);
        SPINNING.fetch_sub(1, Ordering::AcqRel);
        POLLING.with(|p| p.set(false));
    });
    let r = f();
    drop(stop);
    r
}

/// Run the open `team` loops and the pool's jobs as they come until `running` clears, or nothing came for `MAX_IDLE`
/// (a step nested under a job this thread must finish first, which the nesting guard does
/// not see, then stalls that long at most).
fn poll(running: &AtomicBool) {
    let mut idle_since: Option<Instant> = None;
    let mut seen = 0;
    while running.load(Ordering::Acquire) {
        if crate::team::help(&mut seen) || rayon::yield_now() == Some(rayon::Yield::Executed) {
            idle_since = None;
            continue;
        }
        if idle_since.get_or_insert_with(Instant::now).elapsed() > MAX_IDLE {
            return;
        }
        for _ in 0..32 {
            std::hint::spin_loop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rayon::prelude::*;

    #[test]
    fn busy_runs_the_step_and_its_parallel_work_then_lets_the_workers_go() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        pool.install(|| {
            // many short steps of many small kernels, as decode runs them: a poller that
            // lingers into the next step must not deadlock it
            let kernel = || {
                (0..2_000u64)
                    .into_par_iter()
                    .map(|x| std::hint::black_box(x).wrapping_mul(x) >> 3)
                    .sum::<u64>()
            };
            let want: u64 = 499_500 + 10 * (0..2_000u64).map(|x| (x * x) >> 3).sum::<u64>();
            for _ in 0..20_000 {
                let sum = busy(|| {
                    // nested steps (a draft's inside a target's) run as they are
                    let inner: u64 = busy(|| (0..1000u64).into_par_iter().sum());
                    let kernels = (0..10).map(|_| kernel());
                    inner + kernels.sum::<u64>()
                });
                assert_eq!(sum, want);
            }
            // after the steps the other worker stops polling
            let t = std::time::Instant::now();
            while SPINNING.load(Ordering::Acquire) > 0 {
                assert!(
                    t.elapsed().as_secs() < 5,
                    "a worker still spins after its step"
                );
                std::thread::yield_now();
            }
            assert!(!INSIDE.with(|i| i.get()));
        });
        // outside a pool it is a plain call
        assert_eq!(busy(|| 7), 7);
        // and inside `without`, a pool's steps start no poller
        pool.install(|| {
            without(|| busy(|| (0..1000u64).into_par_iter().sum::<u64>()));
            assert_eq!(SPINNING.load(Ordering::Acquire), 0);
            assert!(ALLOWED.with(|a| a.get()));
        });
    }
}
