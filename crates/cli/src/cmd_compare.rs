//! `toy eval lmc` and `toy eval drift`: two checkpoints compared on one text, by the loss
//! along the line between them (`toy::eval::lmc`) and by per-position drift
//! (`toy::eval::drift`).

use crate::cmd_eval::{check_run, log_to_run};
use crate::common::{load, ModelArgs};
use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};
use toy::eval::drift::{drift, Drift};
use toy::eval::drift_grad::drift_grad;
use toy::eval::lmc::{lmc, Endpoints, Lmc};
use toy::eval::lmc_plot::plot_lmc;
use toy::tokenizer::Tokenizer;

#[derive(clap::Args)]
pub struct LmcArgs {
    /// The first checkpoint (alpha = 0); its tokenizer reads the text.
    a: PathBuf,
    /// The second checkpoint (alpha = 1), of the same shape.
    b: PathBuf,
    /// Text file to evaluate the loss on.
    #[arg(short = 'f', long)]
    file: PathBuf,
    #[arg(short = 'c', long, default_value_t = 256)]
    ctx: usize,
    /// Points on the line, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "0,0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9,1"
    )]
    alphas: Vec<f64>,
    /// Draw the curve into this PNG.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Log the curve into this run folder (runs/<id>) as an `eval` event.
    #[arg(long)]
    run: Option<PathBuf>,
    /// Print the result as one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
pub struct DriftArgs {
    /// The reference model A (KL(A‖B) is measured); its tokenizer reads the text.
    a: PathBuf,
    /// The model B.
    b: PathBuf,
    /// Text file to measure the drift on.
    #[arg(short = 'f', long)]
    file: PathBuf,
    #[arg(short = 'c', long, default_value_t = 256)]
    ctx: usize,
    /// How many of the most drifting positions to show.
    #[arg(long, default_value_t = 10)]
    top: usize,
    /// Which tensors cause the drift: first-order shares at the midpoint, ranked, and the
    /// exact drift of A with only each of the top --swaps tensors from B.
    #[arg(long)]
    grad: bool,
    #[arg(long, default_value_t = 5)]
    swaps: usize,
    /// Log the results into this run folder (runs/<id>) as an `eval` event.
    #[arg(long)]
    run: Option<PathBuf>,
    /// Print the result as one JSON object.
    #[arg(long)]
    json: bool,
}

/// `--run`: log the comparison of `a` with `b` on `file` as an `eval` event of that run.
fn log_pair(
    run: &Option<PathBuf>,
    name: &str,
    (a, b): (&Path, &Path),
    file: &Path,
    loss: f64,
    r: &impl serde::Serialize,
) -> Result<()> {
    let Some(run) = run else { return Ok(()) };
    let models = PathBuf::from(format!("{} -> {}", a.display(), b.display()));
    log_to_run(run, name, &models, file, loss, serde_json::to_value(r)?)
}

/// The context of an error over `n` tokens of `file` in chunks of `ctx`.
fn at_ctx(file: &Path, n: usize, ctx: usize) -> String {
    format!("'{}': {n} tokens at ctx {ctx}", file.display())
}

fn bar(len: usize, what: &str) -> ProgressBar {
    let b = ProgressBar::new(len as u64);
    let t = format!("{{bar:30}} {what} {{pos}}/{{len}} {{msg}} eta {{eta}}");
    b.set_style(ProgressStyle::with_template(&t).unwrap_or_else(|_| ProgressStyle::default_bar()));
    b
}

fn tokens_of(tok: &Tokenizer, file: &PathBuf) -> Result<Vec<u32>> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading '{}'", file.display()))?;
    Ok(tok.encode(&text, true)?)
}

pub fn run_lmc(a: LmcArgs) -> Result<()> {
    check_run(&a.run)?;
    let (fa, fb) = (
        crate::common::open_gguf(&a.a)?,
        crate::common::open_gguf(&a.b)?,
    );
    let tok =
        Tokenizer::from_gguf(&fa).with_context(|| format!("tokenizer of '{}'", a.a.display()))?;
    let ids = tokens_of(&tok, &a.file)?;
    let ends = Endpoints::new(fa, &fb)
        .with_context(|| format!("'{}' and '{}'", a.a.display(), a.b.display()))?;
    drop(fb);
    let pb = bar(a.alphas.len(), "alpha");
    let r = lmc(
        &ends,
        &ids,
        a.ctx,
        tok.start_bos(),
        &a.alphas,
        |done, _, alpha, loss| {
            pb.set_position(done as u64);
            pb.set_message(format!("loss({alpha:.2}) = {loss:.4}"));
        },
    )
    .with_context(|| at_ctx(&a.file, ids.len(), a.ctx))?;
    pb.finish_and_clear();
    if let Some(p) = &a.plot {
        plot_lmc(&r, "loss between checkpoints", p)?;
    }
    log_pair(
        &a.run,
        "lmc",
        (&a.a, &a.b),
        &a.file,
        r.points.last().map_or(0.0, |p| p.loss),
        &r,
    )?;
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        print_lmc(&r);
        if let Some(p) = &a.plot {
            println!("plot: {}", p.display());
        }
    }
    Ok(())
}

