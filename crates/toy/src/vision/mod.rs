//! Image classification on the engine: a Vision Transformer (Dosovitskiy et al. 2021) whose
//! blocks are `tinynn`'s encoder blocks, and its batches (`batch.rs`).

pub mod batch;
pub mod checkpoint;
pub mod confusion_plot;
pub mod eval;
pub mod recipe;
pub mod shards;
pub mod train;
pub mod vit;
