//! Inference: the KV cache, the sampler, and the generation loop.

pub mod constrain;
pub mod generate;
pub mod kv_cache;
pub mod sampler;
pub mod spec_tune;
pub mod speculative;
pub mod verify;
