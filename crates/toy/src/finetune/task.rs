//! A fine-tune as a task of the one training loop (`train::driver`): its micro-batches of
//! SFT samples (packed, or cut after their longest row and run without their padding where
//! the model can), the adapters' dropout mask per micro-batch, the held-out NLL and a sample
//! as its evaluation, and its checkpoints (`save.rs`).

use super::evaluate::{eval_nll, sample};
use super::load::{compact, run_err, FinetuneError, Loaded};
use super::recipe::FinetuneRecipe;
use super::repack::repack_for;
use super::save::save;
use super::sft::IGNORE;
use super::sft_batch::SftBatcher;
use crate::train::driver::Task;
use crate::train::events::Event;
use crate::train::run::RunDir;
use crate::train::trainer::TrainRunError;
use crate::train::TrainModel;
use std::path::PathBuf;
use tinynn::layers::dropout::Dropout;
use tinynn::optim::AdamW;

pub(super) struct FtTask<'a> {
    pub run: &'a RunDir,
    pub recipe: &'a FinetuneRecipe,
    pub d: Loaded,
    pub model: TrainModel,
    pub batcher: SftBatcher,
    /// Where every micro-batch is written as a JSON line, if asked.
    pub dump: Option<std::fs::File>,
    /// One micro-batch's inputs, targets and (packed) positions (B, T).
    pub x: Vec<u32>,
    pub y: Vec<u32>,
    pub pos: Vec<u32>,
}

impl FtTask<'_> {
    /// Micro-batch `micro` of `step` as a JSON line `{"step","b","t","inputs","targets"}`.
    fn dump(&mut self, step: usize, b: usize, te: usize) -> Result<(), FinetuneError> {
        let Some(f) = self.dump.as_mut() else {
            return Ok(());
        };
        use std::io::Write;
        let ys: Vec<Option<u32>> = self.y[..b * te]
            .iter()
            .map(|&v| (v != IGNORE).then_some(v))
            .collect();
        let mut line = serde_json::json!({"step": step, "b": b, "t": te, "inputs": &self.x[..b * te], "targets": ys});
        if self.recipe.data.pack {
            line["pos"] = serde_json::json!(&self.pos[..b * te]);
        }
        writeln!(f, "{line}").map_err(|source| {
            run_err(TrainRunError::Io {
                path: PathBuf::from("dump"),
                source,
            })
        })
    }
}

impl Task for FtTask<'_> {
    type Error = FinetuneError;

    fn weights(&mut self) -> (&mut [f32], &mut [f32]) {
        (&mut self.model.params, &mut self.model.grads)
    }

    fn accumulate(&mut self, step: usize, accum: usize) -> Result<(f32, usize), FinetuneError> {
        let (b, t) = (self.recipe.train.batch, self.recipe.train.ctx);
        let pack = self.recipe.data.pack;
        let (mut loss, mut tokens) = (0.0, 0);
        for micro in 0..accum {
            if pack {
                let (x, y, pos) = (&mut self.x, &mut self.y, &mut self.pos);
                self.batcher.next_packed(&self.d.train, x, y, pos);
            } else {
                self.batcher.next(&self.d.train, &mut self.x, &mut self.y);
            }
            let te = compact(&mut self.x, &mut self.y, &mut self.pos, b, t);
            // positions run through the model (padding past the longest row is not run)
            tokens += b * te;
            self.dump(step, b, te)?;
            // a fresh mask each micro-batch, the same on resume (a function of the step)
            let p = self.recipe.finetune.dropout;
            let seed = self.recipe.train.seed;
            let key = seed ^ ((step * accum + micro) as u64).wrapping_mul(0x2545_F491);
            let model = &mut self.model;
            model.set_dropout((p > 0.0).then(|| Dropout::new(p, key)));
            let (xs, ys, scale) = (&self.x[..b * te], &self.y[..b * te], 1.0 / accum as f32);
            // unpacked batches run without their padding where the model can pack
            let varlen = (!pack)
                .then(|| repack_for(model, xs, ys, (b, te)))
                .flatten();
            loss += if pack {
                model.forward_backward_packed(xs, ys, &self.pos[..b * te], (b, te), scale)
            } else if let Some(r) = varlen {
                model.forward_backward_packed(&r.x, &r.y, &r.pos, (r.b, r.t), scale)
            } else {
                model.forward_backward_scaled(xs, ys, b, te, scale)
            } / accum as f32;
        }
        self.model.finish_grads();
        Ok((loss, tokens))
    }

    /// The held-out assistant tokens' mean NLL, and a sample.
    fn evaluate(&mut self, step: usize) -> Result<Event, FinetuneError> {
        let val_loss = eval_nll(&mut self.model, &self.d.val);
        Ok(Event::Eval {
            step,
            val_loss,
            sample: sample(&mut self.model, &self.d.tok, &self.d.val),
            metrics: None,
        })
    }

    fn checkpoint(&mut self, step: usize, opt: &AdamW) -> Result<PathBuf, FinetuneError> {
        let (run, recipe) = (self.run, self.recipe);
        save(run, recipe, &self.d, &self.model, opt, &self.batcher, step)
    }
}
