//! Fine-tuning a model one already runs, on the GGUF itself: LoRA (Hu et al. 2021,
//! arXiv 2106.09685; rsLoRA, Kalajdzievski 2023, arXiv 2312.03732) on a frozen base kept in
//! its stored weight type, or a full fine-tune in f32; chat SFT data with the loss on the
//! assistant turns only; adapters as llama.cpp's LoRA GGUF (`llama-adapter.cpp`), and merging.

/// The adapter file format, below the model code that runs adapters unmerged.
pub use crate::model::adapter;
pub mod evaluate;
mod load;
pub mod merge;
pub mod recipe;
mod repack;
pub mod run;
mod save;
pub mod sft;
pub mod sft_batch;
mod sft_error;
mod task;
