//! `toy generate`: text after a prompt, streamed to stdout, or one JSON object.

use crate::common::{load_with_lora, open_gguf, LoraArgs, ModelArgs, SamplingArgs};
use anyhow::{Context, Result};
use std::io::Write;
use toy::infer::constrain::{Constraint, Grammars};
use toy::infer::generate::{generate_guided, GenerateOptions};
use toy::infer::sampler::Sampler;
use toy::infer::speculative::{check_draft_vocab, generate_speculative, Drafter};
use toy::model::Model;

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
    #[command(flatten)]
    spec: crate::common::SpecArgs,
    /// Constrain the output to the JSON schema in this file (`{"type":"object"}`: any object).
    #[arg(long, group = "constraint")]
    json_schema: Option<std::path::PathBuf>,
    /// Constrain the output to the grammar in this file (llguidance's Lark syntax).
    #[arg(long, group = "constraint")]
    grammar: Option<std::path::PathBuf>,
    /// Constrain the output to match this regular expression.
    #[arg(long, group = "constraint")]
    regex: Option<String>,
    /// Print one JSON object instead of streaming text.
    #[arg(long)]
    json: bool,
}

/// The constraint the flags ask for, read and parsed.
fn constraint(a: &Args) -> Result<Option<Constraint>> {
    let read = |p: &std::path::Path| {
        std::fs::read_to_string(p).with_context(|| format!("reading '{}'", p.display()))
    };
    Ok(if let Some(p) = &a.json_schema {
        let schema = serde_json::from_str(&read(p)?)
            .with_context(|| format!("'{}' is not JSON (expected a JSON schema)", p.display()))?;
        Some(Constraint::JsonSchema(schema))
    } else if let Some(p) = &a.grammar {
        Some(Constraint::Lark(read(p)?))
    } else {
        a.regex.clone().map(Constraint::Regex)
    })
}

pub fn run(a: Args) -> Result<()> {
    let constraint = constraint(&a)?;
    let (model, tok) = load_with_lora(&a.model, &a.lora)?;
    let mut guide = match &constraint {
        Some(c) => Some(Grammars::new(&tok, model.cfg.vocab)?.compile(c)?),
        None => None,
    };
    let ids = tok.encode(&a.prompt, true)?;
    let mut state = model.new_state(a.ctx, 512);
    let opts = GenerateOptions {
        max_tokens: a.n_predict,
        stop: a.stop.clone(),
        sampler: a.sampling.config(&tok),
    };
    let seed = opts.sampler.seed;
    let mut out = std::io::stdout().lock();
    if !a.json {
        write!(out, "{}", a.prompt)?;
        out.flush()?;
    }
    let show = |s: &str| {
        if !a.json {
            let _ = write!(out, "{s}");
            let _ = out.flush();
        }
    };
    let draft_model = match &a.spec.draft {
        Some(p) => {
            let f = open_gguf(p)?;
            check_draft_vocab(&*a.model.gguf()?, &f)
                .with_context(|| format!("draft '{}'", p.display()))?;
            let m = Model::from_gguf_draft(f, a.spec.draft_as_stored);
            Some(m.with_context(|| format!("loading draft '{}'", p.display()))?)
        }
        None => None,
    };
    let mut drafter = match (&draft_model, &a.spec.spec) {
        (Some(m), _) => {
            // the draft samples with the target's settings from a generator of its own
            let mut cfg = opts.sampler.clone();
            cfg.seed ^= 0x9E37_79B9_7F4A_7C15;
            Some(Drafter::Model {
                model: m,
                state: Box::new(m.new_state(a.ctx, 512)),
                fed: Vec::new(),
                sampler: Box::new(Sampler::new(cfg)),
                p_min: a.spec.draft_p_min,
            })
        }
        (None, Some(_)) => Some(Drafter::Ngram { n: 3 }),
        (None, None) => None,
    };
    let (g, spec) = match drafter.as_mut() {
        None => {
            let g = generate_guided(&model, &mut state, &tok, &ids, &opts, guide.as_mut(), show)?;
            (g, None)
        }
        Some(d) => {
            let (g, st) = generate_speculative(
                &model,
                &mut state,
                &tok,
                &ids,
                &opts,
                d,
                a.spec.draft_max,
                a.spec.tune(),
                guide.as_mut(),
                show,
            )?;
            (g, Some(st))
        }
    };
    drop(out);
    let mut out = std::io::stdout().lock();
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
            "spec": spec,
            "constraint": guide.as_ref().map(|g| {
                let (masks, us) = g.mask_cost();
                serde_json::json!({"masks": masks, "mask_us_mean": us})
            }),
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
        if let Some(st) = spec {
            eprintln!(
                "[speculative: {} drafted, {} accepted ({:.0}%), {} target rounds]",
                st.drafted,
                st.accepted,
                100.0 * st.accepted as f64 / st.drafted.max(1) as f64,
                st.rounds
            );
        }
    }
    Ok(())
}
