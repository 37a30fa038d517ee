//! Tokenizer built from GGUF `tokenizer.ggml.*` metadata, on the `tokenizers` crate.
