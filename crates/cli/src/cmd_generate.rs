//! `toy generate`: text after a prompt, streamed to stdout, or one JSON object.

use crate::common::{load_with_lora, LoraArgs, ModelArgs, SamplingArgs};
use anyhow::Result;
use std::io::Write;
use toy::infer::generate::{generate, GenerateOptions};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    lora: LoraArgs,
    /// The prompt.
    #[arg(short = 'p', long)]
    prompt: String,
    /// Most tokens to generate.
    #[arg(short = 'n', long = "n-predict", default_value_t = 128)]
    n_predict: usize,
    /// Context size (KV cache positions).
    #[arg(short = 'c', long, default_value_t = 2048)]
    ctx: usize,
    /// Stop when this text appears (repeatable); it is not printed.
    #[arg(long)]
    stop: Vec<String>,
    #[command(flatten)]
    sampling: SamplingArgs,
    /// Print one JSON object instead of streaming text.
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> Result<()> {
    let (model, tok) = load_with_lora(&a.model, &a.lora)?;
    let ids = tok.encode(&a.prompt, true)?;
    let mut state = model.new_state(a.ctx, 512);
    let opts = GenerateOptions {
        max_tokens: a.n_predict,
        stop: a.stop.clone(),
        sampler: a.sampling.config(),
    };
    let seed = opts.sampler.seed;
    let mut out = std::io::stdout().lock();
    if !a.json {
        write!(out, "{}", a.prompt)?;
        out.flush()?;
    }
    let g = generate(&model, &mut state, &tok, &ids, &opts, |s| {
        if !a.json {
            let _ = write!(out, "{s}");
            let _ = out.flush();
        }
    })?;
    if a.json {
        let v = serde_json::json!({
            "prompt_ids": ids,
            "ids": g.tokens,
            "text": g.text,
            "finish_reason": g.finish_reason,
            "prompt_tokens": g.prompt_tokens,
            "completion_tokens": g.tokens.len(),
            "prefill_tok_s": g.prefill_tok_s(),
            "decode_tok_s": g.decode_tok_s(),
            "seed": seed,
        });
        writeln!(out, "{v}")?;
    } else {
        writeln!(out)?;
        eprintln!(
            "\n[{} prompt tokens, {:.1} tok/s prefill; {} generated, {:.1} tok/s decode; finish: {:?}; seed {seed}]",
            g.prompt_tokens,
            g.prefill_tok_s(),
            g.tokens.len(),
            g.decode_tok_s(),
            g.finish_reason
        );
    }
    Ok(())
}
