//! `toy eval choice -f FILE.jsonl`: multiple-choice accuracy by llama-perplexity's
//! `--hellaswag` method (llama.cpp 0c1e570; see toy::eval::choice), with its standard error.

use crate::cmd_eval::{check_run, chunk_bar, log_to_run};
use crate::common::{load_with_lora, LoraArgs, ModelArgs};
use anyhow::{Context, Result};
use std::path::PathBuf;
use toy::eval::choice::{evaluate, parse_items};

#[derive(clap::Args)]
pub struct ChoiceArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    lora: LoraArgs,
    /// JSON lines of {"context": "...", "endings": ["...", ...], "label": N}.
    #[arg(short = 'f', long)]
    file: PathBuf,
    /// Print one JSON object (with every item's scores).
    #[arg(long)]
    json: bool,
    /// Log the results into this run folder (runs/<id>) as an `eval` event.
    #[arg(long, value_name = "DIR")]
    run: Option<PathBuf>,
}

pub fn run(a: ChoiceArgs) -> Result<()> {
    check_run(&a.run)?;
    let f = a.file.display();
    let text = std::fs::read_to_string(&a.file).with_context(|| format!("reading '{f}'"))?;
    let items = parse_items(&text).with_context(|| format!("'{f}'"))?;
    let (model, tok) = load_with_lora(&a.model, &a.lora)?;
    let bar = chunk_bar(items.len(), "acc");
    let r = evaluate(&model, &tok, &items, |done, _, correct| {
        bar.set_position(done as u64);
        bar.set_message(format!("{:.1}%", 100.0 * correct as f64 / done as f64));
    })
    .with_context(|| format!("'{f}'"))?;
    bar.finish_and_clear();
    let v = serde_json::to_value(&r)?;
    if a.json {
        println!("{v}");
    } else {
        println!(
            "accuracy {:.2}% +/- {:.2}% ({} of {} items; chance {:.2}%)",
            100.0 * r.accuracy,
            100.0 * r.stderr,
            r.correct,
            r.items,
            100.0 * r.chance
        );
    }
    if let Some(run) = &a.run {
        let mut summary = v.clone();
        if let Some(o) = summary.as_object_mut() {
            o.remove("per_item");
        }
        log_to_run(run, "choice", &a.model.model, &a.file, r.gold_nll, summary)?;
    }
    Ok(())
}
