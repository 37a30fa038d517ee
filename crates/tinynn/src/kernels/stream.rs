//! Software prefetch for decode's weight streams. A matrix-vector product reads each repacked
//! weight byte once, in order; on this class of server core (a large, shared L3 behind a mesh)
//! the hardware prefetchers alone keep too few lines in flight, and the integer dot kernels
//! stall on their weight loads (seen with `perf annotate`: the samples land on the
//! instructions after each `vpdpbusd` with a memory operand). Asking for the bytes a few
//! blocks ahead (Intel's optimization manual, "software prefetch for streaming loads") took
//! Q8_0 decode of SmolLM2-135M from ~100 to ~130 tok/s and Q4_1 from ~155 to ~215 here.

/// How far ahead of the bytes being read decode asks for weights: about 5 Q8_0 blocks of 16
/// rows, 10 of Q4_1, 1.3 of Q4_K (`bench/prefetch.sh` sweeps it).
pub(crate) const PREFETCH_BYTES: usize = 3072;

/// Prefetch the `len` bytes that lie `PREFETCH_BYTES` past `at` into L1. Prefetches never
/// fault, so reading past the end of the matrix is harmless.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn prefetch_ahead(at: *const u8, len: usize) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    let dist = distance();
    if dist == 0 {
        return;
    }
    for l in (0..len).step_by(64) {
        // SAFETY: a prefetch is a hint; it reads nothing and cannot fault on any address.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(dist + l) as *const i8) };
    }
}

#[inline(always)]
fn distance() -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static DIST: AtomicUsize = AtomicUsize::new(usize::MAX);
    let d = DIST.load(Ordering::Relaxed);
    if d != usize::MAX {
        return d;
    }
    let d = std::env::var("TOY_PREFETCH_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(PREFETCH_BYTES);
    DIST.store(d, Ordering::Relaxed);
    d
}
