//! `toy eval`: perplexity of a text file, by llama-perplexity's method.

use crate::common::{load_with_lora, LoraArgs, ModelArgs};
use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use toy::eval::perplexity::perplexity;

#[derive(clap::Subcommand)]
pub enum EvalCmd {
    /// Perplexity over chunks of --ctx tokens (second half of each chunk scored).
    Ppl(PplArgs),
}

#[derive(clap::Args)]
pub struct PplArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    lora: LoraArgs,
    /// Text file to evaluate.
    #[arg(short = 'f', long)]
    file: PathBuf,
    /// Chunk size in tokens.
    #[arg(short = 'c', long, default_value_t = 512)]
    ctx: usize,
    #[arg(long)]
    json: bool,
}

pub fn run(c: EvalCmd) -> Result<()> {
    let EvalCmd::Ppl(a) = c;
    let (model, tok) = load_with_lora(&a.model, &a.lora)?;
    let text = std::fs::read_to_string(&a.file)
        .with_context(|| format!("reading '{}'", a.file.display()))?;
    let ids = tok.encode(&text, true)?;
    let bar = ProgressBar::new((ids.len() / a.ctx.max(1)) as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} chunk {pos}/{len} ppl {msg} eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let r = perplexity(&model, &ids, a.ctx, tok.start_bos(), |done, _, ppl| {
        bar.set_position(done as u64);
        bar.set_message(format!("{ppl:.4}"));
    })
    .with_context(|| {
        format!(
            "'{}' has {} tokens, need at least one chunk of {}",
            a.file.display(),
            ids.len(),
            a.ctx
        )
    })?;
    bar.finish_and_clear();
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        println!(
            "perplexity {:.4} +/- {:.5} over {} chunks of {} ({} tokens)",
            r.ppl, r.stderr, r.chunks, a.ctx, r.tokens
        );
    }
    Ok(())
}
