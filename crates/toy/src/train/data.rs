//! `toy data prepare`: text in, a data folder out (token shards, `meta.json`,
//! `tokenizer.gguf`). The tokenizer is a new byte-level BPE trained on the corpus or an
//! existing model's; the corpus is the given files/folders/JSONL or, with none, the Rust book.

use std::path::{Path, PathBuf};

use super::bpe::{self, BpeError, END_OF_TEXT};
use super::corpus::{self, CorpusError};
use super::dataset::{self, Meta, ShardError};
use crate::tokenizer::{Tokenizer, TokenizerError};

#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error(transparent)]
    Corpus(#[from] CorpusError),
    #[error(transparent)]
    Bpe(#[from] BpeError),
    #[error(transparent)]
    Shard(#[from] ShardError),
    #[error("tokenizing the corpus: {0}")]
    Tokenizer(#[from] TokenizerError),
    #[error("give either a tokenizer model or a vocabulary size, not both")]
    TokenizerAndVocab,
    #[error("the corpus has {tokens} tokens: too few for a data set (expected at least {need})")]
    TooSmall { tokens: usize, need: usize },
}

/// Where the tokenizer comes from.
#[derive(Clone, Debug)]
pub enum TokenizerChoice {
    /// A new byte-level BPE of this many tokens, trained on the corpus.
    Train { vocab_size: usize },
    /// The tokenizer of an existing GGUF model.
    FromModel(PathBuf),
}

#[derive(Clone, Debug)]
pub struct PrepareOptions {
    /// Text files, folders or JSONL; empty: the Rust book.
    pub inputs: Vec<PathBuf>,
    pub out: PathBuf,
    pub tokenizer: TokenizerChoice,
    pub val_fraction: f64,
    pub seed: u64,
}

/// Reads the corpus, makes or loads the tokenizer, tokenizes and writes the data folder.
pub fn prepare(opts: &PrepareOptions) -> Result<Meta, DataError> {
    let docs = if opts.inputs.is_empty() {
        corpus::rust_book()?
    } else {
        corpus::read_inputs(&opts.inputs)?
    };
    let (spec, source) = match &opts.tokenizer {
        TokenizerChoice::Train { vocab_size } => (
            bpe::train_bpe(&docs, *vocab_size)?,
            format!("byte-level BPE of {vocab_size} trained on the corpus"),
        ),
        TokenizerChoice::FromModel(p) => (bpe::load_tokenizer(p)?, p.display().to_string()),
    };
    let vocab_size = spec.tokens.len();
    let eot = spec
        .tokens
        .iter()
        .position(|t| t == END_OF_TEXT)
        .map(|i| i as u32)
        .or(spec.eos);
    let tok = Tokenizer::from_spec(spec.clone())?;
    let tokens = encode_documents(&tok, &docs, eot)?;
    let need = 2 * dataset::SPLIT_BLOCK;
    if tokens.len() < need {
        return Err(DataError::TooSmall {
            tokens: tokens.len(),
            need,
        });
    }
    std::fs::create_dir_all(&opts.out).map_err(|source| ShardError::Io {
        path: opts.out.clone(),
        source,
    })?;
    bpe::save_tokenizer(&spec, &opts.out.join("tokenizer.gguf"))?;
    let meta = Meta {
        vocab_size,
        dtype: String::new(),
        train_tokens: 0,
        val_tokens: 0,
        documents: docs.len(),
        eot,
        tokenizer_source: source,
        seed: opts.seed,
        val_fraction: opts.val_fraction,
    };
    Ok(dataset::write_shards(&opts.out, &tokens, meta)?)
}

/// Every document's tokens followed by the separator, documents tokenized in parallel.
fn encode_documents(
    tok: &Tokenizer,
    docs: &[String],
    eot: Option<u32>,
) -> Result<Vec<u32>, TokenizerError> {
    use rayon::prelude::*;
    let parts: Vec<Vec<u32>> = docs
        .par_iter()
        .map(|d| tok.encode(d, false))
        .collect::<Result<_, _>>()?;
    let mut out = Vec::with_capacity(parts.iter().map(|p| p.len() + 1).sum());
    for p in parts {
        out.extend_from_slice(&p);
        out.extend(eot);
    }
    Ok(out)
}

/// Whether `dir` already holds prepared data.
pub fn is_prepared(dir: &Path) -> bool {
    dir.join("meta.json").is_file()
}
