//! `toy finetune`: a run in `runs/<id>/` as `toy train` makes (config.toml, events.jsonl,
//! checkpoints, resume bit for bit, a stop on a non-finite loss), on a base GGUF and SFT data.
//! LoRA runs checkpoint the adapter (llama.cpp's LoRA GGUF, `adapter.rs`) beside the optimizer
//! state; full runs checkpoint the whole model as an f32 GGUF with the base's tokenizer.
//! The validation figure is the mean negative log-likelihood of the held-out assistant tokens.

use super::evaluate::{eval_nll, sample};
use super::recipe::{FinetuneRecipe, Method};
use super::repack::repack_for;
use super::save::save;
use super::sft::{load_jsonl, SftBatcher, SftSet, IGNORE};
use crate::chat_template::ChatTemplate;
use crate::gguf::GgufFile;
use crate::tokenizer::Tokenizer;
use crate::train::checkpoint;
use crate::train::events::{now, Event, EventLog};
use crate::train::run::RunDir;
use crate::train::trainer::{Outcome, TrainRunError};
use crate::train::{LoraSpec, TrainModel};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;
use tinynn::layers::dropout::Dropout;
use tinynn::optim::{clip_factor, lr_at, AdamW, AdamWConfig};

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
    let m = match recipe.finetune.method {
        Method::Lora => {
            let spec = LoraSpec {
                targets: recipe.targets(),
                rank: recipe.finetune.rank,
                scale: recipe.lora_scale(),
                seed: recipe.train.seed,
            };
            TrainModel::lora_on_base(file, ctx, b, &spec, params)
        }
        Method::Full => match params {
            None => TrainModel::from_base(file, ctx, b),
            Some(p) => {
                crate::train::base_config(file, ctx).and_then(|c| TrainModel::from_params(c, b, p))
            }
        },
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
fn compact(x: &mut [u32], y: &mut [u32], pos: &mut [u32], b: usize, t: usize) -> usize {
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
/// `events.jsonl` and to `observe`.
pub fn finetune(
    run: &RunDir,
    recipe: &FinetuneRecipe,
    resume: bool,
    hooks: &Hooks,
    observe: &mut dyn FnMut(&Event),
) -> Result<Outcome, FinetuneError> {
    let _precision = crate::train::precision::Scope::enter(recipe.train.precision);
    let stop_after = hooks.stop_after;
    let mut dump = match &hooks.dump_batches {
        None => None,
        Some(p) => Some(std::fs::File::create(p).map_err(|source| {
            run_err(TrainRunError::Io {
                path: p.clone(),
                source,
            })
        })?),
    };
    let d = load(recipe)?;
    let (b, t, accum) = (
        recipe.train.batch,
        recipe.train.ctx,
        recipe.train.grad_accum,
    );
    let o = &recipe.optim;
    let adam = AdamWConfig {
        beta1: o.beta1,
        beta2: o.beta2,
        eps: o.eps,
        weight_decay: o.weight_decay,
    };
    let n = d.train.samples.len();
    let (mut model, mut opt, batcher, start) = if resume {
        let (step, path) = checkpoint::latest(&run.path).map_err(run_err)?;
        let s = checkpoint::load_state(&path).map_err(run_err)?;
        let h = &s.header;
        let batcher = SftBatcher::from_state(n, (h.data_rng, h.data_epoch, h.data_pos), b, t);
        let mut opt = AdamW::new(s.params.len(), adam);
        (opt.m, opt.v, opt.t) = (s.m, s.v, h.adam_t);
        (model(recipe, &d.file, Some(s.params))?, opt, batcher, step)
    } else {
        let m = model(recipe, &d.file, None)?;
        let opt = AdamW::new(m.params.len(), adam);
        (
            m,
            opt,
            SftBatcher::new(n, recipe.train.seed ^ 0x5F7, b, t),
            0,
        )
    };
    let mut batcher = match recipe.data.shuffle {
        true => batcher,
        false => batcher.in_file_order(),
    };
    let (decay, frozen) = (model.decay_ranges(), model.frozen_ranges());
    let events = run.events_path();
    let mut log = EventLog::append(&events).map_err(|source| {
        run_err(TrainRunError::Io {
            path: events.clone(),
            source,
        })
    })?;
    let mut emit = |e: Event| -> Result<(), FinetuneError> {
        log.write(&e).map_err(|source| {
            run_err(TrainRunError::Io {
                path: events.clone(),
                source,
            })
        })?;
        observe(&e);
        Ok(())
    };
    emit(Event::RunStart {
        config: serde_json::to_value(recipe).unwrap_or_default(),
        time: now(),
        start_step: start,
    })?;
    if start == 0 && hooks.checkpoint_at_start {
        let gguf = save(run, recipe, &d, &model, &opt, &batcher, 0)?;
        emit(Event::Checkpoint {
            step: 0,
            path: gguf.display().to_string(),
        })?;
    }
    if start == 0 {
        let val_loss = eval_nll(&mut model, &d.val);
        emit(Event::Eval {
            step: 0,
            val_loss,
            sample: sample(&mut model, &d.tok, &d.val),
            metrics: None,
        })?;
    }
    let pack = recipe.data.pack;
    let (mut x, mut y) = (vec![0u32; b * t], vec![0u32; b * t]);
    let mut pos = vec![0u32; if pack { b * t } else { 0 }];
    let (mut last_loss, mut last_ckpt) = (f32::NAN, None);
    let total = recipe.train.steps;
    for step in start + 1..=total {
        let t0 = Instant::now();
        model.zero_grad();
        let (mut loss, mut tokens) = (0.0, 0);
        for micro in 0..accum {
            if pack {
                batcher.next_packed(&d.train, &mut x, &mut y, &mut pos);
            } else {
                batcher.next(&d.train, &mut x, &mut y);
            }
            let te = compact(&mut x, &mut y, &mut pos, b, t);
            tokens += b * te;
            if let Some(f) = dump.as_mut() {
                use std::io::Write;
                let ys: Vec<Option<u32>> = y[..b * te]
                    .iter()
                    .map(|&v| (v != IGNORE).then_some(v))
                    .collect();
                let mut line = serde_json::json!({"step": step, "b": b, "t": te, "inputs": &x[..b * te], "targets": ys});
                if pack {
                    line["pos"] = serde_json::json!(&pos[..b * te]);
                }
                writeln!(f, "{line}").map_err(|source| {
                    run_err(TrainRunError::Io {
                        path: PathBuf::from("dump"),
                        source,
                    })
                })?;
            }
            // a fresh mask each micro-batch, the same on resume (a function of the step)
            let p = recipe.finetune.dropout;
            let key = recipe.train.seed ^ ((step * accum + micro) as u64).wrapping_mul(0x2545_F491);
            model.set_dropout((p > 0.0).then(|| Dropout::new(p, key)));
            let (xs, ys, scale) = (&x[..b * te], &y[..b * te], 1.0 / accum as f32);
            // unpacked batches run without their padding where the model can pack
            let varlen = (!pack)
                .then(|| repack_for(&model, xs, ys, (b, te)))
                .flatten();
            loss += if pack {
                model.forward_backward_packed(xs, ys, &pos[..b * te], (b, te), scale)
            } else if let Some(r) = varlen {
                model.forward_backward_packed(&r.x, &r.y, &r.pos, (r.b, r.t), scale)
            } else {
                model.forward_backward_scaled(xs, ys, b, te, scale)
            } / accum as f32;
        }
        for r in &frozen {
            model.grads[r.clone()].fill(0.0);
        }
        let (grad_norm, clip) = clip_factor(&model.grads, o.grad_clip);
        if !loss.is_finite() || !grad_norm.is_finite() {
            let status = format!(
                "failed: the training loss is {loss} (gradient norm {grad_norm}) at step {step}"
            );
            emit(Event::RunEnd { step, status })?;
            return Err(run_err(TrainRunError::NonFinite {
                what: "the training loss",
                value: loss,
                step,
                last_checkpoint: last_ckpt,
            }));
        }
        let lr = lr_at(step - 1, o.warmup, total, o.lr, o.min_lr);
        opt.step_scaled(&mut model.params, &model.grads, clip, lr, &decay);
        last_loss = loss;
        // positions run through the model (padding past the longest row is not run)
        let tok_s = tokens as f64 / t0.elapsed().as_secs_f64().max(1e-9);
        emit(Event::Step {
            step,
            loss,
            lr,
            grad_norm,
            tok_s,
            time: now(),
        })?;
        if step % recipe.eval.interval == 0 || step == total {
            let val_loss = eval_nll(&mut model, &d.val);
            emit(Event::Eval {
                step,
                val_loss,
                sample: sample(&mut model, &d.tok, &d.val),
                metrics: None,
            })?;
        }
        if step % recipe.checkpoint.interval == 0 || step == total {
            let gguf = save(run, recipe, &d, &model, &opt, &batcher, step)?;
            last_ckpt = Some(gguf.clone());
            emit(Event::Checkpoint {
                step,
                path: gguf.display().to_string(),
            })?;
        }
        if stop_after == Some(step) && step < total {
            return Ok(Outcome {
                steps_done: step,
                last_loss,
                last_checkpoint: last_ckpt,
                finished: false,
            });
        }
    }
    emit(Event::RunEnd {
        step: total,
        status: "done".into(),
    })?;
    Ok(Outcome {
        steps_done: total,
        last_loss,
        last_checkpoint: last_ckpt,
        finished: true,
    })
}
