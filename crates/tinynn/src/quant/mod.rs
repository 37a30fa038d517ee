//! Quantized weight types of ggml: the type table, and conversion between f32 and each
//! type's block layout (reference: ggml's `ggml-quants.c`).
//!
//! `dequantize` / `quantize` in `convert` are what callers use; the per-type modules hold
//! the block kernels, one block (`[u8; TYPE_SIZE]` <-> `[f32; BLOCK_SIZE]`) at a time.

mod convert;
pub mod float;
mod iq2_quantize;
pub mod iq4;
mod iq_grids;
pub mod iq_lattice;
mod iq_quantize;
mod iq_quantize_init;
pub mod kquants;
pub mod kquants_quantize;
pub mod legacy;
mod scale_search;
mod types;
pub mod weighted;

pub use convert::{can_dequantize, can_quantize, dequantize, quantize, QuantError};
pub use types::{GgmlType, QK_K};
pub use weighted::{quantize_row, uses_imatrix};

#[cfg(test)]
mod iq_quantize_tests;
#[cfg(test)]
mod reference_tests;
#[cfg(test)]
mod roundtrip_tests;
#[cfg(test)]
mod weighted_tests;
