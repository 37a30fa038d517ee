//! Inference: the sampler, constrained decoding, and the generation loops (plain and
//! speculative). The KV cache is per-sequence model state and lives in `model::kv_cache`
//! (re-exported here), below everything that runs a model.

pub mod constrain;
pub mod generate;
pub use crate::model::kv_cache;
pub mod dry;
pub mod order;
pub mod sampler;
pub mod samplers;
pub mod spec_tune;
pub mod speculative;
pub mod verify;