fn print_lmc(r: &Lmc) {
    println!("{:>6}  {:>9}  {:>9}", "alpha", "loss", "ppl");
    for p in &r.points {
        println!("{:>6.3}  {:>9.5}  {:>9.4}", p.alpha, p.loss, p.loss.exp());
    }
    println!(
        "barrier {:.5} nats at alpha {:.3} (loss above the line between the ends)",
        r.barrier, r.barrier_alpha
    );
}

fn run_drift_grad(a: &DriftArgs) -> Result<()> {
    let (fa, fb) = (
        crate::common::open_gguf(&a.a)?,
        crate::common::open_gguf(&a.b)?,
    );
    let tok = Tokenizer::from_gguf(&fa)?;
    let ids = tokens_of(&tok, &a.file)?;
    let pb = ProgressBar::new_spinner();
    let r = drift_grad(&fa, &fb, &ids, a.ctx, a.swaps, |what| {
        pb.set_message(what.to_string())
    })
    .with_context(|| format!("'{}' against '{}'", a.a.display(), a.b.display()))?;
    pb.finish_and_clear();
    log_pair(&a.run, "drift-grad", (&a.a, &a.b), &a.file, r.drift, &r)?;
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
        return Ok(());
    }
    println!(
        "drift KL(A||B) {:.6} per position; first-order shares sum to {:.6} ({:+.1}%)",
        r.drift,
        r.first_order_sum,
        100.0 * (r.first_order_sum - r.drift) / r.drift.max(1e-30)
    );
    println!(
        "{:<36} {:>12} {:>7} {:>14}",
        "tensor", "first order", "share", "swapped alone"
    );
    for t in r.tensors.iter().take(a.top.max(a.swaps)) {
        let sw = t.swapped.map_or("-".to_string(), |s| format!("{s:.6}"));
        let share = 100.0 * t.first_order / r.first_order_sum.abs().max(1e-30);
        println!(
            "{:<36} {:>12.6} {:>6.1}% {:>14}",
            t.name, t.first_order, share, sw
        );
    }
    Ok(())
}

pub fn run_drift(a: DriftArgs) -> Result<()> {
    check_run(&a.run)?;
    if a.grad {
        return run_drift_grad(&a);
    }
    let (ma, tok) = load(&ModelArgs { model: a.a.clone() })?;
    let (mb, _) = load(&ModelArgs { model: a.b.clone() })?;
    let ids = tokens_of(&tok, &a.file)?;
    let pb = bar(ids.len() / a.ctx.max(1), "chunk");
    let r = drift(&ma, &mb, &ids, a.ctx, a.top, |done, _| {
        pb.set_position(done as u64)
    })
    .with_context(|| at_ctx(&a.file, ids.len(), a.ctx))?;
    pb.finish_and_clear();
    log_pair(&a.run, "drift", (&a.a, &a.b), &a.file, r.mean_kl, &r)?;
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        print_drift(&r, &tok, &ids);
    }
    Ok(())
}

fn print_drift(r: &Drift, tok: &Tokenizer, ids: &[u32]) {
    println!(
        "{} positions: KL(A||B) mean {:.6}, median {:.6}, p99 {:.6}, max {:.6}; top-1 agreement {:.2}%",
        r.positions,
        r.mean_kl,
        r.median_kl,
        r.p99_kl,
        r.max_kl,
        100.0 * r.top1_agree
    );
    let bins: Vec<String> = r
        .histogram
        .iter()
        .map(|(lo, n)| format!(">={lo:.0e}: {n}"))
        .collect();
    println!("KL histogram: {}", bins.join(", "));
    let show = |id: u32| format!("{:?}", tok.decode(&[id]));
    let tops = |t: &[(u32, f32)]| {
        t.iter()
            .map(|(id, p)| format!("{} {:.3}", show(*id), p))
            .collect::<Vec<_>>()
            .join(", ")
    };
    for (i, w) in r.worst.iter().enumerate() {
        let ctx = &ids[w.index.saturating_sub(12)..w.index];
        println!(
            "\n#{} KL {:.4} at token {}: ...{:?} -> {}",
            i + 1,
            w.kl,
            w.index,
            tok.decode(ctx),
            show(w.next)
        );
        println!("   A: {}", tops(&w.top_a));
        println!("   B: {}", tops(&w.top_b));
    }
}
