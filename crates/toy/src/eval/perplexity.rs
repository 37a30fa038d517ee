//! Perplexity by llama.cpp's `llama-perplexity` method: cut the tokens into chunks of `ctx`,
//! evaluate each chunk from an empty cache, and average the negative log-likelihood of the
//! second half of each chunk (positions ctx/2 .. ctx-2 predicting their successors).
//! The error estimate is llama.cpp's: sqrt(var(nll) / (n - 1)) * ppl.

use crate::model::{Logits, Model, ModelError};
use tinynn::kernels::act::log_sum_exp;

#[derive(Clone, Debug, serde::Serialize)]
pub struct Perplexity {
    pub ppl: f64,
    pub stderr: f64,
    pub chunks: usize,
    /// Tokens evaluated (chunks * ctx).
    pub tokens: usize,
}

/// Perplexity of `tokens` with chunks of `ctx`; `progress(done, total)` after each chunk.
pub fn perplexity(
    model: &Model,
    tokens: &[u32],
    ctx: usize,
    mut progress: impl FnMut(usize, usize, f64),
) -> Result<Perplexity, ModelError> {
    if ctx < 4 {
        return Err(ModelError::ContextOverflow { pos: 0, n: 4, ctx });
    }
    let chunks = tokens.len() / ctx;
    if chunks == 0 {
        return Err(ModelError::ContextOverflow {
            pos: 0,
            n: tokens.len(),
            ctx,
        });
    }
    let mut state = model.new_state(ctx, ctx);
    let v = model.cfg.vocab;
    let (mut nll, mut nll2, mut count) = (0f64, 0f64, 0usize);
    for c in 0..chunks {
        let chunk = &tokens[c * ctx..(c + 1) * ctx];
        state.reset();
        let logits = model.forward(&mut state, chunk, Logits::All)?;
        for j in ctx / 2..ctx - 1 {
            let row = &logits[j * v..(j + 1) * v];
            let lp = row[chunk[j + 1] as usize] as f64 - log_sum_exp(row);
            nll -= lp;
            nll2 += lp * lp;
            count += 1;
        }
        progress(c + 1, chunks, (nll / count as f64).exp());
    }
    let mean = nll / count as f64;
    let var = nll2 / count as f64 - mean * mean;
    let ppl = mean.exp();
    let stderr = if var > 0.0 {
        (var / (count as f64 - 1.0)).sqrt() * ppl
    } else {
        0.0
    };
    Ok(Perplexity {
        ppl,
        stderr,
        chunks,
        tokens: chunks * ctx,
    })
}
