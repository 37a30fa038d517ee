//! Quantized weight types of ggml: the type table, and conversion between f32 and each
//! type's block layout (reference: ggml's `ggml-quants.c`).

mod types;

pub use types::{GgmlType, QK_K};
