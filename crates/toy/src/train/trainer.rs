//! The training loop, as llm.c's `train_gpt2.c` has it: per step, `next_batch`,
//! `zero_grad`, `forward_backward` (times `grad_accum`), clip, `update`; every
//! `eval.interval` steps a validation loss and a sample; every `checkpoint.interval` steps
//! (and at the end) a GGUF plus the optimizer state. All state that decides the next step
//! (params, AdamW m/v/t, the batch generator) is in the checkpoint, so a resumed run is
//! bit-identical to one that never stopped.

use std::path::{Path, PathBuf};
use std::time::Instant;

use tinynn::optim::{clip_grad_norm, lr_at, AdamW, AdamWConfig};

use super::checkpoint::{self, CheckpointError, Fault, StateHeader, TrainState};
use super::data::{self, DataError, PrepareOptions, TokenizerChoice};
use super::dataset::{Batcher, Dataset, ShardError};
use super::events::{now, Event, EventLog};
use super::recipe::Recipe;
use super::rng::SplitMix64;
use super::run::RunDir;
use super::{export, TrainError, TrainModel};
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

/// Fault injection and early stops, for tests of resume and crash safety.
#[derive(Clone, Debug, Default)]
pub struct Hooks {
    /// Return (as an interrupted run would) once this many steps are done.
    pub stop_after: Option<usize>,
    /// Crash while writing the optimizer state of the checkpoint at this step.
    pub crash_checkpoint_at: Option<usize>,
    /// Set the first parameter to NaN before this (1-based) step.
    pub poison_at: Option<usize>,
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
    let ds = ensure_data(recipe)?;
    let spec: TokenizerSpec = super::bpe::load_tokenizer(&ds.tokenizer_path())?;
    let tok = Tokenizer::from_spec(spec.clone())?;
    let cfg = recipe.model_config();
    let (b, t, accum) = (recipe.train.batch, cfg.ctx, recipe.train.grad_accum);
    let o = &recipe.optim;
    let adam_cfg = AdamWConfig {
        beta1: o.beta1,
        beta2: o.beta2,
        eps: o.eps,
        weight_decay: o.weight_decay,
    };

    let mut batcher = Batcher::new(recipe.train.seed ^ 0xDA7A, b, t);
    let (mut model, mut opt, start) = if resume {
        let (step, path) = checkpoint::latest(&run.path)?;
        let s = checkpoint::load_state(&path)?;
        let model = TrainModel::from_params(cfg.clone(), b, s.params)?;
        let mut opt = AdamW::new(model.params.len(), adam_cfg);
        opt.m = s.m;
        opt.v = s.v;
        opt.t = s.header.adam_t;
        batcher.rng = SplitMix64::new(s.header.data_rng);
        (model, opt, step)
    } else {
        let model = TrainModel::try_init(cfg.clone(), b, recipe.train.seed)?;
        let opt = AdamW::new(model.params.len(), adam_cfg);
        (model, opt, 0)
    };
    let decay = model.decay_ranges();

    let events_path = run.events_path();
    let io_err = |source| TrainRunError::Io {
        path: events_path.clone(),
        source,
    };
    let mut log = EventLog::append(&events_path).map_err(io_err)?;
    let mut emit = |log: &mut EventLog, e: Event| -> Result<(), TrainRunError> {
        log.write(&e).map_err(|source| TrainRunError::Io {
            path: log.path().to_path_buf(),
            source,
        })?;
        observe(&e);
        Ok(())
    };
    let config = serde_json::to_value(recipe).unwrap_or(serde_json::Value::Null);
    emit(
        &mut log,
        Event::RunStart {
            config,
            time: now(),
            start_step: start,
        },
    )?;

