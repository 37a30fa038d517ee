//! `toy finetune RECIPE [--set key=value]...`: LoRA or a full fine-tune of a base GGUF on
//! SFT data (`toy::finetune`), a run under `runs/` like `toy train`'s, or
//! `toy finetune --resume runs/<id>`. Shows a progress bar (step, loss, tokens/s, ETA) and
//! the held-out loss of the assistant tokens with a greedy reply as evaluations come.

use crate::progress::RunBar;
use anyhow::{bail, Result};
use std::path::PathBuf;
use toy::finetune::recipe::{FinetuneRecipe, Method};
use toy::finetune::run::{finetune, load, Hooks};
use toy::train::events::Event;
use toy::train::run::RunDir;

#[derive(clap::Args)]
pub struct Args {
    /// The recipe (TOML), e.g. recipes/sft-smollm2-lora.toml.
    #[arg(required_unless_present = "resume")]
    recipe: Option<PathBuf>,
    #[command(flatten)]
    device: crate::common::DeviceArgs,
    /// Override a recipe value, e.g. --set finetune.rank=8 (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Folder for the run folders.
    #[arg(long, default_value = "runs")]
    runs_dir: PathBuf,
    /// Continue the run in this folder from its newest checkpoint.
    #[arg(long, conflicts_with_all = ["recipe", "set"])]
    resume: Option<PathBuf>,
    /// Stop after this many steps (as an interruption would; resume continues).
    #[arg(long, hide = true)]
    stop_after: Option<usize>,
    /// Append every batch to this JSONL file (inputs, targets), for a reference trainer.
    #[arg(long, value_name = "FILE")]
    dump_batches: Option<PathBuf>,
    /// Also checkpoint the starting weights (ckpt-000000), e.g. the initial adapter.
    #[arg(long)]
    checkpoint_start: bool,
}

pub fn run(a: Args) -> Result<()> {
    a.device.cpu_only("toy finetune")?;
    let (existing, recipe) = match (&a.resume, &a.recipe) {
        (Some(dir), _) => {
            let cfg = dir.join("config.toml");
            if !cfg.is_file() {
                bail!("{} is not a run folder (no config.toml)", dir.display());
            }
            let id = dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            (
                Some(RunDir {
                    id,
                    path: dir.clone(),
                }),
                FinetuneRecipe::load(&cfg, &[])?,
            )
        }
        (None, Some(path)) => (None, FinetuneRecipe::load(path, &a.set)?),
        (None, None) => bail!("give a recipe, or --resume runs/<id>"),
    };
    let world = crate::ranks::world();
    let root = world.is_root();
    crate::ranks::check_same(&recipe.to_toml())?;
    world.check_batch(recipe.train.batch)?;
    // the base and the data are checked before a run folder is made for them
    let d = load(&recipe)?;
    if root {
        eprintln!(
            "{} samples to train on ({} trainable tokens{}), {} held out",
            d.train.samples.len(),
            d.train.trainable_tokens,
            match (d.train.skipped_long, d.train.truncated) {
                (0, 0) => String::new(),
                (s, t) => format!("; {s} too long skipped, {t} truncated"),
            },
            d.val.samples.len()
        );
    }
    drop(d);
    let resume = existing.is_some();
    let run = match existing {
        Some(run) => run,
        None => {
            let path = crate::ranks::root_makes(|| {
                let toml = recipe.to_toml();
                Ok(RunDir::create_named(&a.runs_dir, &recipe.name, &toml)?.path)
            })?;
            let id = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            RunDir { id, path }
        }
    };
    let method = match recipe.finetune.method {
        Method::Lora => format!(
            "LoRA r={} alpha={} on {}",
            recipe.finetune.rank,
            recipe.finetune.alpha,
            recipe.targets().join(",")
        ),
        Method::Full => "full fine-tune".to_string(),
    };
    if root {
        eprintln!(
            "run {} ({method} of {}, {} steps of {} x {} tokens{}){}",
            run.path.display(),
            recipe.base.model.display(),
            recipe.train.steps,
            recipe.train.batch * recipe.train.grad_accum,
            recipe.train.ctx,
            crate::ranks::over_ranks(),
            if resume { ", resuming" } else { "" }
        );
    }
    let mut bar = RunBar::new(recipe.train.steps);
    let mut observe = |e: &Event| {
        bar.observe(e, |step, val_loss, reply| {
            let ll = -val_loss;
            format!("step {step}: held-out assistant loss {val_loss:.4} (mean log-likelihood {ll:.4})  reply: {reply:?}")
        })
    };
    let hooks = Hooks {
        stop_after: a.stop_after,
        dump_batches: a.dump_batches.clone(),
        checkpoint_at_start: a.checkpoint_start,
        ranks: world.clone(),
    };
    let t0 = std::time::Instant::now();
    let outcome = finetune(&run, &recipe, resume, &hooks, &mut observe);
    bar.pb.finish_and_clear();
    let outcome = outcome?;
    if !root {
        return Ok(());
    }
    crate::ranks::report_sums(t0.elapsed().as_secs_f64());
    println!(
        "{} after {} steps: loss {:.4}{}",
        run.path.display(),
        outcome.steps_done,
        outcome.last_loss,
        if outcome.finished { "" } else { " (stopped)" }
    );
    if let Some(c) = outcome.last_checkpoint {
        let base = recipe.base.model.display();
        match recipe.finetune.method {
            Method::Lora => println!(
                "adapter: {}\ntry: toy chat -m {base} --lora {}",
                c.display(),
                c.display()
            ),
            Method::Full => println!("model: {}\ntry: toy chat -m {}", c.display(), c.display()),
        }
    }
    Ok(())
}
