//! Training the ViT classifier: a recipe (`[vit]` shape, `[data]` shards of `toy data images`
//! and their batches, `[train]` schedule), AdamW with linear warm-up and cosine decay, label
//! smoothing, batches made on a worker thread while the step runs, `events.jsonl` (steps with
//! images/s, evaluations with accuracy), a NaN stop, and the weights as GGUF (`vit.*` keys).

use super::batch::{batch, BatchSpec};
use super::vit::{init, smoothed_loss, Vit, VitActs, VitConfig};
use crate::gguf::{GgufWriter, Value};
use crate::images::{shard, ImageSet};
use crate::infer::sampler::argmax;
use crate::train::events::{now, Event, EventLog};
use std::path::{Path, PathBuf};
use tinynn::optim::{lr_at, AdamW, AdamWConfig};
use tinynn::quant::GgmlType;

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VitRecipe {
    pub name: String,
    pub vit: VitConfig,
    pub data: VitData,
    pub train: VitTrain,
}

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VitData {
    /// Shards written by `toy data images`.
    pub dir: PathBuf,
    pub mean: Vec<f32>,
    pub std: Vec<f32>,
    #[serde(default)]
    pub crop_pad: usize,
    #[serde(default)]
    pub flip: bool,
}

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VitTrain {
    pub batch: usize,
    pub steps: usize,
    pub lr: f32,
    #[serde(default)]
    pub min_lr: f32,
    pub warmup: usize,
    pub weight_decay: f32,
    #[serde(default)]
    pub label_smoothing: f32,
    pub eval_every: usize,
    #[serde(default)]
    pub seed: u64,
}

/// Whether a recipe's TOML trains the image classifier (it has a `[vit]` table).
pub fn is_vit_recipe(text: &str) -> bool {
    text.parse::<toml::Table>()
        .is_ok_and(|t| t.contains_key("vit"))
}

impl VitRecipe {
    pub fn from_toml(text: &str) -> Result<Self, String> {
        let r: VitRecipe = toml::from_str(text).map_err(|e| e.to_string())?;
        r.vit.check()?;
        let ch = r.vit.channels;
        if r.data.mean.len() != ch || r.data.std.len() != ch {
            return Err(format!(
                "data.mean and data.std need {ch} entries (one per channel)"
            ));
        }
        if r.train.batch == 0 || r.train.steps == 0 || r.train.eval_every == 0 {
            return Err("train.batch, train.steps and train.eval_every must be at least 1".into());
        }
        Ok(r)
    }

    pub fn batch_spec(&self, augment: bool) -> BatchSpec {
        BatchSpec {
            size: self.vit.image,
            channels: self.vit.channels,
            mean: self.data.mean.clone(),
            std: self.data.std.clone(),
            crop_pad: if augment { self.data.crop_pad } else { 0 },
            flip: augment && self.data.flip,
        }
    }
}

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
    pub steps: usize,
    pub val_accuracy: f32,
    pub test_accuracy: Option<f32>,
    pub checkpoint: PathBuf,
    /// The trained parameters (as the checkpoint holds them).
    pub params: Vec<f32>,
}

