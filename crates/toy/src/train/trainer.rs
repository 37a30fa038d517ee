//! Training a language model from scratch on the loop every task shares (`driver.rs`, as
//! llm.c's `train_gpt2.c`): per step `grad_accum` batches of the token shards; every
//! `eval.interval` steps a validation loss and a sample; every `checkpoint.interval` steps
//! (and at the end) a GGUF plus the optimizer state. All state that decides the next step
//! (params, AdamW m/v/t, the batch generator) is in the checkpoint, so a resumed run is
//! bit-identical to one that never stopped.

use std::path::{Path, PathBuf};

use tinynn::optim::AdamW;

use super::checkpoint::{self, Fault, StateHeader, StateView};
use super::data::{self, PrepareOptions, TokenizerChoice};
use super::dataset::{Batcher, Dataset};
use super::driver::{adamw, Events, Loop, Plan, Task};
use super::evaluate::{eval_loss, sample};
use super::events::{now, Event};
pub use super::outcome::{Outcome, TrainRunError};
use super::recipe::Recipe;
use super::rng::SplitMix64;
use super::run::RunDir;
use super::{export, warm_start, TrainModel};
use crate::gguf::GgufFile;
use crate::ranks::Ranks;
use crate::tokenizer::{Tokenizer, TokenizerSpec};

/// For tasks whose errors are messages (the image classifier's).
impl From<TrainRunError> for String {
    fn from(e: TrainRunError) -> String {
        e.to_string()
    }
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
    /// The data-parallel ranks this process is one of (one process by default).
    pub ranks: Ranks,
    /// Tests of a rank's death: rank `.0` aborts at the start of step `.1`.
    pub die_at: Option<(usize, usize)>,
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
/// each event goes to `events.jsonl` and to `observe`. The steps are the one loop's
/// (`driver.rs`); this file is the language-model task: its data, model and checkpoints.
pub fn train(
    run: &RunDir,
    recipe: &Recipe,
    resume: bool,
    hooks: &Hooks,
    observe: &mut dyn FnMut(&Event),
) -> Result<Outcome, TrainRunError> {
    let _precision = super::precision::Scope::enter(recipe.train.precision);
    let (mut task, mut lp, start) = LmTask::open(run, recipe, resume, hooks, observe)?;
    let total = recipe.train.steps;
    if hooks.checkpoint_at_start && start == 0 {
        lp.checkpoint(&mut task, 0)?;
    }
    let plan = Plan {
        optim: &recipe.optim,
        steps: total,
        grad_accum: recipe.train.grad_accum,
        eval_every: recipe.eval.interval,
        checkpoint_every: recipe.checkpoint.interval,
        stop_after: hooks.stop_after,
    };
    let r = lp.run(&mut task, &plan, start)?;
    lp.outcome(r, total)
}

/// A language model trained on token shards: what the loop asks of it.
struct LmTask<'a> {
    run: &'a RunDir,
    recipe: &'a Recipe,
    hooks: &'a Hooks,
    ds: Dataset,
    spec: TokenizerSpec,
    tok: Tokenizer,
    model: TrainModel,
    batcher: Batcher,
}

