//! Training the ViT classifier on a recipe (`recipe.rs`) on the one training loop
//! (`train::driver`: AdamW with linear warm-up and cosine decay, clipping, accumulation),
//! label smoothing, batches made on a worker thread while the step runs,
//! `events.jsonl` (steps with images/s, evaluations with accuracy), a NaN stop, checkpoints
//! (`ckpt-NNNNNN.gguf` with `vit.*` keys, and the `.state` file `toy train --resume`
//! continues from bit for bit) and the final weights as `model.gguf`.

use super::batch::{batch, BatchSpec};
pub use super::recipe::{is_vit_recipe, VitRecipe};
use super::shards::ShardedStep;
use super::vit::{init, smoothed_loss, Vit, VitConfig};
use crate::gguf::{GgufWriter, Value};
use crate::images::{shard, ImageSet};
use crate::infer::sampler::argmax;
use crate::train::checkpoint::{self, Fault, StateHeader, StateView};
use crate::train::driver::{Events, Loop, Plan, Task};
use crate::train::events::{now, Event, EventLog};
use crate::train::rng::SplitMix64;
use std::path::{Path, PathBuf};
use tinynn::optim::{AdamW, AdamWConfig};
use tinynn::quant::GgmlType;

/// Top-1 accuracy, mean loss (unsmoothed) and the predicted classes of `p` on `set`.
pub fn evaluate(vit: &Vit, p: &[f32], set: &ImageSet, spec: &BatchSpec) -> (f32, f32, Vec<u16>) {
    let k = vit.cfg.classes;
    let mut z = super::eval::logits(vit, p, set, spec);
    let preds: Vec<u16> = z.chunks_exact(k).map(|row| argmax(row) as u16).collect();
    let correct = preds
        .iter()
        .zip(&set.labels)
        .filter(|(a, b)| a == b)
        .count();
    let loss = smoothed_loss(&mut z, &set.labels, k, 0.0);
    let n = set.len().max(1) as f64;
    ((correct as f64 / n) as f32, loss, preds)
}

/// Flat ranges of the matrices (weight decay on them, not on biases, norms, CLS, positions).
fn decay_ranges(cfg: &VitConfig) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut off = 0;
    for (name, n) in cfg.layout() {
        let matrix = name.ends_with(".weight") && !name.contains("ln") && !name.starts_with("norm");
        if matrix {
            out.push(off..off + n);
        }
        off += n;
    }
    out
}

/// The weights as GGUF: `general.architecture = "vit"`, the shape under `vit.*`, the class
/// names, and each parameter as an F32 tensor named as [`VitConfig::layout`].
pub fn save(path: &Path, r: &VitRecipe, classes: &[String], p: &[f32]) -> Result<(), String> {
    let mut w = GgufWriter::new();
    let c = &r.vit;
    w.add_metadata("general.architecture", Value::String("vit".into()));
    w.add_metadata("general.name", Value::String(r.name.clone()));
    for (k, v) in [
        ("image_size", c.image),
        ("patch_size", c.patch),
        ("channels", c.channels),
        ("embedding_length", c.width),
        ("block_count", c.depth),
        ("attention.head_count", c.heads),
        ("feed_forward_length", c.mlp),
    ] {
        w.add_metadata(format!("vit.{k}"), Value::U32(v as u32));
    }
    w.add_metadata("vit.pooling", Value::String(c.pool.name().into()));
    let names = classes.iter().map(|s| Value::String(s.clone())).collect();
    w.add_metadata(
        "vit.classes",
        Value::Array(crate::gguf::ValueType::String, names),
    );
    let f32s = |v: &[f32]| {
        Value::Array(
            crate::gguf::ValueType::F32,
            v.iter().map(|&x| Value::F32(x)).collect(),
        )
    };
    w.add_metadata("vit.norm_mean", f32s(&r.data.mean));
    w.add_metadata("vit.norm_std", f32s(&r.data.std));
    let mut off = 0;
    for (name, n) in c.layout() {
        let bytes: Vec<u8> = p[off..off + n]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        w.add_tensor(format!("vit.{name}"), vec![n as u64], GgmlType::F32, bytes)
            .map_err(|e| e.to_string())?;
        off += n;
    }
    w.write_file(path).map_err(|e| e.to_string())
}

