//! Compute kernels on plain slices: dot products, quantized matrix products, norms, RoPE,
//! activations and attention. Each hot kernel has one safe entry point that dispatches at
//! run time to a `#[target_feature]` build of the same code, with the portable build as the
//! reference the tests compare against.
//!
//! Letters used in shape comments: T tokens in a batch, C model width, K input width of a
//! matrix product, N output rows, H heads, Hkv key/value heads, D head size, P positions.

pub mod act;
pub mod act_quant;
pub mod attention;
pub mod dot;
pub mod norm;
pub mod qdot;
pub mod qmatmul;
pub mod rope;

pub use qmatmul::QMat;
