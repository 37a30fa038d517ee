//! `toy finetune`: a run in `runs/<id>/` as `toy train` makes (config.toml, events.jsonl,
//! checkpoints, resume bit for bit, a stop on a non-finite loss), on a base GGUF and SFT data.
//! LoRA runs checkpoint the adapter (llama.cpp's LoRA GGUF, `adapter.rs`) beside the optimizer
//! state; full runs checkpoint the whole model as an f32 GGUF with the base's tokenizer.
//! The validation figure is the mean negative log-likelihood of the held-out assistant tokens.

use super::load::run_err;
pub use super::load::{load, model, FinetuneError, Loaded};
use super::recipe::FinetuneRecipe;
use super::sft_batch::SftBatcher;
use super::task::FtTask;
use crate::train::checkpoint;
use crate::train::driver::{adamw, Events, Loop, Plan, Task};
use crate::train::events::{now, Event};
use crate::train::run::RunDir;
use crate::train::trainer::{Outcome, TrainRunError};
use std::path::PathBuf;

/// What a run does besides training, for tests and benchmarks.
#[derive(Clone, Debug, Default)]
pub struct Hooks {
    /// Stop after this many steps (as an interruption would).
    pub stop_after: Option<usize>,
    /// Append every micro-batch as one JSON line `{"step","b","t","inputs","targets"}`
    /// (targets `null` where no loss), so another trainer can replay the same data.
    pub dump_batches: Option<PathBuf>,
    /// Also checkpoint the starting weights (ckpt-000000): the initial adapter, for a
    /// reference trainer to start from the same point.
    pub checkpoint_at_start: bool,
    /// The data-parallel ranks this process is one of (one process by default).
    pub ranks: crate::ranks::Ranks,
}

/// Trains `recipe` in `run` (from its newest checkpoint when `resume`); events go to
/// `events.jsonl` and to `observe`. The steps are the one training loop's
/// (`train::driver`); the fine-tune's side of them is `task.rs`.
pub fn finetune(
    run: &RunDir,
    recipe: &FinetuneRecipe,
    resume: bool,
    hooks: &Hooks,
    observe: &mut dyn FnMut(&Event),
) -> Result<Outcome, FinetuneError> {
    let _precision = crate::train::precision::Scope::enter(recipe.train.precision);
    let dump = match hooks
        .dump_batches
        .as_ref()
        .filter(|_| hooks.ranks.is_root())
    {
        None => None,
        Some(p) => Some(std::fs::File::create(p).map_err(|source| {
            run_err(TrainRunError::Io {
                path: p.clone(),
                source,
            })
        })?),
    };
    let d = load(recipe)?;
    let (b, t) = (recipe.train.batch, recipe.train.ctx);
    hooks.ranks.check_batch(b).map_err(run_err)?;
    let n = d.train.samples.len();
    let (model, opt, batcher, start) = if resume {
        let (step, path) = checkpoint::latest(&run.path).map_err(run_err)?;
        let s = checkpoint::load_state(&path).map_err(run_err)?;
        let h = &s.header;
        let batcher = SftBatcher::from_state(n, (h.data_rng, h.data_epoch, h.data_pos), b, t);
        let mut opt = adamw(&recipe.optim, s.params.len());
        (opt.m, opt.v, opt.t) = (s.m, s.v, h.adam_t);
        (model(recipe, &d.file, Some(s.params))?, opt, batcher, step)
    } else {
        let m = model(recipe, &d.file, None)?;
        let opt = adamw(&recipe.optim, m.params.len());
        let batcher = SftBatcher::new(n, recipe.train.seed ^ 0x5F7, b, t);
        (m, opt, batcher, 0)
    };
    let batcher = match recipe.data.shuffle {
        true => batcher,
        false => batcher.in_file_order(),
    };
    let mut model = model;
    model.set_ranks(hooks.ranks.clone());
    model.defer_grad_sum();
    let events = Events::open(&run.events_path(), &hooks.ranks, observe).map_err(run_err)?;
    let mut lp = Loop {
        events,
        opt,
        decay: model.decay_ranges(),
        frozen: model.frozen_ranges(),
        last_loss: f32::NAN,
        last_checkpoint: None,
    };
    let pack = recipe.data.pack;
    let mut task = FtTask {
        run,
        recipe,
        d,
        model,
        batcher,
        dump,
        x: vec![0; b * t],
        y: vec![0; b * t],
        pos: vec![0; if pack { b * t } else { 0 }],
    };
    lp.events.emit(Event::RunStart {
        config: serde_json::to_value(recipe).unwrap_or_default(),
        time: now(),
        start_step: start,
    })?;
    if start == 0 && hooks.checkpoint_at_start {
        lp.checkpoint(&mut task, 0)?;
    }
    if start == 0 {
        let e = task.evaluate(0)?;
        lp.events.emit(e)?;
    }
    let plan = Plan {
        optim: &recipe.optim,
        steps: recipe.train.steps,
        grad_accum: recipe.train.grad_accum,
        eval_every: recipe.eval.interval,
        checkpoint_every: recipe.checkpoint.interval,
        stop_after: hooks.stop_after,
    };
    let r = lp.run(&mut task, &plan, start)?;
    Ok(lp.outcome(r, plan.steps)?)
}
