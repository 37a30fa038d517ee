//! `toy data prepare`: text files, folders or JSONL in; token shards, `meta.json` and
//! `tokenizer.gguf` out (see `toy::train::data`).

use anyhow::{bail, Result};
use std::path::PathBuf;
use toy::train::data::{prepare, PrepareOptions, TokenizerChoice};

#[derive(clap::Subcommand)]
pub enum DataCmd {
    /// Tokenize a corpus into train/validation token shards (default corpus: the Rust book
    /// from the local Rust documentation).
    Prepare(PrepareArgs),
}

#[derive(clap::Args)]
pub struct PrepareArgs {
    /// Text files, folders (read recursively) or JSONL files (`text` field); none: the Rust
    /// book from `rustup doc --path`.
    inputs: Vec<PathBuf>,
    /// Output folder.
    #[arg(long)]
    out: PathBuf,
    /// Use the tokenizer of this GGUF model.
    #[arg(long, conflicts_with = "vocab_size")]
    tokenizer: Option<PathBuf>,
    /// Train a new byte-level BPE of this many tokens on the corpus.
    #[arg(long)]
    vocab_size: Option<usize>,
    /// Share of the tokens held out for validation.
    #[arg(long, default_value_t = 0.05)]
    val_fraction: f64,
    /// Seed of the train/validation split.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

pub fn run(c: DataCmd) -> Result<()> {
    let DataCmd::Prepare(a) = c;
    let tokenizer = match (a.tokenizer, a.vocab_size) {
        (Some(p), None) => TokenizerChoice::FromModel(p),
        (None, Some(n)) => TokenizerChoice::Train { vocab_size: n },
        (None, None) => bail!("give --vocab-size N (train a new BPE) or --tokenizer MODEL.gguf"),
        (Some(_), Some(_)) => bail!("give either --vocab-size or --tokenizer, not both"),
    };
    if !(0.0..1.0).contains(&a.val_fraction) {
        bail!("--val-fraction {} is outside [0, 1)", a.val_fraction);
    }
    let t0 = std::time::Instant::now();
    let meta = prepare(&PrepareOptions {
        inputs: a.inputs,
        out: a.out.clone(),
        tokenizer,
        val_fraction: a.val_fraction,
        seed: a.seed,
    })?;
    println!(
        "{}: {} documents, vocabulary {} ({}), {} train + {} validation tokens as {} in {:.1}s",
        a.out.display(),
        meta.documents,
        meta.vocab_size,
        meta.tokenizer_source,
        meta.train_tokens,
        meta.val_tokens,
        meta.dtype,
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}
