//! Compute kernels on plain slices: dot products, quantized matrix products, norms, RoPE,
//! activations and attention. Each hot kernel has one safe entry point that dispatches at
//! run time to a `#[target_feature]` build of the same code, with the portable build as the
//! reference the tests compare against.
//!
//! Letters used in shape comments: T tokens in a batch, C model width, K input width of a
//! matrix product, N output rows, H heads, Hkv key/value heads, D head size, P positions.

pub mod act;
pub mod act_quant;
#[allow(clippy::needless_range_loop)]
pub mod act_split;
pub mod arena;
// SIMD kernels index several register arrays in step; iterators would hide that.
#[allow(clippy::needless_range_loop)]
pub mod attention;
#[cfg(target_arch = "x86_64")]
#[allow(clippy::needless_range_loop)]
pub mod attention_avx2;
pub mod attention_tiled;
#[cfg(target_arch = "x86_64")]
pub mod bf16amx;
pub mod bf16gemm;
pub mod bf16gemm_packed;
#[cfg(test)]
mod bf16gemm_tests;
mod bf16pack;
mod bf16simd;
pub mod dot;
pub mod f16dot;
mod fallback;
mod group_tiles;
pub mod norm;
#[cfg(target_arch = "x86_64")]
mod q8k_avx512;
pub mod qdot;
#[allow(clippy::needless_range_loop)]
pub mod qdot_k;
#[cfg(test)]
mod qdot_k_tests;
pub mod qdot_k_x4;
pub mod qdot_q5;
#[allow(clippy::needless_range_loop)]
pub mod qdot_split;
#[allow(clippy::needless_range_loop)]
pub mod qgemm;
pub mod qmatmul;
pub mod qmatmul_amx;
pub mod qmatmul_t;
#[allow(clippy::needless_range_loop)]
pub mod repack;
#[cfg(target_arch = "x86_64")]
#[allow(clippy::needless_range_loop)]
mod repack_avx2;
pub mod repack_f16;
pub mod repack_k;
#[cfg(target_arch = "x86_64")]
mod repack_k_avx2;
mod repack_k_bf16;
pub mod repack_q6k;
#[cfg(target_arch = "x86_64")]
mod repack_q6k_avx2;
#[cfg(target_arch = "x86_64")]
#[allow(clippy::needless_range_loop)]
mod repack_vnni;
pub mod rope;
mod rowdot;
mod stream;

pub use qmatmul::QMat;
pub use rowdot::coarse_activations;

/// An (n, k) matrix of `test_data` quantized row by row to `ty`, as bytes.
#[cfg(test)]
pub(crate) fn test_matrix(ty: crate::quant::GgmlType, n: usize, k: usize, seed: u64) -> Vec<u8> {
    use crate::quant::GgmlType::{IQ2_XS, IQ2_XXS, IQ4_NL, IQ4_XS};
    let rb = ty.row_bytes(k as u64).expect("whole blocks") as usize;
    if matches!(ty, IQ4_NL | IQ4_XS) {
        // no quantizer for these: random blocks, each starting with a small f16 scale
        let (bytes, block) = (test_data(n * rb, seed), if ty == IQ4_NL { 18 } else { 136 });
        let mut out: Vec<u8> = bytes.iter().map(|v| (v.to_bits() >> 7) as u8).collect();
        for (i, blk) in out.chunks_exact_mut(block).enumerate() {
            let d = half::f16::from_f32(0.0001 + 0.00005 * (i % 7) as f32);
            blk[0..2].copy_from_slice(&d.to_le_bytes());
        }
        return out;
    }
    let wf = test_data(n * k, seed);
    let mut bytes = vec![0u8; rb * n];
    // (the 2-bit lattice types are written only under importance weights: uniform ones)
    let ones = vec![1f32; k];
    let qw = matches!(ty, IQ2_XXS | IQ2_XS).then_some(&ones[..]);
    for (src, dst) in wf.chunks_exact(k).zip(bytes.chunks_exact_mut(rb)) {
        crate::quant::quantize_row(ty, src, dst, qw).expect("quantizable type");
    }
    bytes
}

/// Deterministic values in [-1, 1) for kernel tests (xorshift64, no rand crate).
#[cfg(test)]
pub(crate) fn test_data(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E3779B97F4A7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// Raw pointer to an output that rayon tasks write in disjoint parts.
#[derive(Clone, Copy)]
pub(crate) struct OutPtr(pub(crate) *mut f32);
// SAFETY: each task writes only its own part of the output (see the callers).
unsafe impl Send for OutPtr {}
unsafe impl Sync for OutPtr {}

impl OutPtr {
    /// A method call captures the whole wrapper (not its raw field) in closures.
    pub(crate) fn at(self, i: usize) -> *mut f32 {
        self.0.wrapping_add(i)
    }
}

/// Run `f` on `len` values of the per-thread scratch `key` (grown on first use only, never
/// freed): what kernels use instead of allocating in a hot loop. Each user has its own key, so
/// one scratch is never borrowed twice.
pub(crate) fn with_scratch<T: Copy + Default, R>(
    key: &'static std::thread::LocalKey<std::cell::RefCell<Vec<T>>>,
    len: usize,
    f: impl FnOnce(&mut [T]) -> R,
) -> R {
    key.with(|cell| match cell.try_borrow_mut() {
        Ok(mut s) => {
            if s.len() < len {
                s.resize(len, T::default());
            }
            f(&mut s[..len])
        }
        // a thread already inside (rayon ran another caller's work while it waited)
        Err(_) => f(&mut vec![T::default(); len]),
    })
}