/// What a training run ended with.
pub struct VitOutcome {
    /// Steps done (all of them unless `stop_after` stopped the run).
    pub steps: usize,
    pub finished: bool,
    pub val_accuracy: f32,
    pub test_accuracy: Option<f32>,
    /// `model.gguf` when the run finished, else the newest checkpoint.
    pub checkpoint: PathBuf,
    /// The trained parameters (as the checkpoint holds them).
    pub params: Vec<f32>,
}

/// How a run starts and stops.
#[derive(Clone, Debug, Default)]
pub struct VitHooks {
    /// Continue from the run folder's newest complete checkpoint.
    pub resume: bool,
    /// Stop after this many steps, as an interruption would (no extra checkpoint).
    pub stop_after: Option<usize>,
    /// Also checkpoint the initial weights (ckpt-000000), e.g. to start PyTorch from them.
    pub checkpoint_start: bool,
}

/// The parameters, the optimizer and the steps done: fresh, or from the newest checkpoint.
fn start(r: &VitRecipe, run: &Path, resume: bool) -> Result<(Vec<f32>, AdamW, usize), String> {
    let o = r.optim();
    let mut opt = AdamW::new(
        r.vit.n_params(),
        AdamWConfig {
            beta1: o.beta1,
            beta2: o.beta2,
            eps: o.eps,
            weight_decay: o.weight_decay,
        },
    );
    if !resume {
        return Ok((init(&r.vit, r.train.seed), opt, 0));
    }
    let (step, path) = checkpoint::latest(run).map_err(|e| e.to_string())?;
    let s = checkpoint::load_state(&path).map_err(|e| e.to_string())?;
    if s.params.len() != r.vit.n_params() {
        return Err(format!(
            "{}: {} parameters, the recipe's ViT has {}",
            path.display(),
            s.params.len(),
            r.vit.n_params()
        ));
    }
    (opt.m, opt.v, opt.t) = (s.m, s.v, s.header.adam_t);
    Ok((s.params, opt, step))
}

