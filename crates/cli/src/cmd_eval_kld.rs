//! `toy eval kld`: KL divergence against a base, interoperable with llama.cpp 0c1e570's
//! `llama-perplexity` (tools/perplexity/perplexity.cpp): `--save-base FILE` writes the
//! reference's log-probs as `--kl-divergence-base FILE` does; `--base FILE` reads one (toy's
//! or llama.cpp's) and prints what `--kl-divergence` prints, in its layout.

use crate::cmd_eval::{check_run, chunk_bar, log_to_run, read_tokens, too_short};
use crate::common::{load_with_lora, LoraArgs, ModelArgs};
use anyhow::{bail, Context, Result};
use serde_json::json;
use std::path::PathBuf;
use toy::eval::kld::{Est, KldStats, Spread};
use toy::eval::kld_base::BaseReader;
use toy::eval::kld_run::{kl_divergence, save_base};

#[derive(clap::Args)]
pub struct KldArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    lora: LoraArgs,
    /// Text to evaluate: needed with --save-base; with --base (which holds its tokens) it is
    /// optional and checked against the base's tokens.
    #[arg(short = 'f', long)]
    file: Option<PathBuf>,
    /// Chunk size in tokens for --save-base (default 512); with --base, the base's, and an
    /// error if it differs.
    #[arg(short = 'c', long)]
    ctx: Option<usize>,
    /// Write the model's log-probs of the scored half of every chunk to this file, in
    /// llama-perplexity's --kl-divergence-base format.
    #[arg(long, value_name = "BASE", conflicts_with = "base")]
    save_base: Option<PathBuf>,
    /// Score the model against this base (from --save-base or llama-perplexity).
    #[arg(long, value_name = "BASE")]
    base: Option<PathBuf>,
    /// Evaluate only the first N chunks (llama-perplexity's --chunks).
    #[arg(long, value_name = "N")]
    chunks: Option<usize>,
    /// Print one JSON object of every statistic.
    #[arg(long)]
    json: bool,
    /// Log the results into this run folder (runs/<id>) as an `eval` event.
    #[arg(long, value_name = "DIR")]
    run: Option<PathBuf>,
}

pub fn run(a: KldArgs) -> Result<()> {
    check_run(&a.run)?;
    match (&a.save_base, &a.base) {
        (Some(out), _) => run_save(&a, out.clone()),
        (None, Some(base)) => run_score(&a, base.clone()),
        (None, None) => {
            bail!("give --save-base BASE (write a base) or --base BASE (score against one)")
        }
    }
}

fn run_save(a: &KldArgs, out: PathBuf) -> Result<()> {
    let Some(file) = &a.file else {
        bail!("--save-base needs the text to evaluate: -f FILE");
    };
    let ctx = a.ctx.unwrap_or(512);
    let (model, tok) = load_with_lora(&a.model, &a.lora)?;
    let ids = read_tokens(&tok, file)?;
    let bar = chunk_bar(
        (ids.len() / ctx.max(1)).min(a.chunks.unwrap_or(usize::MAX)),
        "ppl",
    );
    let r = save_base(
        &model,
        &ids,
        ctx,
        a.chunks,
        tok.start_bos(),
        &out,
        |done, _, ppl| {
            bar.set_position(done as u64);
            bar.set_message(format!("{ppl:.4}"));
        },
    )
    .with_context(|| format!("writing base '{}'", out.display()))
    .with_context(|| too_short(file, ids.len(), ctx))?;
    bar.finish_and_clear();
    let v = json!({
        "base": out.display().to_string(), "n_ctx": ctx, "n_vocab": model.cfg.vocab,
        "chunks": r.chunks, "tokens": r.tokens, "ppl": r.ppl, "stderr": r.stderr,
    });
    if a.json {
        println!("{v}");
    } else {
        println!(
            "wrote {} ({} chunks of {ctx} over {} tokens): perplexity {:.4} +/- {:.5}",
            out.display(),
            r.chunks,
            model.cfg.vocab,
            r.ppl,
            r.stderr
        );
    }
    if let Some(run) = &a.run {
        log_to_run(run, "kld-base", &a.model.model, file, r.ppl.ln(), v)?;
    }
    Ok(())
}

