//! `toy finetune`: a run in `runs/<id>/` as `toy train` makes (config.toml, events.jsonl,
//! checkpoints, resume bit for bit, a stop on a non-finite loss), on a base GGUF and SFT data.
//! LoRA runs checkpoint the adapter (llama.cpp's LoRA GGUF, `adapter.rs`) beside the optimizer
//! state; full runs checkpoint the whole model as an f32 GGUF with the base's tokenizer.
//! The validation figure is the mean negative log-likelihood of the held-out assistant tokens.

use super::recipe::{FinetuneRecipe, Method};
use super::sft::{load_jsonl, SftBatcher, SftSet, IGNORE};
use super::task::FtTask;
use crate::chat_template::ChatTemplate;
use crate::gguf::GgufFile;
use crate::tokenizer::Tokenizer;
use crate::train::checkpoint;
use crate::train::driver::{adamw, Events, Loop, Plan, Task};
use crate::train::events::{now, Event, EventLog};
use crate::train::run::RunDir;
use crate::train::trainer::{Outcome, TrainRunError};
use crate::train::{LoraSpec, TrainModel};
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum FinetuneError {
    #[error(transparent)]
    Run(#[from] TrainRunError),
    #[error(transparent)]
    Sft(#[from] super::sft::SftError),
    #[error(transparent)]
    Adapter(#[from] super::adapter::AdapterError),
    #[error("base model {path}: {why}")]
    Base { path: PathBuf, why: String },
    #[error("{what}: no samples left to {use_}")]
    Empty { what: String, use_: &'static str },
}

pub(super) fn run_err(e: impl Into<TrainRunError>) -> FinetuneError {
    FinetuneError::Run(e.into())
}

/// The base, its tokenizer and template, and the train / validation sets of a recipe.
pub struct Loaded {
    pub file: Arc<GgufFile>,
    pub tok: Tokenizer,
    pub train: SftSet,
    pub val: SftSet,
}

pub fn load(recipe: &FinetuneRecipe) -> Result<Loaded, FinetuneError> {
    let path = &recipe.base.model;
    let base = |why: String| FinetuneError::Base {
        path: path.clone(),
        why,
    };
    let file = Arc::new(GgufFile::open(path).map_err(|e| base(e.to_string()))?);
    let tok = Tokenizer::from_gguf(&file).map_err(|e| base(e.to_string()))?;
    let template = ChatTemplate::from_gguf(&file, None).ok();
    let (ctx, on_long) = (recipe.train.ctx, recipe.data.on_long);
    let mut train = load_jsonl(&recipe.data.train, &tok, template.as_ref(), ctx, on_long)?;
    let val = match &recipe.data.val {
        Some(v) => load_jsonl(v, &tok, template.as_ref(), ctx, on_long)?,
        None => {
            let every = (1.0 / recipe.data.val_fraction).round().max(2.0) as usize;
            let all = std::mem::take(&mut train.samples);
            let (mut tr, mut va) = (Vec::new(), Vec::new());
            for (i, s) in all.into_iter().enumerate() {
                if i % every == every - 1 {
                    va.push(s)
                } else {
                    tr.push(s)
                }
            }
            train.samples = tr;
            SftSet {
                samples: va,
                skipped_long: 0,
                truncated: 0,
                trainable_tokens: 0,
            }
        }
    };
    for (set, what) in [(&train, "train"), (&val, "validation")] {
        if set.samples.is_empty() {
            return Err(FinetuneError::Empty {
                what: format!("{} ({what})", recipe.data.train.display()),
                use_: "train on",
            });
        }
    }
    Ok(Loaded {
        file,
        tok,
        train,
        val,
    })
}

/// The model a recipe fine-tunes, fresh or holding `params`.
pub fn model(
    recipe: &FinetuneRecipe,
    file: &Arc<GgufFile>,
    params: Option<Vec<f32>>,
) -> Result<TrainModel, FinetuneError> {
    let (ctx, b) = (recipe.train.ctx, recipe.train.batch);
    let rounding = recipe.finetune.inference_rounding;
    let m = match recipe.finetune.method {
        Method::Lora => {
            let spec = LoraSpec {
                targets: recipe.targets(),
                rank: recipe.finetune.rank,
                scale: recipe.lora_scale(),
                seed: recipe.train.seed,
                inference_rounding: rounding,
            };
            TrainModel::lora_on_base(file, ctx, b, &spec, params)
        }
        Method::Full => crate::train::base_config(file, ctx).and_then(|mut c| {
            c.inference_rounding = rounding;
            match params {
                None => TrainModel::from_base_as(file, c, b),
                Some(p) => TrainModel::from_params(c, b, p),
            }
        }),
    };
    let m = m.map_err(run_err)?;
    if recipe.data.pack {
        m.check_packing().map_err(run_err)?;
    }
    Ok(m)
}

/// Cuts the (B, T) batch to (B, T') with T' just past the last trained target of any row
/// (the rest is padding, which carries no loss and, causally, changes nothing before it);
/// returns T'. `pos`, when packed, is cut alike.
pub(super) fn compact(x: &mut [u32], y: &mut [u32], pos: &mut [u32], b: usize, t: usize) -> usize {
    let last = |r: usize| y[r * t..(r + 1) * t].iter().rposition(|&v| v != IGNORE);
    let te = (0..b).filter_map(last).max().map_or(1, |i| i + 1);
    for r in 1..b {
        x.copy_within(r * t..r * t + te, r * te);
        y.copy_within(r * t..r * t + te, r * te);
        if !pos.is_empty() {
            pos.copy_within(r * t..r * t + te, r * te);
        }
    }
    te
}

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
    let dump = match &hooks.dump_batches {
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
    let events = run.events_path();
    let log = EventLog::append(&events).map_err(|source| {
        run_err(TrainRunError::Io {
            path: events.clone(),
            source,
        })
    })?;
    let mut lp = Loop {
        events: Events::new(log, observe),
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