/// Epoch `epoch`'s order of the `n` training images: a Fisher-Yates shuffle drawn from
/// SplitMix64 seeded by (seed, epoch), so other tools can draw the same order
/// (`bench/pytorch/train_vit_torch.py`).
pub fn epoch_order(n: usize, seed: u64, epoch: usize) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..n).collect();
    let mut rng = SplitMix64::new(seed ^ (epoch as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    for i in (1..n).rev() {
        idx.swap(i, rng.below(i as u64 + 1) as usize);
    }
    idx
}

/// The training images of step `step`: batch `step % (n / batch)` of epoch `step / (n / batch)`,
/// the epoch's order drawn once and kept while its steps last.
pub struct Order {
    n: usize,
    batch: usize,
    seed: u64,
    epoch: Option<(usize, Vec<usize>)>,
}

impl Order {
    pub fn new(n: usize, batch: usize, seed: u64) -> Self {
        Self {
            n,
            batch,
            seed,
            epoch: None,
        }
    }

    pub fn step(&mut self, step: usize) -> Vec<usize> {
        let per_epoch = (self.n / self.batch).max(1);
        let (epoch, k) = (step / per_epoch, step % per_epoch);
        if self.epoch.as_ref().is_none_or(|(e, _)| *e != epoch) {
            self.epoch = Some((epoch, epoch_order(self.n, self.seed, epoch)));
        }
        let idx = &self.epoch.as_ref().expect("drawn above").1;
        idx[k * self.batch..((k + 1) * self.batch).min(self.n)].to_vec()
    }
}

/// Writes `ckpt-NNNNNN.gguf`, then its `.state` (the mark of a complete checkpoint).
fn save_checkpoint(
    run: &Path,
    r: &VitRecipe,
    classes: &[String],
    p: &[f32],
    opt: &AdamW,
    step: usize,
) -> Result<PathBuf, String> {
    let gguf = run.join(checkpoint::gguf_name(step));
    save(&gguf, r, classes, p)?;
    let view = StateView {
        header: StateHeader {
            step,
            adam_t: opt.t,
            data_rng: 0,
            n_params: p.len() as u64,
            data_epoch: 0,
            data_pos: 0,
        },
        params: p,
        m: &opt.m,
        v: &opt.v,
    };
    checkpoint::save_state(&run.join(checkpoint::state_name(step)), &view, Fault::None)
        .map_err(|e| e.to_string())?;
    Ok(gguf)
}

/// Train `r` into the run folder `run`; `observe` sees every event as it is logged.
pub fn train(
    r: &VitRecipe,
    run: &Path,
    hooks: &VitHooks,
    mut observe: impl FnMut(&Event),
) -> Result<VitOutcome, String> {
    let train_set = shard::read(&r.data.dir, "train").map_err(|e| e.to_string())?;
    let mut val_set = shard::read(&r.data.dir, "val").map_err(|e| e.to_string())?;
    if r.train.eval_images > 0 && r.train.eval_images < val_set.len() {
        let n = r.train.eval_images;
        val_set.labels.truncate(n);
        val_set
            .pixels
            .truncate(n * val_set.h * val_set.w * val_set.c);
    }
    if train_set.classes.len() != r.vit.classes {
        return Err(format!(
            "{} has {} classes, the recipe's vit.classes is {}",
            r.data.dir.display(),
            train_set.classes.len(),
            r.vit.classes
        ));
    }
    std::fs::create_dir_all(run).map_err(|e| e.to_string())?;
    let _precision = crate::train::precision::Scope::enter(r.train.precision);
    let (p, opt, first) = start(r, run, hooks.resume)?;
    let log = EventLog::append(&run.join("events.jsonl")).map_err(|e| e.to_string())?;
    let mut lp = Loop {
        events: Events::new(log, &mut observe),
        opt,
        decay: decay_ranges(&r.vit),
        frozen: Vec::new(),
        last_loss: f32::NAN,
        last_checkpoint: None,
    };
    lp.events.emit(Event::RunStart {
        config: serde_json::to_value(r).unwrap_or_default(),
        time: now(),
        start_step: first,
    })?;
    let t = &r.train;
    let last_step = hooks
        .stop_after
        .map_or(t.steps, |s| s.clamp(first, t.steps));
    let spec = r.batch_spec(true);
    // the next batch is made on a worker thread while the step runs
    let (tx, rx) = std::sync::mpsc::sync_channel(2);
    let (set_ref, spec_ref) = (&train_set, &spec);
    // the batch receiver is dropped inside the scope, ending the worker thread
    let (p, val_accuracy, vit) = std::thread::scope(|s| -> Result<_, String> {
        s.spawn(move || {
            // micro-batch k of step s is batch s * grad_accum + k of one epoch order
            let mut order = Order::new(set_ref.len(), t.batch, t.seed);
            let accum = t.grad_accum;
            for micro in first * accum..last_step * accum {
                let idx = order.step(micro);
                let b = batch(set_ref, &idx, spec_ref, Some((t.seed, micro as u64)));
                if tx.send(b).is_err() {
                    return;
                }
            }
        });
        // the receiver lives in the task: dropping it ends the thread
        let mut task = VitTask {
            r,
            run,
            vit: Vit::new(r.vit.clone()),
            grads: vec![0.0; p.len()],
            p,
            step_run: ShardedStep::default(),
            rx,
            classes: &train_set.classes,
            val: &val_set,
            val_accuracy: 0.0,
        };
        if hooks.checkpoint_start && first == 0 {
            lp.checkpoint(&mut task, 0)?;
        }
        let plan = Plan {
            optim: r.optim(),
            steps: t.steps,
            grad_accum: t.grad_accum,
            eval_every: t.eval_every,
            checkpoint_every: r.checkpoint_every(),
            stop_after: hooks.stop_after,
        };
        lp.run(&mut task, &plan, first)?;
        Ok((task.p, task.val_accuracy, task.vit))
    })?;
    let finished = last_step == t.steps;
    let mut out = VitOutcome {
        steps: last_step,
        finished,
        val_accuracy,
        test_accuracy: None,
        checkpoint: lp.last_checkpoint.clone().unwrap_or(run.join("model.gguf")),
        params: Vec::new(),
    };
    if finished {
        out.checkpoint = run.join("model.gguf");
        save(&out.checkpoint, r, &train_set.classes, &p)?;
        if let Ok(test) = shard::read(&r.data.dir, "test") {
            let plain = r.batch_spec(false);
            out.test_accuracy = Some(evaluate(&vit, &p, &test, &plain).0);
        }
        lp.events.emit(Event::RunEnd {
            step: t.steps,
            status: "done".into(),
        })?;
    }
    out.params = p;
    Ok(out)
}

/// The image classifier as a task of the one training loop (`train::driver`).
struct VitTask<'a> {
    r: &'a VitRecipe,
    run: &'a Path,
    vit: Vit,
    p: Vec<f32>,
    grads: Vec<f32>,
    step_run: ShardedStep,
    /// Batches (images, labels) from the worker thread, in step order.
    rx: std::sync::mpsc::Receiver<(Vec<f32>, Vec<u16>)>,
    classes: &'a [String],
    val: &'a ImageSet,
    val_accuracy: f32,
}

