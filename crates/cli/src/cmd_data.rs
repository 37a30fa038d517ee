//! `toy data prepare`: text files, folders or JSONL in; token shards, `meta.json` and
//! `tokenizer.gguf` out (see `toy::train::data`). `toy data images`: IDX files or image
//! folders in; image shards with a validation split out (see `toy::images`).

use anyhow::{bail, Result};
use std::path::PathBuf;
use toy::train::data::{prepare, PrepareOptions, TokenizerChoice};

#[derive(clap::Subcommand)]
pub enum DataCmd {
    /// Tokenize a corpus into train/validation token shards (default corpus: the Rust book
    /// from the local Rust documentation).
    Prepare(PrepareArgs),
    /// Image classification data (IDX files such as Fashion-MNIST's, or one folder per class)
    /// into train / validation (/ test) image shards.
    Images(ImagesArgs),
}

#[derive(clap::Args)]
pub struct ImagesArgs {
    /// A folder of IDX files (train-images-idx3-ubyte[.gz] ..., t10k-* as the test split) or
    /// of class folders of images. Default: Debian's Fashion-MNIST
    /// (`apt-get install dataset-fashion-mnist`).
    #[arg(default_value = toy::images::FASHION_MNIST_DIR)]
    source: PathBuf,
    /// Output folder.
    #[arg(long)]
    out: PathBuf,
    /// Share of the training images held out for validation.
    #[arg(long, default_value_t = 0.1)]
    val_fraction: f64,
    /// Seed of the split.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Image folders: 1 (grey) or 3 (RGB) channels.
    #[arg(long, default_value_t = 3)]
    channels: usize,
    /// Image folders: resize every image to SIZE x SIZE (default: all must share one size).
    #[arg(long)]
    size: Option<usize>,
    /// Image folders: what an unreadable file does: skip it (reported) or stop.
    #[arg(long, default_value = "skip", value_parser = ["skip", "error"])]
    on_bad: String,
    /// Print the result as one JSON object.
    #[arg(long)]
    json: bool,
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
    let a = match c {
        DataCmd::Prepare(a) => a,
        DataCmd::Images(a) => return images(a),
    };
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

fn images(a: ImagesArgs) -> Result<()> {
    use toy::images::{folder, idx, shard, FASHION_MNIST_CLASSES, FASHION_MNIST_DIR};
    if !(0.0..1.0).contains(&a.val_fraction) {
        bail!("--val-fraction {} is outside [0, 1)", a.val_fraction);
    }
    if !a.source.exists() {
        if a.source == std::path::Path::new(FASHION_MNIST_DIR) {
            bail!("Fashion-MNIST is not installed: it is Debian's package dataset-fashion-mnist (apt-get install dataset-fashion-mnist), which puts it in {FASHION_MNIST_DIR}");
        }
        bail!(
            "'{}' does not exist (expected IDX files or one folder per class)",
            a.source.display()
        );
    }
    let src = a.source.display().to_string();
    let t0 = std::time::Instant::now();
    let (all, test, skipped) = match idx::find_pair(&a.source, "train") {
        Some((im, lb)) => {
            let names: Vec<String> = if src.to_lowercase().contains("fashion") {
                FASHION_MNIST_CLASSES
                    .iter()
                    .map(|c| c.to_string())
                    .collect()
            } else {
                Vec::new()
            };
            let train = idx::load_pair(&im, &lb, names.clone())?;
            let test = match idx::find_pair(&a.source, "t10k") {
                Some((im, lb)) => Some(idx::load_pair(&im, &lb, train.classes.clone())?),
                None => None,
            };
            (train, test, Vec::new())
        }
        None => {
            let o = folder::FolderOptions {
                channels: a.channels,
                size: a.size,
                on_bad: if a.on_bad == "error" {
                    folder::OnBad::Error
                } else {
                    folder::OnBad::Skip
                },
            };
            let (set, skipped) = folder::load(&a.source, &o)?;
            (set, None, skipped)
        }
    };
    for (p, why) in &skipped {
        eprintln!("skipped {}: {why}", p.display());
    }
    let (train, val) = all.split(a.val_fraction, a.seed);
    let mut splits = vec![("train", &train), ("val", &val)];
    if let Some(t) = &test {
        splits.push(("test", t));
    }
    let mut meta = shard::write(&a.out, &splits, &src)?;
    meta["skipped"] = serde_json::json!(skipped.len());
    if a.json {
        println!("{meta}");
    } else {
        println!(
            "{}: {} classes, {}x{}x{}: {} train + {} validation{} images ({} skipped) in {:.1}s",
            a.out.display(),
            train.classes.len(),
            train.h,
            train.w,
            train.c,
            train.len(),
            val.len(),
            test.as_ref()
                .map_or(String::new(), |t| format!(" + {} test", t.len())),
            skipped.len(),
            t0.elapsed().as_secs_f64()
        );
    }
    Ok(())
}
