//! The one training loop every task runs (a language model from scratch, a fine-tune, the
//! image classifier), as llm.c's `train_gpt2.c` has it: per step, the gradient cleared, the
//! task's `grad_accum` micro-batches added into it ([`Task::accumulate`]), the frozen ranges'
//! gradients cleared (a LoRA run's norms), global-norm clipping, AdamW at the scheduled
//! learning rate (linear warm-up, cosine to `min_lr`), a `step` event; every `eval_every`
//! steps and at the end the task's evaluation, every `checkpoint_every` steps and at the end
//! its checkpoint (refused when a weight is not finite). A non-finite loss, gradient norm or
//! weight ends the run with a `run_end` naming the step and the last good checkpoint. A task
//! owns its data, model and checkpoint format; the loop owns the optimizer and the schedule,
//! so all three tasks step, clip, accumulate, log and stop the same way.

use std::ops::Range;
use std::path::PathBuf;
use std::time::Instant;

use tinynn::optim::{clip_factor, lr_at, AdamW, AdamWConfig};

use super::events::{now, Event, EventLog};
use super::outcome::{Outcome, TrainRunError};
use super::recipe::OptimSection;

/// A task's side of a step.
pub trait Task {
    type Error: From<TrainRunError>;

    /// The parameters the optimizer updates and their gradients (same layout).
    fn weights(&mut self) -> (&mut [f32], &mut [f32]);

    /// Adds into the (cleared) gradients that of the mean loss over the `accum` micro-batches
    /// of 1-based step `step`; returns that mean loss and the tokens (or images) it ran.
    fn accumulate(&mut self, step: usize, accum: usize) -> Result<(f32, usize), Self::Error>;

    /// The evaluation after `step` steps, as the event to log.
    fn evaluate(&mut self, step: usize) -> Result<Event, Self::Error>;

    /// Writes the checkpoint after `step` steps (weights and `opt`'s state); returns its
    /// GGUF's path.
    fn checkpoint(&mut self, step: usize, opt: &AdamW) -> Result<PathBuf, Self::Error>;
}

/// When a run steps, evaluates, checkpoints and stops.
#[derive(Clone, Debug)]
pub struct Plan<'a> {
    pub optim: &'a OptimSection,
    /// The run's steps in all (the schedule's length).
    pub steps: usize,
    pub grad_accum: usize,
    pub eval_every: usize,
    pub checkpoint_every: usize,
    /// Return after this step (as an interruption would), if before the end.
    pub stop_after: Option<usize>,
}

/// `events.jsonl` and whoever watches the run (a progress bar, a test). Of several ranks
/// only rank 0 has them: the others' events go nowhere, and they write no checkpoint.
pub struct Events<'a> {
    log: Option<EventLog>,
    observe: &'a mut dyn FnMut(&Event),
}

impl<'a> Events<'a> {
    pub fn new(log: EventLog, observe: &'a mut dyn FnMut(&Event)) -> Self {
        let log = Some(log);
        Self { log, observe }
    }

    /// The run's `events.jsonl` (appended to) on rank 0, nothing on the other ranks.
    pub fn open(
        path: &std::path::Path,
        ranks: &crate::ranks::Ranks,
        observe: &'a mut dyn FnMut(&Event),
    ) -> Result<Self, TrainRunError> {
        let log = match ranks.is_root() {
            true => Some(EventLog::append(path).map_err(|source| TrainRunError::Io {
                path: path.to_path_buf(),
                source,
            })?),
            false => None,
        };
        Ok(Self { log, observe })
    }

    /// Whether this process writes the run folder (the only one, or rank 0).
    pub fn writer(&self) -> bool {
        self.log.is_some()
    }

    pub fn emit(&mut self, e: Event) -> Result<(), TrainRunError> {
        let Some(log) = self.log.as_mut() else {
            return Ok(());
        };
        log.write(&e).map_err(|source| TrainRunError::Io {
            path: log.path().to_path_buf(),
            source,
        })?;
        (self.observe)(&e);
        Ok(())
    }
}

/// AdamW with a recipe's `[optim]` settings.
pub fn adamw(o: &OptimSection, n: usize) -> AdamW {
    let cfg = AdamWConfig {
        beta1: o.beta1,
        beta2: o.beta2,
        eps: o.eps,
        weight_decay: o.weight_decay,
    };
    AdamW::new(n, cfg)
}