fn run_score(a: &KldArgs, base_path: PathBuf) -> Result<()> {
    let mut base = BaseReader::open(&base_path)?;
    let h = base.header.clone();
    if let Some(ctx) = a.ctx.filter(|&c| c != h.n_ctx) {
        bail!(
            "--ctx {ctx} does not match '{}', made with chunks of {} (leave --ctx out to use the base's)",
            base_path.display(),
            h.n_ctx
        );
    }
    let (model, tok) = load_with_lora(&a.model, &a.lora)?;
    if let Some(file) = &a.file {
        let ids = read_tokens(&tok, file)?;
        let n = h.tokens.len();
        if let Some(i) = (0..n).find(|&i| ids.get(i) != Some(&h.tokens[i])) {
            bail!(
                "'{}' is not the text of '{}': token {i} differs (the text has {} tokens, the base {n})",
                file.display(),
                base_path.display(),
                ids.len()
            );
        }
    }
    let total = h.n_chunk.min(a.chunks.unwrap_or(usize::MAX).max(1));
    let bar = chunk_bar(total, "kld");
    let s = kl_divergence(
        &model,
        &mut base,
        a.chunks,
        tok.start_bos(),
        |done, _, acc| {
            let (ppl, kld, same) = acc.running();
            bar.set_position(done as u64);
            bar.set_message(format!(
                "{kld:.5} ppl {ppl:.4} same top {:.2}%",
                100.0 * same
            ));
        },
    )
    .with_context(|| {
        format!(
            "scoring '{}' against '{}'",
            a.model.model.display(),
            base_path.display()
        )
    })?;
    bar.finish_and_clear();
    let v = serde_json::to_value(&s)?;
    if a.json {
        println!("{v}");
    } else {
        print!("{}", report(&s));
    }
    if let Some(run) = &a.run {
        let data = a.file.clone().unwrap_or(base_path);
        log_to_run(run, "kld", &a.model.model, &data, s.ppl_q.value.ln(), v)?;
    }
    Ok(())
}

/// llama-perplexity's closing sections, line for line (probabilities in %).
fn report(s: &KldStats) -> String {
    let pm = |e: Est| format!("{:10.6} ± {:10.6}", e.value, e.unc);
    let mut o = format!(
        "{} chunks of {}, {} tokens scored\n\n====== Perplexity statistics ======\n",
        s.chunks, s.n_ctx, s.tokens
    );
    o += &format!("Mean PPL(Q)                   : {}\n", pm(s.ppl_q));
    o += &format!("Mean PPL(base)                : {}\n", pm(s.ppl_base));
    o += &format!(
        "Cor(ln(PPL(Q)), ln(PPL(base))): {:6.2}%\n",
        100.0 * s.cor_ln_ppl
    );
    o += &format!("Mean ln(PPL(Q)/PPL(base))     : {}\n", pm(s.ln_ppl_ratio));
    o += &format!("Mean PPL(Q)/PPL(base)         : {}\n", pm(s.ppl_ratio));
    o += &format!("Mean PPL(Q)-PPL(base)         : {}\n", pm(s.ppl_diff));
    o += "\n====== KL divergence statistics ======\n";
    o += &format!("Mean    KLD: {}\n", pm(s.kld_mean));
    let k = &s.kld;
    for (name, x) in [
        ("Maximum", k.max),
        ("99.9%  ", k.p99_9),
        ("99.0%  ", k.p99),
        ("95.0%  ", k.p95),
        ("90.0%  ", k.p90),
        ("Median ", k.median),
        ("10.0%  ", k.p10),
        (" 5.0%  ", k.p5),
        (" 1.0%  ", k.p1),
        (" 0.1%  ", k.p0_1),
        ("Minimum", k.min),
    ] {
        o += &format!("{name} KLD: {x:10.6}\n");
    }
    o += "\n====== Token probability statistics ======\n";
    let (m, d) = (s.delta_p_mean, &s.delta_p);
    o += &format!(
        "Mean    Δp: {:6.3} ± {:5.3} %\n",
        100.0 * m.value,
        100.0 * m.unc
    );
    for (name, x) in delta_p_rows(d) {
        o += &format!("{name} Δp: {:6.3}%\n", 100.0 * x);
    }
    let (r, t) = (s.delta_p_rms, s.same_top_p);
    o += &format!(
        "RMS Δp    : {:6.3} ± {:5.3} %\n",
        100.0 * r.value,
        100.0 * r.unc
    );
    o += &format!(
        "Same top p: {:6.3} ± {:5.3} %\n",
        100.0 * t.value,
        100.0 * t.unc
    );
    o
}

fn delta_p_rows(d: &Spread) -> [(&'static str, f64); 13] {
    [
        ("Maximum", d.max),
        ("99.9%  ", d.p99_9),
        ("99.0%  ", d.p99),
        ("95.0%  ", d.p95),
        ("90.0%  ", d.p90),
        ("75.0%  ", d.p75),
        ("Median ", d.median),
        ("25.0%  ", d.p25),
        ("10.0%  ", d.p10),
        (" 5.0%  ", d.p5),
        (" 1.0%  ", d.p1),
        (" 0.1%  ", d.p0_1),
        ("Minimum", d.min),
    ]
}