impl Task for VitTask<'_> {
    type Error = String;

    fn weights(&mut self) -> (&mut [f32], &mut [f32]) {
        (&mut self.p, &mut self.grads)
    }

    /// The gradient of the mean smoothed loss over `accum` batches of the worker thread.
    fn accumulate(&mut self, _step: usize, accum: usize) -> Result<(f32, usize), String> {
        let (mut loss, mut images) = (0.0, 0);
        let eps = self.r.train.label_smoothing;
        for _ in 0..accum {
            let (x, y) = self
                .rx
                .recv()
                .map_err(|_| "the batch thread stopped".to_string())?;
            loss += self
                .step_run
                .run(&self.vit, &self.p, &x, &y, eps, &mut self.grads);
            images += y.len();
        }
        if accum > 1 {
            let s = 1.0 / accum as f32;
            self.grads.iter_mut().for_each(|g| *g *= s);
        }
        Ok((loss / accum as f32, images))
    }

    /// Top-1 accuracy and the loss on the validation images.
    fn evaluate(&mut self, step: usize) -> Result<Event, String> {
        let plain = self.r.batch_spec(false);
        let (acc, val_loss, _) = evaluate(&self.vit, &self.p, self.val, &plain);
        self.val_accuracy = acc;
        let metrics = crate::train::events::EvalMetrics {
            name: "accuracy".into(),
            model: "vit".into(),
            data: format!("{}/val", self.r.data.dir.display()),
            results: serde_json::json!({"top1": acc, "images": self.val.len()}),
            time: now(),
        };
        Ok(Event::Eval {
            step,
            val_loss,
            sample: format!("val accuracy {:.2}%", 100.0 * acc),
            metrics: Some(metrics),
        })
    }

    fn checkpoint(&mut self, step: usize, opt: &AdamW) -> Result<PathBuf, String> {
        save_checkpoint(self.run, self.r, self.classes, &self.p, opt, step)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn each_epoch_visits_every_image_once_in_a_new_order() {
        let epoch = |e: usize| -> Vec<usize> {
            (0..5)
                .flat_map(|k| super::Order::new(50, 10, 3).step(5 * e + k))
                .collect()
        };
        let (a, b) = (epoch(0), epoch(1));
        let mut sorted = a.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..50).collect::<Vec<_>>());
        assert_ne!(a, b);
        assert_eq!(a, epoch(0), "the same order for the same seed and epoch");
    }
}
