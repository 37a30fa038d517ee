//! Trainable layers: each has a forward and, beside it, the backward that turns the gradient
//! of its output into gradients of its input and parameters (as llm.c's `train_gpt2.c` pairs
//! `*_forward` / `*_backward`). Everything works on caller-provided, preallocated slices, so a
//! training step allocates nothing; parameter gradients are *added* into their buffers, which
//! is what gradient accumulation and tied weights need.
//!
//! Letters used in shape comments: N rows (B sequences times T positions), B sequences,
//! T positions, C model width, K input width of a linear layer, M its output width, H / Hkv
//! query / key-value heads, D head size, F MLP width, V vocabulary.

pub mod act;
pub mod attention;
mod attention_small;
mod attention_tiles;
pub mod cross_entropy;
pub mod dropout;
pub mod embedding;
pub mod encoder;
pub mod gdn;
pub mod layernorm;
pub mod linear;
pub mod lora;
pub mod matmul;
pub mod rmsnorm;
pub mod rope;

#[cfg(test)]
pub(crate) mod gradcheck;

/// Depth scaling of block `l`'s normalised input by 1/sqrt(l+1) ("The Curse of Depth",
/// Sun et al. 2025, arXiv 2502.05795: keeps deep layers' contribution from collapsing under
/// pre-LN variance growth). Norms take it as their `scale` argument, so it costs no extra pass.
pub fn depth_scale(l: usize) -> f32 {
    1.0 / ((l + 1) as f32).sqrt()
}

/// Defines `pub fn $name` whose body is compiled three times: for AVX-512, for AVX2+FMA and
/// portably, with the build picked at run time by [`crate::kernels::dot::simd_level`]
/// (`TOY_FORCE_SCALAR` forces the portable one). The body should be written so that it
/// vectorises (plain loops over slices).
macro_rules! multiversion {
    ($(#[$m:meta])* $vis:vis fn $name:ident($($arg:ident : $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $(#[$m])*
        #[allow(clippy::too_many_arguments)]
        $vis fn $name($($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            #[allow(clippy::too_many_arguments)]
            fn body($($arg: $ty),*) $(-> $ret)? $body
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
            #[allow(clippy::too_many_arguments)]
            unsafe fn avx512($($arg: $ty),*) $(-> $ret)? { body($($arg),*) }
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma")]
            #[allow(clippy::too_many_arguments)]
            unsafe fn avx2($($arg: $ty),*) $(-> $ret)? { body($($arg),*) }
            use $crate::kernels::dot::{simd_level, SimdLevel};
            match simd_level() {
                // SAFETY: the level was detected on this CPU.
                #[cfg(target_arch = "x86_64")]
                SimdLevel::Avx512 => unsafe { avx512($($arg),*) },
                #[cfg(target_arch = "x86_64")]
                SimdLevel::Avx2 => unsafe { avx2($($arg),*) },
                _ => body($($arg),*),
            }
        }
    };
}
pub(crate) use multiversion;

/// Raw pointer to a buffer that rayon tasks write in disjoint parts.
#[derive(Clone, Copy)]
pub(crate) struct SendPtr(pub(crate) *mut f32);
// SAFETY: every user writes only the part of the buffer its task owns (see the callers).
unsafe impl Send for SendPtr {}
unsafe impl Sync for SendPtr {}

impl SendPtr {
    /// A method call captures the whole wrapper (not its raw field) in closures.
    pub(crate) fn get(self) -> *mut f32 {
        self.0
    }
}

thread_local! {
    static SERIAL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Run `f` with every layer called on this thread kept to this thread (no rayon tasks, no
/// threads inside gemm): for callers that already run independent work on each thread, such
/// as a model's batch shards. Every split of work here depends on shapes only and no sum is
/// split among tasks, so this changes no result bits, only the scheduling.
pub fn serial<R>(f: impl FnOnce() -> R) -> R {
    let old = SERIAL.with(|s| s.replace(true));
    let r = f();
    SERIAL.with(|s| s.set(old));
    r
}

/// Whether the current thread is inside [`serial`].
pub(crate) fn in_serial() -> bool {
    SERIAL.with(|s| s.get())
}

/// Rows handed to one rayon task by the row-parallel elementwise layers: about 16k elements,
/// so small layers run as one task (rayon's overhead dwarfs them) and big ones split. Depends
/// only on the shape, so results do not change with the thread count.
/// Inside [`serial`], every row is one task's.
pub(crate) fn rows_per_task(width: usize) -> usize {
    if in_serial() {
        return usize::MAX / 2;
    }
    (16384 / width.max(1)).max(1)
}