impl<'a> LmTask<'a> {
    /// The data, the tokenizer, and the model, optimizer and batch generator, fresh or as the
    /// newest checkpoint left them; logs `run_start`. Returns the steps already done.
    fn open(
        run: &'a RunDir,
        recipe: &'a Recipe,
        resume: bool,
        hooks: &'a Hooks,
        observe: &'a mut dyn FnMut(&Event),
    ) -> Result<(Self, Loop<'a>, usize), TrainRunError> {
        let ds = ensure_data(recipe)?;
        let spec = super::bpe::load_tokenizer(&ds.tokenizer_path())?;
        let tok = Tokenizer::from_spec(spec.clone())?;
        let cfg = recipe.model_config()?;
        let b = recipe.train.batch;
        hooks.ranks.check_batch(b)?;
        let mut batcher = Batcher::new(recipe.train.seed ^ 0xDA7A, b, cfg.ctx);
        let mut warm = None;
        let (model, opt, start) = if resume {
            let (step, path) = checkpoint::latest(&run.path)?;
            let s = checkpoint::load_state(&path)?;
            let model = TrainModel::from_params(cfg, b, s.params)?;
            let mut opt = adamw(&recipe.optim, model.params.len());
            (opt.m, opt.v, opt.t) = (s.m, s.v, s.header.adam_t);
            batcher.rng = SplitMix64::new(s.header.data_rng);
            (model, opt, step)
        } else {
            let model = match hooks.init_from.as_deref() {
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
            let opt = adamw(&recipe.optim, model.params.len());
            (model, opt, 0)
        };
        let mut model = model;
        model.set_ranks(hooks.ranks.clone());
        model.defer_grad_sum();
        let last_checkpoint = checkpoint::latest(&run.path)
            .ok()
            .map(|(s, _)| run.path.join(checkpoint::gguf_name(s)));
        let mut lp = Loop {
            events: Events::open(&run.events_path(), &hooks.ranks, observe)?,
            opt,
            decay: model.decay_ranges(),
            frozen: Vec::new(),
            last_loss: f32::NAN,
            last_checkpoint,
        };
        let mut config = serde_json::to_value(recipe).unwrap_or(serde_json::Value::Null);
        if let (Some(w), Some(obj)) = (warm, config.as_object_mut()) {
            obj.insert("init_from".into(), w);
        }
        let time = now();
        lp.events.emit(Event::RunStart {
            config,
            time,
            start_step: start,
        })?;
        let task = Self {
            run,
            recipe,
            hooks,
            ds,
            spec,
            tok,
            model,
            batcher,
        };
        Ok((task, lp, start))
    }
}

impl Task for LmTask<'_> {
    type Error = TrainRunError;

    fn weights(&mut self) -> (&mut [f32], &mut [f32]) {
        (&mut self.model.params, &mut self.model.grads)
    }

    fn accumulate(&mut self, step: usize, accum: usize) -> Result<(f32, usize), TrainRunError> {
        if self.hooks.poison_at == Some(step) {
            self.model.params[0] = f32::NAN;
        }
        if self.hooks.die_at == Some((self.hooks.ranks.rank(), step)) {
            std::process::abort();
        }
        let (b, t) = (self.batcher.b, self.batcher.t);
        let mut loss = 0.0;
        for _ in 0..accum {
            self.batcher.next(&self.ds.train);
            let (x, y) = (&self.batcher.inputs, &self.batcher.targets);
            loss += self
                .model
                .forward_backward_scaled(x, y, b, t, 1.0 / accum as f32);
        }
        self.model.finish_grads();
        Ok((loss / accum as f32, b * t * accum))
    }

    /// Validation loss and a sample.
    fn evaluate(&mut self, step: usize) -> Result<Event, TrainRunError> {
        let val_loss = eval_loss(&mut self.model, &self.ds, self.recipe);
        let sample = sample(&mut self.model, &self.tok, self.recipe, step);
        Ok(Event::Eval {
            step,
            val_loss,
            sample,
            metrics: None,
        })
    }

    fn checkpoint(&mut self, step: usize, opt: &AdamW) -> Result<PathBuf, TrainRunError> {
        let fault = match self.hooks.crash_checkpoint_at == Some(step) {
            true => Fault::CrashMidWrite,
            false => Fault::None,
        };
        let state = StateView {
            header: StateHeader {
                step,
                adam_t: opt.t,
                data_rng: self.batcher.rng.state,
                n_params: self.model.params.len() as u64,
                data_epoch: 0,
                data_pos: 0,
            },
            params: &self.model.params,
            m: &opt.m,
            v: &opt.v,
        };
        let run = self.run;
        save_checkpoint(&run.path, &run.id, &self.model, &self.spec, &state, fault)
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
