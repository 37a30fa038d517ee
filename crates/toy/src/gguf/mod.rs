//! GGUF files (spec: ggml `docs/gguf.md`): reading (memory-mapped) and writing.
