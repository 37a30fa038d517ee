//! GGUF files (spec: ggml `docs/gguf.md`, versions 2 and 3, little-endian): reading
//! (memory-mapped, every size bounded) and writing (llama.cpp's standard layout).

mod cursor;
mod error;
mod reader;
mod tensor_info;
mod value;
mod writer;

#[cfg(test)]
mod tests;

pub use error::GgufError;
pub use reader::GgufFile;
pub use tensor_info::{TensorInfo, DEFAULT_ALIGNMENT, MAX_ARRAY_DEPTH, MAX_DIMS};
pub use value::{Value, ValueType};
pub use writer::GgufWriter;