/// Train `r` into the run folder `run`; `observe` sees every event as it is logged.
pub fn train(
    r: &VitRecipe,
    run: &Path,
    mut observe: impl FnMut(&Event),
) -> Result<VitOutcome, String> {
    let train_set = shard::read(&r.data.dir, "train").map_err(|e| e.to_string())?;
    let val_set = shard::read(&r.data.dir, "val").map_err(|e| e.to_string())?;
    if train_set.classes.len() != r.vit.classes {
        return Err(format!(
            "{} has {} classes, the recipe's vit.classes is {}",
            r.data.dir.display(),
            train_set.classes.len(),
            r.vit.classes
        ));
    }
    std::fs::create_dir_all(run).map_err(|e| e.to_string())?;
    let mut log = EventLog::append(&run.join("events.jsonl")).map_err(|e| e.to_string())?;
    let mut emit = |e: Event| -> Result<(), String> {
        log.write(&e).map_err(|e| e.to_string())?;
        observe(&e);
        Ok(())
    };
    let config = serde_json::to_value(r).unwrap_or_default();
    emit(Event::RunStart {
        config,
        time: now(),
        start_step: 0,
    })?;
    let vit = Vit::new(r.vit.clone());
    let mut p = init(&r.vit, r.train.seed);
    let mut opt = AdamW::new(
        p.len(),
        AdamWConfig {
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: r.train.weight_decay,
        },
    );
    let decay = decay_ranges(&r.vit);
    let (spec, plain) = (r.batch_spec(true), r.batch_spec(false));
    let t = &r.train;
    // the next batch is made on a worker thread while the step runs
    let (tx, rx) = std::sync::mpsc::sync_channel(2);
    let order = |step: usize| -> Vec<usize> {
        use rand::seq::SliceRandom;
        use rand::SeedableRng;
        let per_epoch = train_set.len() / t.batch;
        let (epoch, k) = (step / per_epoch.max(1), step % per_epoch.max(1));
        let mut idx: Vec<usize> = (0..train_set.len()).collect();
        idx.shuffle(&mut rand::rngs::StdRng::seed_from_u64(
            t.seed ^ (epoch as u64 + 1),
        ));
        idx[k * t.batch..((k + 1) * t.batch).min(idx.len())].to_vec()
    };
    let mut last = VitOutcome {
        steps: 0,
        val_accuracy: 0.0,
        test_accuracy: None,
        checkpoint: run.join("model.gguf"),
        params: Vec::new(),
    };
    let (set_ref, spec_ref, order_ref) = (&train_set, &spec, &order);
    std::thread::scope(|s| -> Result<(), String> {
        // the receiver lives in this closure: an early return drops it, ending the thread
        let rx = rx;
        s.spawn(move || {
            for step in 0..t.steps {
                let idx = order_ref(step);
                if tx
                    .send(batch(set_ref, &idx, spec_ref, Some((t.seed, step as u64))))
                    .is_err()
                {
                    return;
                }
            }
        });
        let mut a = VitActs::default();
        let mut grads = vec![0.0; p.len()];
        for step in 0..t.steps {
            let (x, y) = rx
                .recv()
                .map_err(|_| "the batch thread stopped".to_string())?;
            let ts = std::time::Instant::now();
            vit.forward(&p, &x, y.len(), &mut a);
            let mut dl = a.logits.clone();
            let loss = smoothed_loss(&mut dl, &y, r.vit.classes, t.label_smoothing);
            if !loss.is_finite() {
                emit(Event::RunEnd {
                    step,
                    status: format!("failed: loss is {loss} at step {}", step + 1),
                })?;
                return Err(format!("the loss became {loss} at step {}", step + 1));
            }
            grads.fill(0.0);
            vit.backward(&p, &a, &dl, &mut grads, y.len());
            let grad_norm = grads
                .iter()
                .map(|g| (*g as f64).powi(2))
                .sum::<f64>()
                .sqrt() as f32;
            let lr = lr_at(step, t.warmup, t.steps, t.lr, t.min_lr);
            opt.step(&mut p, &grads, lr, &decay);
            let img_s = y.len() as f64 / ts.elapsed().as_secs_f64().max(1e-9);
            emit(Event::Step {
                step: step + 1,
                loss,
                lr,
                grad_norm,
                tok_s: img_s,
                time: now(),
            })?;
            let done = step + 1 == t.steps;
            if (step + 1) % t.eval_every == 0 || done {
                let (acc, val_loss, _) = evaluate(&vit, &p, &val_set, &plain);
                let metrics = crate::train::events::EvalMetrics {
                    name: "accuracy".into(),
                    model: "vit".into(),
                    data: format!("{}/val", r.data.dir.display()),
                    results: serde_json::json!({"top1": acc, "images": val_set.len()}),
                    time: now(),
                };
                emit(Event::Eval {
                    step: step + 1,
                    val_loss,
                    sample: format!("val accuracy {:.2}%", 100.0 * acc),
                    metrics: Some(metrics),
                })?;
                last.val_accuracy = acc;
            }
        }
        last.steps = t.steps;
        Ok(())
    })?;
    save(&last.checkpoint, r, &train_set.classes, &p)?;
    emit(Event::Checkpoint {
        step: t.steps,
        path: last.checkpoint.display().to_string(),
    })?;
    if let Ok(test) = shard::read(&r.data.dir, "test") {
        last.test_accuracy = Some(evaluate(&vit, &p, &test, &plain).0);
    }
    emit(Event::RunEnd {
        step: t.steps,
        status: "done".into(),
    })?;
    last.params = p;
    Ok(last)
}
