//! A fine-tuning run's evaluations: the mean negative log-likelihood of the held-out assistant
//! tokens (each sample once, token-weighted, as the validation figure of SFT trainers such as
//! TRL's; padded batches run packed, as the training steps do), and a greedy reply to the
//! first held-out prompt to show what the model now says.

use super::repack::repack_for;
use super::sft::{SftSet, IGNORE};
use crate::tokenizer::Tokenizer;
use crate::train::TrainModel;

/// Mean negative log-likelihood of the trained (assistant) tokens of `set`, each sample once.
pub fn eval_nll(model: &mut TrainModel, set: &SftSet) -> f32 {
    let b = model.batch();
    let (mut sum, mut count) = (0f64, 0usize);
    for chunk in set.samples.chunks(b) {
        let t = chunk
            .iter()
            .map(|s| s.tokens.len() - 1)
            .max()
            .unwrap_or(1)
            .max(1);
        let (mut x, mut y) = (vec![0u32; chunk.len() * t], vec![IGNORE; chunk.len() * t]);
        for (r, s) in chunk.iter().enumerate() {
            for i in 0..s.tokens.len() - 1 {
                x[r * t + i] = s.tokens[i];
                y[r * t + i] = if s.train[i + 1] {
                    s.tokens[i + 1]
                } else {
                    IGNORE
                };
            }
        }
        let n = y.iter().filter(|&&v| v != IGNORE).count();
        if n == 0 {
            continue;
        }
        // without the padding where the model can pack, as the training steps (repack.rs)
        let loss = match repack_for(model, &x, &y, (chunk.len(), t)) {
            Some(p) => model.forward_loss_packed(&p.x, &p.y, &p.pos, (p.b, p.t)),
            None => model.forward_loss(&x, &y, chunk.len(), t),
        };
        sum += loss as f64 * n as f64;
        count += n;
    }
    (sum / count.max(1) as f64) as f32
}

/// Greedy reply (up to 32 tokens) to the first validation sample's prompt.
pub(super) fn sample(model: &mut TrainModel, tok: &Tokenizer, val: &SftSet) -> String {
    let s = &val.samples[0];
    let start = s.train.iter().position(|&t| t).unwrap_or(s.tokens.len());
    let mut ids = s.tokens[..start].to_vec();
    let ctx = model.cfg.ctx;
    for _ in 0..32 {
        let window = &ids[ids.len().saturating_sub(ctx)..];
        let l = model.logits_last(window);
        let next = (0..l.len())
            .max_by(|&a, &b| l[a].total_cmp(&l[b]))
            .unwrap_or(0) as u32;
        if tok.is_eog(next) {
            break;
        }
        ids.push(next);
    }
    tok.decode(&ids[start..])
}
