//! toy: the library behind the `toy` binary. GGUF files, the tokenizer and chat template,
//! the model families, inference (KV cache, sampler, generation), evaluation and training.
//! Everything here is synchronous; the server and the CLI drive it.

pub mod chat_template;
pub mod durable;
pub mod eval;
pub mod finetune;
pub mod gguf;
pub mod images;
pub mod infer;
pub mod model;
pub mod quantize;
pub mod ranks;
pub mod template_budget;
pub mod tokenizer;
pub mod train;
pub mod vision;