/// The loop's own state: the optimizer, which ranges it decays and which it leaves alone, the
/// event log, and what the run has reached.
pub struct Loop<'a> {
    pub events: Events<'a>,
    pub opt: AdamW,
    pub decay: Vec<Range<usize>>,
    pub frozen: Vec<Range<usize>>,
    pub last_loss: f32,
    pub last_checkpoint: Option<PathBuf>,
}

/// How [`Loop::run`] returned: the steps done, and whether they are all the plan's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reached {
    pub steps_done: usize,
    pub finished: bool,
}

impl<'a> Loop<'a> {
    /// Steps `start + 1 ..` of `plan` on `task`. Does not log the run's end when it finishes
    /// (a task may write more first); does when it fails.
    pub fn run<T: Task>(
        &mut self,
        task: &mut T,
        plan: &Plan,
        start: usize,
    ) -> Result<Reached, T::Error> {
        if plan.stop_after.is_some_and(|s| s <= start) && start < plan.steps {
            return Ok(Reached {
                steps_done: start,
                finished: false,
            });
        }
        for step in start + 1..=plan.steps {
            self.step(task, plan, step)?;
            let last = step == plan.steps;
            if step.is_multiple_of(plan.eval_every) || last {
                let e = task.evaluate(step)?;
                self.events.emit(e)?;
            }
            if step.is_multiple_of(plan.checkpoint_every) || last {
                self.checkpoint(task, step)?;
            }
            if plan.stop_after == Some(step) && !last {
                return Ok(Reached {
                    steps_done: step,
                    finished: false,
                });
            }
        }
        Ok(Reached {
            steps_done: plan.steps.max(start),
            finished: true,
        })
    }

    /// One optimizer step (1-based `step`).
    fn step<T: Task>(&mut self, task: &mut T, plan: &Plan, step: usize) -> Result<(), T::Error> {
        let t0 = Instant::now();
        task.weights().1.fill(0.0);
        let (loss, items) = task.accumulate(step, plan.grad_accum)?;
        if !loss.is_finite() {
            return Err(self.fail(step, "the training loss", loss).into());
        }
        let (params, grads) = task.weights();
        for r in &self.frozen {
            grads[r.clone()].fill(0.0);
        }
        let o = plan.optim;
        let (grad_norm, clip) = clip_factor(grads, o.grad_clip);
        if !grad_norm.is_finite() {
            return Err(self.fail(step, "the gradient norm", grad_norm).into());
        }
        let lr = lr_at(step - 1, o.warmup, plan.steps, o.lr, o.min_lr);
        self.opt.step_scaled(params, grads, clip, lr, &self.decay);
        self.last_loss = loss;
        let tok_s = items as f64 / t0.elapsed().as_secs_f64().max(1e-9);
        let time = now();
        self.events.emit(Event::Step {
            step,
            loss,
            lr,
            grad_norm,
            tok_s,
            time,
        })?;
        Ok(())
    }

    /// The task's checkpoint after `step` steps, logged; refused when a weight is not finite.
    pub fn checkpoint<T: Task>(&mut self, task: &mut T, step: usize) -> Result<(), T::Error> {
        if let Some(&bad) = task.weights().0.iter().find(|p| !p.is_finite()) {
            return Err(self.fail(step, "a parameter", bad).into());
        }
        if !self.events.writer() {
            return Ok(());
        }
        let path = task.checkpoint(step, &self.opt)?;
        self.last_checkpoint = Some(path.clone());
        self.events.emit(Event::Checkpoint {
            step,
            path: path.display().to_string(),
        })?;
        Ok(())
    }

    /// What a run of `total` steps that reached `r` ended with; a finished run's `run_end`
    /// is logged.
    pub fn outcome(&mut self, r: Reached, total: usize) -> Result<Outcome, TrainRunError> {
        if r.finished {
            let status = "done".to_string();
            self.events.emit(Event::RunEnd {
                step: total,
                status,
            })?;
        }
        Ok(Outcome {
            steps_done: r.steps_done,
            last_loss: self.last_loss,
            last_checkpoint: self.last_checkpoint.clone(),
            finished: r.finished,
        })
    }

    /// Logs the run's end and returns the error for a non-finite `value`.
    fn fail(&mut self, step: usize, what: &'static str, value: f32) -> TrainRunError {
        let status = format!("failed: {what} is {value} at step {step}");
        if let Err(e) = self.events.emit(Event::RunEnd { step, status }) {
            return e;
        }
        TrainRunError::NonFinite {
            what,
            value,
            step,
            last_checkpoint: self.last_checkpoint.clone(),
        }
    }
}
