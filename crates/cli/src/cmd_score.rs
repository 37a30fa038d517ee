//! `toy score`: teacher-forced log-probabilities of a continuation after a prompt.

use crate::common::{load_with_lora, parse_ids, LoraArgs, ModelArgs};
use anyhow::{bail, Result};
use toy::eval::score::score;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    lora: LoraArgs,
    /// Prompt token ids, comma-separated.
    #[arg(long, conflicts_with = "prompt")]
    prompt_ids: Option<String>,
    /// Continuation token ids, comma-separated.
    #[arg(long, conflicts_with = "continuation")]
    continuation_ids: Option<String>,
    /// Prompt text (tokenized).
    #[arg(long)]
    prompt: Option<String>,
    /// Continuation text (tokenized).
    #[arg(long)]
    continuation: Option<String>,
    /// How many most likely tokens to list per position.
    #[arg(long, default_value_t = 5)]
    top: usize,
    /// Print the result as one JSON object.
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> Result<()> {
    let (model, tok) = load_with_lora(&a.model, &a.lora)?;
    let ids = |ids: &Option<String>, text: &Option<String>, what: &str| -> Result<Vec<u32>> {
        match (ids, text) {
            (Some(s), _) => parse_ids(s),
            (None, Some(t)) => Ok(tok.encode(t, what == "prompt")?),
            (None, None) => bail!("give --{what}-ids or --{what}"),
        }
    };
    let prompt = ids(&a.prompt_ids, &a.prompt, "prompt")?;
    let cont = ids(&a.continuation_ids, &a.continuation, "continuation")?;
    if prompt.is_empty() || cont.is_empty() {
        bail!("prompt and continuation must each hold at least one token");
    }
    let mut state = model.new_state(prompt.len() + cont.len(), 512);
    let scores = score(&model, &mut state, &prompt, &cont, a.top)?;
    if a.json {
        println!("{}", serde_json::json!({ "tokens": scores }));
    } else {
        for s in &scores {
            let top: Vec<String> = s
                .top
                .iter()
                .map(|t| format!("{:?} {:.3}", tok.piece(t.id), t.logprob))
                .collect();
            println!(
                "{:>7} {:<16} {:>9.4}   top: {}",
                s.id,
                format!("{:?}", tok.piece(s.id)),
                s.logprob,
                top.join(", ")
            );
        }
        let total: f64 = scores.iter().map(|s| s.logprob).sum();
        println!("total logprob {total:.4} over {} tokens", scores.len());
    }
    Ok(())
}
