//! Training from scratch: a trainable Llama / GPT-2 transformer or Qwen3.5-style hybrid on tinynn's layers (forward
//! and backward on preallocated buffers), with its parameters in one flat buffer laid out as
//! GGUF tensors, ready for tinynn's optimiser and for export; and around it data preparation,
//! recipes, the training loop, checkpoints, export to GGUF and loss plots.

mod base;
mod block;
mod block_ops;
mod config;
mod gdn_mixer;
mod hybrid_config;
mod lin;
mod model;
pub(crate) use model::add_and_clear;
mod params;
mod pca;
mod qk_norm;
mod shard;
mod stack;

pub mod bpe;
pub mod checkpoint;
pub mod corpus;
pub mod data;
pub mod dataset;
pub mod driver;
pub mod evaluate;
pub mod events;
pub mod export;
mod outcome;
pub mod plot;
pub mod precision;
pub mod recipe;
pub mod rng;
pub mod run;
pub mod trainer;
pub mod warm_start;

pub use base::config_from_gguf as base_config;
pub use config::{Arch, HybridConfig, LayerKind, ModelConfig, ModelSpec, TrainError};
pub use model::{LoraSpec, TrainModel};
pub use params::ParamInfo;

/// Largest size of any one dimension of a model config (bounds every allocation from one).
pub(crate) const MAX_DIM: usize = 1 << 20;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_hybrid;
#[cfg(test)]
mod tests_hybrid_lora;
#[cfg(test)]
mod tests_infer;
#[cfg(test)]
mod tests_lora;
#[cfg(test)]
mod tests_ranks;
#[cfg(test)]
mod tests_warm;
