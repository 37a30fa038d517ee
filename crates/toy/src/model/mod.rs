//! Model families: the Llama family and GPT-2, loaded from GGUF.
