//! `toy eval`: perplexity of a text file by llama-perplexity's method (`ppl`), KL divergence
//! against a base of log-probs in llama-perplexity's `--kl-divergence-base` format (`kld`,
//! in cmd_eval_kld.rs) and HellaSwag-style multiple choice (`choice`, cmd_eval_choice.rs).

use crate::cmd_eval_choice::ChoiceArgs;
use crate::cmd_eval_kld::KldArgs;
use crate::common::{load_with_lora, LoraArgs, ModelArgs};
use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};
use toy::eval::perplexity::perplexity;
use toy::train::events::{log_eval, now, EvalMetrics};

#[derive(clap::Subcommand)]
pub enum EvalCmd {
    /// Perplexity over chunks of --ctx tokens (second half of each chunk scored).
    Ppl(PplArgs),
    /// Loss along the line between two checkpoints of one shape, and its barrier.
    Lmc(crate::cmd_compare::LmcArgs),
    /// Per-position KL(A||B) and top-1 agreement of two models, and where they drift most.
    Drift(crate::cmd_compare::DriftArgs),
    /// KL divergence against a reference's log-probs (llama-perplexity --kl-divergence):
    /// --save-base writes them, --base scores a model against them.
    Kld(KldArgs),
    /// Multiple-choice accuracy (llama-perplexity --hellaswag's normalised log-likelihood).
    Choice(ChoiceArgs),
    /// A trained image classifier's accuracy (top-1, top-5, per class, confusion matrix).
    Images(crate::cmd_vision::EvalImagesArgs),
}

#[derive(clap::Args)]
pub struct PplArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    device: crate::common::DeviceArgs,
    #[command(flatten)]
    lora: LoraArgs,
    /// Text file to evaluate.
    #[arg(short = 'f', long)]
    file: PathBuf,
    /// Chunk size in tokens.
    #[arg(short = 'c', long, default_value_t = 512)]
    ctx: usize,
    /// Print the result as one JSON object.
    #[arg(long)]
    json: bool,
}

pub fn run(c: EvalCmd) -> Result<()> {
    match c {
        EvalCmd::Ppl(a) => run_ppl(a),
        EvalCmd::Lmc(a) => crate::cmd_compare::run_lmc(a),
        EvalCmd::Drift(a) => crate::cmd_compare::run_drift(a),
        EvalCmd::Kld(a) => crate::cmd_eval_kld::run(a),
        EvalCmd::Choice(a) => crate::cmd_eval_choice::run(a),
        EvalCmd::Images(a) => crate::cmd_vision::eval_images(a),
    }
}

fn run_ppl(a: PplArgs) -> Result<()> {
    a.device.cpu_only("toy eval ppl")?;
    let (model, tok) = load_with_lora(&a.model, &a.lora)?;
    let ids = read_tokens(&tok, &a.file)?;
    let bar = chunk_bar(ids.len() / a.ctx.max(1), "ppl");
    let r = perplexity(&model, &ids, a.ctx, tok.start_bos(), |done, _, ppl| {
        bar.set_position(done as u64);
        bar.set_message(format!("{ppl:.4}"));
    })
    .with_context(|| too_short(&a.file, ids.len(), a.ctx))?;
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

/// The tokens of a text file, with BOS when the model adds one (as llama-perplexity).
pub fn read_tokens(tok: &toy::tokenizer::Tokenizer, file: &Path) -> Result<Vec<u32>> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading '{}'", file.display()))?;
    Ok(tok.encode(&text, true)?)
}

pub fn too_short(file: &Path, n: usize, ctx: usize) -> String {
    let f = file.display();
    format!("'{f}' has {n} tokens, need at least one chunk of {ctx}")
}

/// A progress bar over `n` chunks (or items), with a running figure named `what`.
pub fn chunk_bar(n: usize, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(n as u64);
    let t = format!("{{bar:30}} {{pos}}/{{len}} {what} {{msg}} eta {{eta}}");
    bar.set_style(
        ProgressStyle::with_template(&t).unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
}

/// `--run DIR` must name a run folder; checked before any work.
pub fn check_run(run: &Option<PathBuf>) -> Result<()> {
    match run {
        Some(r) if !r.is_dir() => bail!(
            "run folder '{}' not found (--run takes runs/<id>)",
            r.display()
        ),
        _ => Ok(()),
    }
}

/// `--run DIR`: log `results` as an `eval` event of that run.
pub fn log_to_run(
    run: &Path,
    name: &str,
    model: &Path,
    data: &Path,
    val_loss: f64,
    results: serde_json::Value,
) -> Result<()> {
    let metrics = EvalMetrics {
        name: name.into(),
        model: model.display().to_string(),
        data: data.display().to_string(),
        results,
        time: now(),
    };
    let path = log_eval(run, val_loss as f32, metrics)
        .with_context(|| format!("logging to run '{}'", run.display()))?;
    eprintln!("logged to {}", path.display());
    Ok(())
}
