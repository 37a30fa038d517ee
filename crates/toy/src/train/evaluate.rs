//! What a run reports at each evaluation: the loss on fixed validation batches, and a short
//! sample after the recipe's prompt (temperature sampling from a generator seeded by the
//! step, so samples are reproducible and never touch the training state).

use super::dataset::{Batcher, Dataset};
use super::recipe::Recipe;
use super::rng::SplitMix64;
use super::TrainModel;
use crate::tokenizer::Tokenizer;

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
