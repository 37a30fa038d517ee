//! One parallel loop handed to a step's polling workers (`spin::busy`) through a shared slot,
//! as ggml's thread pool hands out a graph node: the caller publishes the loop, every thread
//! that polls takes a contiguous share of it from one atomic counter (ggml's
//! `current_chunk`), and the caller waits on a second counter for the shares to finish. No job is queued, stolen or
//! woken: joining costs a few atomic operations, where rayon's fork/join splits the range
//! into a tree of jobs, pushes them on a deque and has the others steal them. A decode step
//! runs ~5 of these loops per layer (~150 a token on SmolLM2).
//!
//! Where no worker polls (outside `spin::busy`, in training, on one thread), or another loop
//! holds the slot (a nested one, a second model's step), the loop runs on rayon as before.
//! The caller takes chunks too and runs every chunk nobody else took, so a late or absent
//! worker only slows the loop. What a chunk computes never depends on who runs it.

use rayon::prelude::*;
use std::cell::UnsafeCell;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::*};

/// Chunks per thread: one, a static contiguous share, so that each thread streams its own
/// slice of the weights (the hardware prefetchers retrain at every jump to another chunk: four
/// chunks a thread decoded the Coder-1.5B, whose weights stream from DRAM, at 0.91x of
/// rayon's halves; one chunk a thread at 1.01x). A thread that starts late still only slows
/// the loop: the others take its share.
const CHUNKS_PER_THREAD: usize = 1;

/// The loop now open: `gen` is odd while one is, and counts up by one at each open and close.
struct Slot {
    gen: AtomicUsize,
    /// Workers between seeing the loop open and leaving it.
    users: AtomicUsize,
    /// The next chunk to take, and the chunks finished.
    next: AtomicUsize,
    done: AtomicUsize,
    chunks: AtomicUsize,
    tasks: AtomicUsize,
    panicked: AtomicBool,
    /// The loop's body, set by the owner before it opens the loop; read only while it is open.
    body: UnsafeCell<Option<*const (dyn Fn(usize) + Sync)>>,
}

// SAFETY: `body` is written by the owner alone while the loop is closed and no worker is
// inside (`users` is 0), and read by workers only while it is open.
unsafe impl Sync for Slot {}

static SLOT: Slot = Slot {
    gen: AtomicUsize::new(0),
    users: AtomicUsize::new(0),
    next: AtomicUsize::new(0),
    done: AtomicUsize::new(0),
    chunks: AtomicUsize::new(0),
    tasks: AtomicUsize::new(0),
    panicked: AtomicBool::new(false),
    body: UnsafeCell::new(None),
};

/// Who owns the slot now.
static OWNED: AtomicBool = AtomicBool::new(false);

/// Loops run through the slot since the process started (for `sync_points`).
static LOOPS: AtomicUsize = AtomicUsize::new(0);
/// Loops of one task, or on one thread.
static SERIAL: AtomicUsize = AtomicUsize::new(0);
/// Loops that fell back to rayon.
static FALLBACKS: AtomicUsize = AtomicUsize::new(0);

/// Parallel loops since the process started: (through the slot, on rayon, serial: one task
/// or one thread). A step's synchronisation points are the difference of two readings.
pub fn sync_points() -> (usize, usize, usize) {
    (
        LOOPS.load(Relaxed),
        FALLBACKS.load(Relaxed),
        SERIAL.load(Relaxed),
    )
}

