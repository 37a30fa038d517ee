//! The training loop, as llm.c's `train_gpt2.c` has it: per step, `next_batch`,
//! `zero_grad`, `forward_backward` (times `grad_accum`), clip, `update`; every
//! `eval.interval` steps a validation loss and a sample; every `checkpoint.interval` steps
//! (and at the end) a GGUF plus the optimizer state. All state that decides the next step
//! (params, AdamW m/v/t, the batch generator) is in the checkpoint, so a resumed run is
//! bit-identical to one that never stopped.

use std::path::{Path, PathBuf};
use std::time::Instant;

use tinynn::optim::{clip_factor, lr_at, AdamW, AdamWConfig};

use super::checkpoint::{self, CheckpointError, Fault, StateHeader, StateView};
use super::data::{self, DataError, PrepareOptions, TokenizerChoice};
use super::dataset::{Batcher, Dataset, ShardError};
use super::evaluate::{eval_loss, sample};
use super::events::{now, Event, EventLog};
use super::recipe::Recipe;
use super::rng::SplitMix64;
use super::run::RunDir;
use super::{export, warm_start, TrainError, TrainModel};
use crate::gguf::GgufFile;
use crate::tokenizer::{Tokenizer, TokenizerSpec};

#[derive(Debug, thiserror::Error)]
pub enum TrainRunError {
    #[error(transparent)]
    Data(#[from] DataError),
    #[error(transparent)]
    Shard(#[from] ShardError),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error(transparent)]
    Model(#[from] TrainError),
    #[error("writing the checkpoint GGUF: {0}")]
    Export(#[from] crate::gguf::GgufError),
    #[error("the donor {path}: {source}")]
    Donor {
        path: PathBuf,
        source: crate::gguf::GgufError,
    },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the data in {dir} has a vocabulary of {data}, the recipe's model.vocab is {model}: prepare the data with --vocab-size {model} or set model.vocab={data}")]
    VocabMismatch {
        dir: PathBuf,
        data: usize,
        model: usize,
    },
    #[error(
        "the {split} split of {dir} has {tokens} tokens, fewer than one window of ctx + 1 = {need}"
    )]
    TooFewTokens {
        dir: PathBuf,
        split: &'static str,
        tokens: usize,
        need: usize,
    },
    #[error("{what} is {value} at step {step}: training diverged (try a lower optim.lr); last good checkpoint: {}", last_checkpoint.as_ref().map_or("none".into(), |p| p.display().to_string()))]
    NonFinite {
        what: &'static str,
        value: f32,
        step: usize,
        last_checkpoint: Option<PathBuf>,
    },
    #[error("tokenizer: {0}")]
    Tokenizer(#[from] crate::tokenizer::TokenizerError),
    #[error("tokenizer file: {0}")]
    Bpe(#[from] super::bpe::BpeError),
}

/// What a run does beyond its recipe: a donor to start from, and fault injection and early
/// stops for tests of resume and crash safety.
#[derive(Clone, Debug, Default)]
pub struct Hooks {
    /// Start a fresh run from this donor GGUF (`warm_start.rs`: wider, narrower or deeper
    /// than the recipe's model) instead of a fresh init; ignored when resuming.
    pub init_from: Option<PathBuf>,
    /// Return (as an interrupted run would) once this many steps are done.
    pub stop_after: Option<usize>,
    /// Crash while writing the optimizer state of the checkpoint at this step.
    pub crash_checkpoint_at: Option<usize>,
    /// Set the first parameter to NaN before this (1-based) step.
    pub poison_at: Option<usize>,
    /// Write a checkpoint of the initial weights (step 0) before training, e.g. so another
    /// framework can start from the same weights.
    pub checkpoint_at_start: bool,
}

/// How a call to [`train`] ended.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub steps_done: usize,
    pub last_loss: f32,
    pub last_checkpoint: Option<PathBuf>,
    /// Whether all the recipe's steps are done.
    pub finished: bool,
}

/// The run's data folder, prepared first (from `data.inputs`, or the Rust book) when absent.
pub fn ensure_data(recipe: &Recipe) -> Result<Dataset, TrainRunError> {
    let dir = &recipe.data.dir;
    if !data::is_prepared(dir) {
        data::prepare(&PrepareOptions {
            inputs: recipe.data.inputs.clone(),
            out: dir.clone(),
            tokenizer: TokenizerChoice::Train {
                vocab_size: recipe.model.vocab,
            },
            val_fraction: recipe.data.val_fraction,
            seed: recipe.train.seed,
        })?;
    }
    let ds = Dataset::open(dir)?;
    if ds.meta.vocab_size != recipe.model.vocab {
        return Err(TrainRunError::VocabMismatch {
            dir: dir.clone(),
            data: ds.meta.vocab_size,
            model: recipe.model.vocab,
        });
    }
    let need = recipe.model.ctx + 1;
    for (split, shard) in [("train", &ds.train), ("validation", &ds.val)] {
        if shard.len() < need {
            return Err(TrainRunError::TooFewTokens {
                dir: dir.clone(),
                split,
                tokens: shard.len(),
                need,
            });
        }
    }
    Ok(ds)
}

/// Trains `recipe` in `run`, from its newest checkpoint when `resume`, else from scratch;
/// each event goes to `events.jsonl` and to `observe`.
pub fn train(
    run: &RunDir,
    recipe: &Recipe,
    resume: bool,
    hooks: &Hooks,
    observe: &mut dyn FnMut(&Event),
) -> Result<Outcome, TrainRunError> {
    let _precision = super::precision::Scope::enter(recipe.train.precision);
    let mut s = Session::open(run, recipe, resume, hooks.init_from.as_deref(), observe)?;
    let total = recipe.train.steps;
    if hooks.checkpoint_at_start && s.start == 0 {
        s.checkpoint(0, Fault::None)?;
    }
    for step in s.start + 1..=total {
        if hooks.poison_at == Some(step) {
            s.model.params[0] = f32::NAN;
        }
        s.step(step)?;
        if step % recipe.eval.interval == 0 || step == total {
            s.evaluate(step)?;
        }
        if step % recipe.checkpoint.interval == 0 || step == total {
            let fault = if hooks.crash_checkpoint_at == Some(step) {
                Fault::CrashMidWrite
            } else {
                Fault::None
            };
            s.checkpoint(step, fault)?;
        }
        if hooks.stop_after == Some(step) && step < total {
            return Ok(s.outcome(step, false));
        }
    }
    let status = "done".to_string();
    s.emit(Event::RunEnd {
        step: total,
        status,
    })?;
    Ok(s.outcome(total, true))
}

/// Everything one call of [`train`] works with.
struct Session<'a> {
    run: &'a RunDir,
    recipe: &'a Recipe,
    ds: Dataset,
    spec: TokenizerSpec,
    tok: Tokenizer,
    model: TrainModel,
    opt: AdamW,
    batcher: Batcher,
    decay: Vec<std::ops::Range<usize>>,
    /// Steps done before this call.
    start: usize,
    log: EventLog,
    observe: &'a mut dyn FnMut(&Event),
    last_loss: f32,
    last_checkpoint: Option<PathBuf>,
}

impl<'a> Session<'a> {
    /// The data, the tokenizer, and the model, optimizer and batch generator, fresh or as the
    /// newest checkpoint left them; logs `run_start`.
    fn open(
        run: &'a RunDir,
        recipe: &'a Recipe,
        resume: bool,
        init_from: Option<&Path>,
        observe: &'a mut dyn FnMut(&Event),
    ) -> Result<Self, TrainRunError> {
        let ds = ensure_data(recipe)?;
        let spec = super::bpe::load_tokenizer(&ds.tokenizer_path())?;
        let tok = Tokenizer::from_spec(spec.clone())?;
        let cfg = recipe.model_config();
        let b = recipe.train.batch;
        let o = &recipe.optim;
        let adam = AdamWConfig {
            beta1: o.beta1,
            beta2: o.beta2,
            eps: o.eps,
            weight_decay: o.weight_decay,
        };
        let mut batcher = Batcher::new(recipe.train.seed ^ 0xDA7A, b, cfg.ctx);
        let mut warm = None;
        let (model, opt, start) = if resume {
            let (step, path) = checkpoint::latest(&run.path)?;
            let s = checkpoint::load_state(&path)?;
            let model = TrainModel::from_params(cfg, b, s.params)?;
            let mut opt = AdamW::new(model.params.len(), adam);
            (opt.m, opt.v, opt.t) = (s.m, s.v, s.header.adam_t);
            batcher.rng = SplitMix64::new(s.header.data_rng);
            (model, opt, step)
        } else {
            let model = match init_from {
                Some(path) => {
                    let donor = GgufFile::open(path).map_err(|source| TrainRunError::Donor {
                        path: path.to_path_buf(),
                        source,
                    })?;
                    let dc = warm_start::donor_config(&donor, cfg.ctx)?;
                    warm = Some(serde_json::json!({
                        "path": path.display().to_string(),
                        "plan": warm_start::describe(&dc, &cfg)?,
                    }));
                    let params = warm_start::warm_start(&donor, &cfg, recipe.train.seed)?;
                    TrainModel::from_params(cfg, b, params)?
                }
                None => TrainModel::try_init(cfg, b, recipe.train.seed)?,
            };
            let opt = AdamW::new(model.params.len(), adam);
            (model, opt, 0)
        };
        let events = run.events_path();
        let log = EventLog::append(&events).map_err(|source| TrainRunError::Io {
            path: events.clone(),
            source,
        })?;
        let last_checkpoint = checkpoint::latest(&run.path)
            .ok()
            .map(|(s, _)| run.path.join(checkpoint::gguf_name(s)));
        let mut s = Self {
            run,
            recipe,
            ds,
            spec,
            tok,
            decay: model.decay_ranges(),
            model,
            opt,
            batcher,
            start,
            log,
            observe,
            last_loss: f32::NAN,
            last_checkpoint,
        };
        let mut config = serde_json::to_value(recipe).unwrap_or(serde_json::Value::Null);
        if let (Some(w), Some(obj)) = (warm, config.as_object_mut()) {
            obj.insert("init_from".into(), w);
        }
        let time = now();
        s.emit(Event::RunStart {
            config,
            time,
            start_step: start,
        })?;
        Ok(s)
    }

    fn emit(&mut self, e: Event) -> Result<(), TrainRunError> {
        self.log.write(&e).map_err(|source| TrainRunError::Io {
            path: self.log.path().to_path_buf(),
            source,
        })?;
        (self.observe)(&e);
        Ok(())
    }

    /// Logs the run's end and returns the error for a non-finite `value`.
    fn fail(&mut self, step: usize, what: &'static str, value: f32) -> TrainRunError {
        let status = format!("failed: {what} is {value} at step {step}");
        if let Err(e) = self.emit(Event::RunEnd { step, status }) {
            return e;
        }
        TrainRunError::NonFinite {
            what,
            value,
            step,
            last_checkpoint: self.last_checkpoint.clone(),
        }
    }

    /// One optimizer step (1-based `step`): the gradient of `grad_accum` batches, clipped,
    /// then AdamW at the scheduled learning rate.
    fn step(&mut self, step: usize) -> Result<(), TrainRunError> {
        let (b, t) = (self.batcher.b, self.batcher.t);
        let (o, accum) = (&self.recipe.optim, self.recipe.train.grad_accum);
        let t0 = Instant::now();
        self.model.zero_grad();
        let mut loss = 0.0;
        for _ in 0..accum {
            self.batcher.next(&self.ds.train);
            let (x, y) = (&self.batcher.inputs, &self.batcher.targets);
            loss += self
                .model
                .forward_backward_scaled(x, y, b, t, 1.0 / accum as f32);
        }
        loss /= accum as f32;
        if !loss.is_finite() {
            return Err(self.fail(step, "the training loss", loss));
        }
        let (grad_norm, clip) = clip_factor(&self.model.grads, o.grad_clip);
        if !grad_norm.is_finite() {
            return Err(self.fail(step, "the gradient norm", grad_norm));
        }
        let lr = lr_at(step - 1, o.warmup, self.recipe.train.steps, o.lr, o.min_lr);
        let m = &mut self.model;
        self.opt
            .step_scaled(&mut m.params, &m.grads, clip, lr, &self.decay);
        let tok_s = (b * t * accum) as f64 / t0.elapsed().as_secs_f64().max(1e-9);
        self.last_loss = loss;
        self.emit(Event::Step {
            step,
            loss,
            lr,
            grad_norm,
            tok_s,
            time: now(),
        })
    }

    /// Validation loss and a sample.
    fn evaluate(&mut self, step: usize) -> Result<(), TrainRunError> {
        let val_loss = eval_loss(&mut self.model, &self.ds, self.recipe);
        let sample = sample(&mut self.model, &self.tok, self.recipe, step);
        self.emit(Event::Eval {
            step,
            val_loss,
            sample,
            metrics: None,
        })
    }

    /// A checkpoint of the state after `step` steps; refused when a weight is not finite.
    fn checkpoint(&mut self, step: usize, fault: Fault) -> Result<(), TrainRunError> {
        if let Some(&bad) = self.model.params.iter().find(|p| !p.is_finite()) {
            return Err(self.fail(step, "a parameter", bad));
        }
        let state = StateView {
            header: StateHeader {
                step,
                adam_t: self.opt.t,
                data_rng: self.batcher.rng.state,
                n_params: self.model.params.len() as u64,
                data_epoch: 0,
                data_pos: 0,
            },
            params: &self.model.params,
            m: &self.opt.m,
            v: &self.opt.v,
        };
        let run = self.run;
        let path = save_checkpoint(&run.path, &run.id, &self.model, &self.spec, &state, fault)?;
        self.last_checkpoint = Some(path.clone());
        self.emit(Event::Checkpoint {
            step,
            path: path.display().to_string(),
        })
    }

    fn outcome(&self, steps_done: usize, finished: bool) -> Outcome {
        Outcome {
            steps_done,
            last_loss: self.last_loss,
            last_checkpoint: self.last_checkpoint.clone(),
            finished,
        }
    }
}

/// Writes `ckpt-NNNNNN.gguf`, then `ckpt-NNNNNN.state` (the mark of a complete checkpoint).
fn save_checkpoint(
    dir: &Path,
    name: &str,
    model: &TrainModel,
    spec: &TokenizerSpec,
    state: &StateView,
    fault: Fault,
) -> Result<PathBuf, TrainRunError> {
    let step = state.header.step;
    let gguf = dir.join(checkpoint::gguf_name(step));
    export::export_gguf(model, spec, name, &gguf)?;
    checkpoint::save_state(&dir.join(checkpoint::state_name(step)), state, fault)?;
    Ok(gguf)
}
