//! `toy train RECIPE [--set key=value]...`: a new run under `runs/`, or
//! `toy train --resume runs/<id>` to continue one from its newest checkpoint, or
//! `toy train RECIPE --init-from DONOR.gguf` to start the recipe's model from a donor. Shows a
//! progress bar (step, loss, tokens/s, ETA) and the evaluations as they come.

use crate::progress::RunBar;
use anyhow::{bail, Result};
use std::path::PathBuf;
use toy::train::events::Event;
use toy::train::recipe::Recipe;
use toy::train::run::RunDir;
use toy::train::trainer::{ensure_data, train, Hooks};

#[derive(clap::Args)]
pub struct Args {
    /// The recipe (TOML), e.g. recipes/tiny.toml.
    #[arg(required_unless_present = "resume")]
    recipe: Option<PathBuf>,
    /// Override a recipe value, e.g. --set optim.lr=1e-3 (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    #[command(flatten)]
    device: crate::common::DeviceArgs,
    /// Folder for the run folders.
    #[arg(long, default_value = "runs")]
    runs_dir: PathBuf,
    /// Continue the run in this folder from its newest checkpoint.
    #[arg(long, conflicts_with_all = ["recipe", "set"])]
    resume: Option<PathBuf>,
    /// Stop after this many steps (as an interruption would; resume continues).
    #[arg(long, hide = true)]
    stop_after: Option<usize>,
    /// Start from this donor GGUF (llama) instead of a fresh init: a model of the recipe's
    /// shape, wider (function-preserving), narrower (projected) or deeper (identity blocks).
    #[arg(long, value_name = "DONOR.gguf", conflicts_with = "resume")]
    init_from: Option<PathBuf>,
    /// Also checkpoint the initial weights (ckpt-000000), e.g. to start PyTorch from them.
    #[arg(long)]
    checkpoint_start: bool,
    /// Tests of a rank's death: RANK:STEP aborts that rank at the start of that step.
    #[arg(long, hide = true, value_name = "RANK:STEP", value_parser = rank_step)]
    die_at: Option<(usize, usize)>,
}

fn rank_step(s: &str) -> std::result::Result<(usize, usize), String> {
    let (r, t) = s.split_once(':').ok_or("expected RANK:STEP")?;
    let n = |x: &str| x.parse::<usize>().map_err(|e| format!("{x:?}: {e}"));
    Ok((n(r)?, n(t)?))
}

/// A recipe with a `[vit]` table trains the image classifier (`toy::vision`).
fn is_vit(path: &std::path::Path) -> bool {
    std::fs::read_to_string(path).is_ok_and(|t| toy::vision::train::is_vit_recipe(&t))
}

fn run_vit(a: &Args, path: &std::path::Path) -> Result<()> {
    use anyhow::Context;
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let what = format!("recipe {}", path.display());
    let recipe = toy::vision::train::VitRecipe::parse(&text, &what, &a.set)
        .map_err(|e| anyhow::anyhow!("{what}: {e}"))?;
    if !recipe.data.dir.join("meta.json").exists() {
        bail!(
            "no image shards in {} (make them with `toy data images --out {}`)",
            recipe.data.dir.display(),
            recipe.data.dir.display()
        );
    }
    let run = match &a.resume {
        Some(dir) => dir.clone(),
        None => RunDir::create_named(&a.runs_dir, &recipe.name, &recipe.to_toml())?.path,
    };
    let c = &recipe.vit;
    eprintln!(
        "run {} (ViT {}x{} patch {}, width {}, {} blocks, {} heads, {} pooling, {:.2}M parameters; {} steps of {} images){}",
        run.display(),
        c.image,
        c.image,
        c.patch,
        c.width,
        c.depth,
        c.heads,
        c.pool.name(),
        c.n_params() as f64 / 1e6,
        recipe.train.steps,
        recipe.train.batch,
        if a.resume.is_some() { ", resuming" } else { "" }
    );
    let mut bar = RunBar::new(recipe.train.steps);
    let hooks = toy::vision::train::VitHooks {
        resume: a.resume.is_some(),
        stop_after: a.stop_after,
        checkpoint_start: a.checkpoint_start,
    };
    let out = toy::vision::train::train(&recipe, &run, &hooks, |e| {
        bar.observe(e, |step, loss, sample| {
            format!("step {step}: val loss {loss:.4}, {sample}")
        })
    });
    bar.pb.finish_and_clear();
    let out = out.map_err(|e| anyhow::anyhow!(e))?;
    println!(
        "{} after {} steps: val accuracy {:.2}%{}{}",
        run.display(),
        out.steps,
        100.0 * out.val_accuracy,
        out.test_accuracy.map_or(String::new(), |t| format!(
            ", test accuracy {:.2}%",
            100.0 * t
        )),
        if out.finished { "" } else { " (stopped)" }
    );
    println!("checkpoint: {}", out.checkpoint.display());
    Ok(())
}

