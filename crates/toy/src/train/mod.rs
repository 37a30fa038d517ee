//! Training from scratch: a trainable Llama / GPT-2 transformer on tinynn's layers (forward
//! and backward on preallocated buffers), with its parameters in one flat buffer laid out as
//! GGUF tensors, ready for tinynn's optimiser and for export; and around it data preparation,
//! recipes, the training loop, checkpoints, export to GGUF and loss plots.

mod block;
mod config;
mod model;
mod params;
mod shard;

pub mod bpe;
pub mod checkpoint;
pub mod corpus;
pub mod data;
pub mod dataset;
pub mod evaluate;
pub mod events;
pub mod export;
pub mod plot;
pub mod recipe;
pub mod rng;
pub mod run;
pub mod trainer;

pub use config::{ModelConfig, TrainArch, TrainError};
pub use model::TrainModel;
pub use params::ParamInfo;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_infer;
