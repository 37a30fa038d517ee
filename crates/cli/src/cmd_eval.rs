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
    /// Loss along the line between two checkpoints of one shape, and its barrier.
    Lmc(crate::cmd_compare::LmcArgs),
    /// Per-position KL(A||B) and top-1 agreement of two models, and where they drift most.
    Drift(crate::cmd_compare::DriftArgs),
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
    match c {
        EvalCmd::Ppl(a) => run_ppl(a),
        EvalCmd::Lmc(a) => crate::cmd_compare::run_lmc(a),
        EvalCmd::Drift(a) => crate::cmd_compare::run_drift(a),
    }
}

fn run_ppl(a: PplArgs) -> Result<()> {
    let (model, tok) = load_with_lora(&a.model, &a.lora)?;
    let text = std::fs::read_to_string(&a.file)
        .with_context(|| format!("reading '{}'", a.file.display()))?;
    let ids = tok.encode(&text, true)?;
    let bar = ProgressBar::new((ids.len() / a.ctx.max(1)) as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} chunk {pos}/{len} ppl {msg} eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let r = perplexity(&model, &ids, a.ctx, |done, _, ppl| {
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
