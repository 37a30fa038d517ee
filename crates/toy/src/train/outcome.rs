//! What a training run returns: how it ended ([`Outcome`]) or why it stopped
//! ([`TrainRunError`]). The loop (`driver.rs`) and the tasks (`trainer.rs`, `finetune`) share
//! these, so they sit below both.

use super::checkpoint::CheckpointError;
use super::data::DataError;
use super::dataset::ShardError;
use super::TrainError;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum TrainRunError {
    #[error(transparent)]
    Data(#[from] DataError),
    #[error(transparent)]
    Shard(#[from] ShardError),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error(transparent)]
    Model(#[from] TrainError),
    #[error(transparent)]
    Ranks(#[from] crate::ranks::RanksError),
    #[error("writing the checkpoint GGUF: {0}")]
    Export(#[from] crate::gguf::GgufError),
    #[error("the donor {path}: {source}")]
    Donor {
        path: PathBuf,
        source: crate::gguf::GgufError,
    },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the data in {dir} has a vocabulary of {data}, the recipe's model.vocab is {model}: prepare the data with --vocab-size {model} or set model.vocab={data}")]
    VocabMismatch {
        dir: PathBuf,
        data: usize,
        model: usize,
    },
    #[error(
        "the {split} split of {dir} has {tokens} tokens, fewer than one window of ctx + 1 = {need}"
    )]
    TooFewTokens {
        dir: PathBuf,
        split: &'static str,
        tokens: usize,
        need: usize,
    },
    #[error("{what} is {value} at step {step}: training diverged (try a lower optim.lr); last good checkpoint: {}", last_checkpoint.as_ref().map_or("none".into(), |p| p.display().to_string()))]
    NonFinite {
        what: &'static str,
        value: f32,
        step: usize,
        last_checkpoint: Option<PathBuf>,
    },
    #[error("tokenizer: {0}")]
    Tokenizer(#[from] crate::tokenizer::TokenizerError),
    #[error("tokenizer file: {0}")]
    Bpe(#[from] super::bpe::BpeError),
}

/// How a call to `trainer::train` (or a fine-tune) ended.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub steps_done: usize,
    pub last_loss: f32,
    pub last_checkpoint: Option<PathBuf>,
    /// Whether all the recipe's steps are done.
    pub finished: bool,
}
