//! tinynn: toy's compute core. Buffers, kernels (quantized dot products, GEMM, attention,
//! norms), and the ggml weight types. It knows nothing of language models.

#[cfg(feature = "cuda")]
pub mod cuda;
pub mod device;
pub mod kernels;
pub mod layers;
pub mod optim;
pub mod pool;
pub mod profile;
pub mod quant;
pub mod spin;
pub mod team;