/// Run `f(i)` for every i in 0..n, in parallel: through the slot when workers poll for it,
/// else on rayon. Tasks are taken in contiguous chunks.
pub fn par_for(n: usize, f: impl Fn(usize) + Sync) {
    if n == 0 {
        return;
    }
    let threads = rayon::current_num_threads();
    if n == 1 || threads == 1 {
        SERIAL.fetch_add(1, Relaxed);
        (0..n).for_each(f);
        return;
    }
    if crate::spin::spinning() == 0 || OWNED.swap(true, Acquire) {
        FALLBACKS.fetch_add(1, Relaxed);
        (0..n).into_par_iter().for_each(&f);
        return;
    }
    LOOPS.fetch_add(1, Relaxed);
    let chunks = n.min(threads * CHUNKS_PER_THREAD);
    let body: &(dyn Fn(usize) + Sync) = &f;
    // SAFETY: the slot is closed and empty (the last owner waited for its users), and this
    // thread owns it; `Close` keeps `f` alive until no worker can read the pointer.
    unsafe {
        *SLOT.body.get() = Some(std::mem::transmute::<
            *const (dyn Fn(usize) + Sync + '_),
            *const (dyn Fn(usize) + Sync + 'static),
        >(body));
    }
    SLOT.tasks.store(n, Relaxed);
    SLOT.chunks.store(chunks, Relaxed);
    SLOT.next.store(0, Relaxed);
    SLOT.done.store(0, Relaxed);
    SLOT.panicked.store(false, Relaxed);
    SLOT.gen.fetch_add(1, SeqCst); // open
    let close = Close;
    work();
    while SLOT.done.load(Acquire) < chunks {
        std::hint::spin_loop();
    }
    let panicked = SLOT.panicked.load(Acquire);
    drop(close);
    assert!(!panicked, "a worker panicked in a parallel loop");
}

/// Closes the loop, waits until no worker is inside, and gives the slot back; also when the
/// owner's own chunk panics.
struct Close;

impl Drop for Close {
    fn drop(&mut self) {
        SLOT.gen.fetch_add(1, SeqCst);
        while SLOT.users.load(SeqCst) > 0 {
            std::hint::spin_loop();
        }
        // SAFETY: closed and no worker inside: nobody reads the body any more.
        unsafe { *SLOT.body.get() = None };
        OWNED.store(false, Release);
    }
}

/// Run `f(range)` on parts of 0..n (at least `min` each, one part a thread) in
/// parallel (`par_for`); all of 0..n on the caller when that is one part.
pub fn par_ranges(n: usize, min: usize, f: impl Fn(Range<usize>) + Sync) {
    let per = n
        .div_ceil(rayon::current_num_threads() * CHUNKS_PER_THREAD)
        .max(min)
        .max(1);
    if n <= per {
        return f(0..n);
    }
    par_for(n.div_ceil(per), |c| f(c * per..((c + 1) * per).min(n)));
}

/// Split `out` into chunks of whole rows of `row` elements (at least `min_rows` rows each,
/// one chunk a thread) and run `f(first_row, chunk)` on each in parallel
/// (`par_for`): for row-wise work between the products (norms, RoPE, quantizing the
/// activations), whose results do not depend on the split.
pub fn par_rows<T: Send>(
    out: &mut [T],
    row: usize,
    min_rows: usize,
    f: impl Fn(usize, &mut [T]) + Sync,
) {
    let (rows, len) = (out.len() / row.max(1), out.len());
    let ptr = SendPtr(out.as_mut_ptr());
    par_ranges(rows, min_rows, |r| {
        let end = if r.end == rows { len } else { r.end * row };
        // SAFETY: this part alone covers rows r of `out` (the last one its tail too).
        let chunk =
            unsafe { std::slice::from_raw_parts_mut(ptr.at(r.start * row), end - r.start * row) };
        f(r.start, chunk)
    });
}

/// A pointer into a slice whose disjoint parts tasks write.
struct SendPtr<T>(*mut T);
// SAFETY: each task touches only its own part (see `par_rows`).
unsafe impl<T: Send> Send for SendPtr<T> {}
unsafe impl<T: Send> Sync for SendPtr<T> {}

impl<T> SendPtr<T> {
    /// Through a method, so closures capture the wrapper rather than its raw field.
    fn at(&self, i: usize) -> *mut T {
        self.0.wrapping_add(i)
    }
}

/// Take chunks of the open loop until none is left.
fn work() {
    let (n, chunks) = (SLOT.tasks.load(Relaxed), SLOT.chunks.load(Relaxed));
    // SAFETY: called by the owner, or by a worker counted in `users` that saw the loop open
    // after counting itself: the body lives until the loop closes and `users` drops to 0.
    let body = unsafe { &*(*SLOT.body.get()).expect("an open loop has a body") };
    loop {
        let c = SLOT.next.fetch_add(1, Relaxed);
        if c >= chunks {
            return;
        }
        for i in c * n / chunks..(c + 1) * n / chunks {
            body(i);
        }
        SLOT.done.fetch_add(1, Release);
    }
}

/// A polling worker's turn: join the open loop if there is one it has not joined yet
/// (`seen`, the loop it last looked at). Returns whether it ran any of it.
pub(crate) fn help(seen: &mut usize) -> bool {
    let g = SLOT.gen.load(Acquire);
    if g.is_multiple_of(2) || g == *seen {
        return false;
    }
    *seen = g;
    SLOT.users.fetch_add(1, SeqCst);
    let open = SLOT.gen.load(SeqCst) == g;
    if open {
        // a panicking chunk still counts as done, so the owner does not wait forever
        let r = std::panic::catch_unwind(work);
        if r.is_err() {
            SLOT.panicked.store(true, Release);
            SLOT.done.store(usize::MAX / 2, Release);
        }
    }
    SLOT.users.fetch_sub(1, SeqCst);
    open
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    fn pool(n: usize) -> rayon::ThreadPool {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .unwrap()
    }

    /// Each of 0..n run once by `par_for`.
    fn once_each(n: usize) {
        let hits: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(0)).collect();
        par_for(n, |i| {
            hits[i].fetch_add(1, Relaxed);
        });
        for (i, h) in hits.iter().enumerate() {
            assert_eq!(h.load(Relaxed), 1, "task {i} of {n}");
        }
    }

    #[test]
    fn every_task_runs_once_through_the_workers_and_on_rayon() {
        pool(3).install(|| {
            // until some loop went through the polling workers (other tests running beside
            // this one may hold the slot, or the cores, for a while)
            let (before, t) = (sync_points(), std::time::Instant::now());
            while sync_points().0 == before.0 {
                assert!(
                    t.elapsed().as_secs() < 20,
                    "no loop went through the polling workers"
                );
                crate::spin::busy(|| {
                    for round in 0..3000 {
                        once_each(round % 97);
                    }
                });
            }
            // outside `busy` nobody polls: rayon
            for n in [0, 1, 2, 31, 500] {
                once_each(n);
            }
        });
        once_each(40); // outside a pool
    }

    #[test]
    fn nested_loops_and_two_callers_at_once_each_run_their_tasks() {
        pool(4).install(|| {
            crate::spin::busy(|| {
                for _ in 0..200 {
                    let sum = AtomicUsize::new(0);
                    // an outer loop whose tasks run inner loops (which find the slot taken)
                    par_for(8, |i| {
                        par_for(10, |j| {
                            sum.fetch_add(i * 10 + j, Relaxed);
                        })
                    });
                    assert_eq!(sum.load(Relaxed), (0..80).sum::<usize>());
                }
            });
            // two steps of two models at once
            rayon::join(
                || crate::spin::busy(|| (0..500).for_each(|_| once_each(33))),
                || crate::spin::busy(|| (0..500).for_each(|_| once_each(17))),
            );
        });
    }

    #[test]
    fn a_panicking_task_reaches_the_caller_and_the_slot_serves_again() {
        pool(2).install(|| {
            crate::spin::busy(|| {
                for bad in [0, 63] {
                    let r = std::panic::catch_unwind(|| {
                        par_for(64, |i| {
                            assert_ne!(i, bad, "task {i} fails");
                        })
                    });
                    assert!(r.is_err(), "the panic of task {bad} was lost");
                }
                once_each(64);
            });
            // the slot was given back: loops go through it again (in a new step, as printing
            // the panics may outlast the pollers' patience; other tests may hold the slot for
            // a moment)
            // (by time, not by count: on a loaded machine another test may hold it a while)
            crate::spin::busy(|| {
                let before = sync_points().0;
                let t0 = std::time::Instant::now();
                while t0.elapsed() < std::time::Duration::from_secs(60) {
                    once_each(64);
                    if sync_points().0 > before {
                        return;
                    }
                }
                panic!("no loop went through the slot after the panics");
            });
        });
    }
}