    let total = recipe.train.steps;
    let mut last_checkpoint = checkpoint::latest(&run.path)
        .ok()
        .map(|(s, _)| run.path.join(checkpoint::gguf_name(s)));
    let mut last_loss = f32::NAN;
    for step in start + 1..=total {
        if hooks.poison_at == Some(step) {
            model.params[0] = f32::NAN;
        }
        let t0 = Instant::now();
        // One optimizer step: accumulate the gradient of `accum` batches, then update.
        model.zero_grad();
        let mut loss = 0.0;
        let scale = 1.0 / accum as f32;
        for _ in 0..accum {
            batcher.next(&ds.train);
            let (x, y) = (&batcher.inputs, &batcher.targets);
            loss += model.forward_backward_scaled(x, y, b, t, scale);
        }
        loss /= accum as f32;
        let fail = |what, value| {
            let status = format!("failed: {what} is {value} at step {step}");
            (
                TrainRunError::NonFinite {
                    what,
                    value,
                    step,
                    last_checkpoint: last_checkpoint.clone(),
                },
                status,
            )
        };
        if !loss.is_finite() {
            let (err, status) = fail("the training loss", loss);
            emit(&mut log, Event::RunEnd { step, status })?;
            return Err(err);
        }
        let grad_norm = clip_grad_norm(&mut model.grads, o.grad_clip);
        if !grad_norm.is_finite() {
            let (err, status) = fail("the gradient norm", grad_norm);
            emit(&mut log, Event::RunEnd { step, status })?;
            return Err(err);
        }
        let lr = lr_at(step - 1, o.warmup, total, o.lr, o.min_lr);
        opt.step(&mut model.params, &model.grads, lr, &decay);
        let secs = t0.elapsed().as_secs_f64();
        last_loss = loss;
        emit(
            &mut log,
            Event::Step {
                step,
                loss,
                lr,
                grad_norm,
                tok_s: (b * t * accum) as f64 / secs.max(1e-9),
                time: now(),
            },
        )?;

        if step % recipe.eval.interval == 0 || step == total {
            let val_loss = eval_loss(&mut model, &ds, recipe);
            let sample = sample(&mut model, &tok, recipe, step);
            emit(
                &mut log,
                Event::Eval {
                    step,
                    val_loss,
                    sample,
                },
            )?;
        }
        if step % recipe.checkpoint.interval == 0 || step == total {
            if let Some(i) = model.params.iter().position(|p| !p.is_finite()) {
                let (err, status) = fail("a parameter", model.params[i]);
                emit(&mut log, Event::RunEnd { step, status })?;
                return Err(err);
            }
            let fault = if hooks.crash_checkpoint_at == Some(step) {
                Fault::CrashMidWrite
            } else {
                Fault::None
            };
            let state = TrainState {
                header: StateHeader {
                    step,
                    adam_t: opt.t,
                    data_rng: batcher.rng.state,
                    n_params: model.params.len() as u64,
                },
                params: model.params.clone(),
                m: opt.m.clone(),
                v: opt.v.clone(),
            };
            let path = save_checkpoint(&run.path, &run.id, &model, &spec, &state, fault)?;
            emit(
                &mut log,
                Event::Checkpoint {
                    step,
                    path: path.display().to_string(),
                },
            )?;
            last_checkpoint = Some(path);
        }
        if hooks.stop_after == Some(step) && step < total {
            return Ok(Outcome {
                steps_done: step,
                last_loss,
                last_checkpoint,
                finished: false,
            });
        }
    }
    emit(
        &mut log,
        Event::RunEnd {
            step: total,
            status: "done".into(),
        },
    )?;
    Ok(Outcome {
        steps_done: total,
        last_loss,
        last_checkpoint,
        finished: true,
    })
}

/// Writes `ckpt-NNNNNN.gguf`, then `ckpt-NNNNNN.state` (the mark of a complete checkpoint).
fn save_checkpoint(
    dir: &Path,
    name: &str,
    model: &TrainModel,
    spec: &TokenizerSpec,
    state: &TrainState,
    fault: Fault,
) -> Result<PathBuf, TrainRunError> {
    let step = state.header.step;
    let gguf = dir.join(checkpoint::gguf_name(step));
    export::export_gguf(model, spec, name, &gguf)?;
    checkpoint::save_state(&dir.join(checkpoint::state_name(step)), state, fault)?;
    Ok(gguf)
}

/// Mean loss over `eval.batches` validation batches, always the same ones.
pub fn eval_loss(model: &mut TrainModel, ds: &Dataset, recipe: &Recipe) -> f32 {
    let (b, t) = (recipe.train.batch, recipe.model.ctx);
    let mut batcher = Batcher::new(recipe.train.seed ^ 0x5A11D, b, t);
    let n = recipe.eval.batches.max(1);
    let mut sum = 0.0;
    for _ in 0..n {
        batcher.next(&ds.val);
        sum += model.forward_loss(&batcher.inputs, &batcher.targets, b, t);
    }
    sum / n as f32
}

/// `eval.sample_tokens` tokens after `eval.prompt`, sampled at temperature 0.8 from a
/// generator seeded by the step (so samples are reproducible and do not touch training).
pub fn sample(model: &mut TrainModel, tok: &Tokenizer, recipe: &Recipe, step: usize) -> String {
    let ctx = recipe.model.ctx;
    let mut ids = tok.encode(&recipe.eval.prompt, false).unwrap_or_default();
    if ids.is_empty() {
        ids.extend(tok.eos_id());
    }
    let n_prompt = ids.len();
    let mut rng = SplitMix64::new(recipe.train.seed ^ (step as u64).wrapping_mul(0x9E37));
    for _ in 0..recipe.eval.sample_tokens {
        let window = &ids[ids.len().saturating_sub(ctx)..];
        let logits = model.logits_last(window);
        let next = sample_logits(logits, 0.8, rng.next_f64());
        if tok.is_eog(next) {
            break;
        }
        ids.push(next);
    }
    let prompt = tok.decode(&ids[..n_prompt]);
    prompt + &tok.decode(&ids[n_prompt..])
}

/// Samples from softmax(logits / temperature) with the uniform draw `u`.
fn sample_logits(logits: &[f32], temperature: f32, u: f64) -> u32 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let weights: Vec<f64> = logits
        .iter()
        .map(|&l| f64::from((l - max) / temperature).exp())
        .collect();
    let total: f64 = weights.iter().sum();
    let mut target = u * total;
    for (i, w) in weights.iter().enumerate() {
        target -= w;
        if target <= 0.0 {
            return i as u32;
        }
    }
    (logits.len() - 1) as u32
}