pub fn run(a: Args) -> Result<()> {
    a.device.cpu_only("toy train")?;
    let world = crate::ranks::world();
    let vit = match (&a.recipe, &a.resume) {
        (Some(path), _) if is_vit(path) => Some(path.clone()),
        (None, Some(dir)) if is_vit(&dir.join("config.toml")) => Some(dir.join("config.toml")),
        _ => None,
    };
    if let Some(path) = vit {
        if world.parallel() {
            Err(toy::ranks::RanksError::NotParallel(
                "the image classifier".into(),
            ))?;
        }
        return run_vit(&a, &path);
    }
    let (existing, recipe) = match (&a.resume, &a.recipe) {
        (Some(dir), _) => {
            let (run, recipe) = RunDir::open(dir)?;
            (Some(run), recipe)
        }
        (None, Some(path)) => (None, Recipe::load(path, &a.set)?),
        (None, None) => bail!("give a recipe, or --resume runs/<id>"),
    };
    crate::ranks::check_same(&recipe.to_toml())?;
    world.check_batch(recipe.train.batch)?;
    let root = world.is_root();
    if root && !toy::train::data::is_prepared(&recipe.data.dir) {
        eprintln!(
            "preparing {} (tokenizer of {} tokens)...",
            recipe.data.dir.display(),
            recipe.model.vocab
        );
    }
    // The data is checked (and prepared, by rank 0 first) before a run folder is made for it.
    if root {
        ensure_data(&recipe)?;
    }
    world.barrier();
    ensure_data(&recipe)?;
    let resume = existing.is_some();
    let run = match existing {
        Some(run) => run,
        None => {
            let path = crate::ranks::root_makes(|| Ok(RunDir::create(&a.runs_dir, &recipe)?.path))?;
            RunDir::open(&path)?.0
        }
    };
    if root {
        eprintln!(
            "run {} ({} {}, {} steps of {} x {} tokens{}){}",
            run.path.display(),
            recipe.name,
            recipe.model.arch.name(),
            recipe.train.steps,
            recipe.train.batch * recipe.train.grad_accum,
            recipe.model.ctx,
            crate::ranks::over_ranks(),
            if resume { ", resuming" } else { "" }
        );
    }
    let mut bar = RunBar::new(recipe.train.steps);
    let mut observe = |e: &Event| {
        bar.observe(e, |step, val_loss, sample| {
            format!("step {step}: val loss {val_loss:.4}  sample: {sample:?}")
        })
    };
    let hooks = Hooks {
        stop_after: a.stop_after,
        checkpoint_at_start: a.checkpoint_start,
        init_from: a.init_from.clone(),
        ranks: world.clone(),
        die_at: a.die_at,
        ..Hooks::default()
    };
    let t0 = std::time::Instant::now();
    let outcome = train(&run, &recipe, resume, &hooks, &mut observe);
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
        println!("checkpoint: {}", c.display());
        println!(
            "try: toy generate -m {} -p \"{}\"",
            c.display(),
            recipe.eval.prompt
        );
    }
    Ok(())
}
