//! Software prefetch for decode's weight streams. A matrix-vector product reads each repacked
//! weight byte once, in order; on this class of server core (a large, shared L3 behind a mesh)
//! the hardware prefetchers alone keep too few lines in flight, and the integer dot kernels
//! stall on their weight loads (seen with `perf annotate`: the samples land on the
//! instructions after each `vpdpbusd` with a memory operand). Asking for the bytes a few
//! blocks ahead (Intel's optimization manual, "software prefetch for streaming loads") took
//! Q8_0 decode of SmolLM2-135M from ~100 to ~130 tok/s and Q4_1 from ~155 to ~215 here.
//! A second, farther request into L2 (`_MM_HINT_T1`) keeps more lines coming from DRAM while
//! the near one lands them in L1: Q4_K decode from DRAM 15.7 -> 17.3 GB/s, the Coder 1.5B
//! 18.0 -> 19.2 tok/s, SmolLM2 Q4_1 ~205 -> ~240.
//! The k-quant kernels, whose blocks of 16 rows span 37 (Q4_K) and 53 (Q6_K) lines, ask for
//! a block's lines in parts spread over their work on it (`prefetch_part`) rather than in one
//! burst at its start: the Coder 1.5B 22.1 -> 24.0 tok/s (4 and 8 parts; 16 parts for Q4_K
//! was slower, 21.8). With `perf annotate` the burst's samples sat on its `prefetcht1`s.

/// How far ahead of the bytes being read decode asks for weights into L1: about 5 Q8_0
/// blocks of 16 rows, 10 of Q4_1, 1.3 of Q4_K (`bench/prefetch.sh` sweeps it,
/// `TOY_PREFETCH_BYTES` overrides it; 0 turns both prefetches off).
pub(crate) const PREFETCH_BYTES: usize = 3072;
/// How far ahead it asks for them into L2 (`TOY_PREFETCH_L2_BYTES`; 0 turns it off).
pub(crate) const PREFETCH_L2_BYTES: usize = 12288;

/// Prefetch the `len` bytes that lie `PREFETCH_BYTES` past `at` into L1, and those
/// `PREFETCH_L2_BYTES` past it into L2. Prefetches never fault, so reading past the end of
/// the matrix is harmless.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn prefetch_ahead(at: *const u8, len: usize) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0, _MM_HINT_T1};
    static L1: Distance = Distance::new("TOY_PREFETCH_BYTES", PREFETCH_BYTES);
    static L2: Distance = Distance::new("TOY_PREFETCH_L2_BYTES", PREFETCH_L2_BYTES);
    let (near, far) = (L1.get(), L2.get());
    if near == 0 {
        return;
    }
    for l in (0..len).step_by(64) {
        // SAFETY: a prefetch is a hint; it reads nothing and cannot fault on any address.
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(near + l) as *const i8);
            if far != 0 {
                _mm_prefetch::<_MM_HINT_T1>(at.wrapping_add(far + l) as *const i8);
            }
        }
    }
}

/// Part `i` of `n` of [`prefetch_ahead`]`(at, len)`: its lines split evenly, so that a kernel
/// spreads its requests over its work on a block rather than issuing them in one burst.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn prefetch_part(at: *const u8, len: usize, i: usize, n: usize) {
    let lines = len.div_ceil(64);
    let (l0, l1) = (lines * i / n, lines * (i + 1) / n);
    prefetch_ahead(at.wrapping_add(64 * l0), 64 * (l1 - l0));
}

/// A prefetch distance: its default, or the environment variable's value, read once.
struct Distance {
    var: &'static str,
    default: usize,
    value: std::sync::atomic::AtomicUsize,
}

impl Distance {
    const fn new(var: &'static str, default: usize) -> Self {
        Self {
            var,
            default,
            value: std::sync::atomic::AtomicUsize::new(usize::MAX),
        }
    }

    #[inline(always)]
    fn get(&self) -> usize {
        use std::sync::atomic::Ordering;
        let d = self.value.load(Ordering::Relaxed);
        if d != usize::MAX {
            return d;
        }
        let d = std::env::var(self.var)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(self.default);
        self.value.store(d, Ordering::Relaxed);
        d
    }
}
