//! Training from scratch: a trainable Llama / GPT-2 transformer on tinynn's layers (forward
//! and backward on preallocated buffers), with its parameters in one flat buffer laid out as
//! GGUF tensors, ready for tinynn's optimiser and for export.

mod block;
mod config;
mod model;
mod params;

pub use config::{ModelConfig, TrainArch, TrainError};
pub use model::TrainModel;
pub use params::ParamInfo;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_infer;
