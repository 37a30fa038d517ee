//! Perplexity by llama.cpp's `llama-perplexity` method (tools/perplexity/perplexity.cpp,
//! llama.cpp 0c1e570): cut the tokens into chunks of `ctx`, evaluate each chunk from an empty
//! cache with its first token replaced by BOS when the model adds one, and average the
//! negative log-likelihood of the second half of each chunk (positions ctx/2 .. ctx-2
//! predicting their successors). The error estimate is llama.cpp's:
//! sqrt(var(nll) / (n - 1)) * ppl. `eval::kld` scores the same positions.

use crate::model::{Logits, Model, ModelError, State};
use tinynn::kernels::act::log_sum_exp;

#[derive(Clone, Debug, serde::Serialize)]
pub struct Perplexity {
    pub ppl: f64,
    pub stderr: f64,
    pub chunks: usize,
    /// Tokens evaluated (chunks * ctx).
    pub tokens: usize,
}

/// The first scored position of a chunk of `ctx`: the first half only gives context.
pub fn first_scored(ctx: usize) -> usize {
    ctx / 2
}

/// How many positions of a chunk of `ctx` are scored (ctx/2 .. ctx-2, each predicting the
/// next token): llama.cpp's `n_ctx - 1 - n_ctx/2`.
pub fn n_scored(ctx: usize) -> usize {
    ctx - 1 - first_scored(ctx)
}

/// The whole chunks of `ctx` in `n_tokens` tokens; an error when there is none or `ctx` is
/// too small to score anything.
pub fn n_chunks(n_tokens: usize, ctx: usize) -> Result<usize, ModelError> {
    if ctx < 4 {
        return Err(ModelError::ContextOverflow { pos: 0, n: 4, ctx });
    }
    match n_tokens / ctx {
        0 => Err(ModelError::ContextOverflow {
            pos: 0,
            n: n_tokens,
            ctx,
        }),
        n => Ok(n),
    }
}

/// The logits of the scored positions of one chunk ((n_scored(ctx), V), row j predicting
/// `chunk[first_scored + j + 1]`), evaluated as llama-perplexity does: from an empty cache,
/// with `chunk[0]` replaced by `bos` when given. `state` must hold `chunk.len()` positions.
pub fn scored_logits<'s>(
    model: &Model,
    state: &'s mut State,
    chunk: &[u32],
    bos: Option<u32>,
) -> Result<&'s [f32], ModelError> {
    let ctx = chunk.len();
    let mut input = chunk.to_vec();
    if let (Some(b), Some(t0)) = (bos, input.first_mut()) {
        *t0 = b;
    }
    state.reset();
    let logits = model.forward(state, &input, Logits::All)?;
    let v = model.cfg.vocab;
    Ok(&logits[first_scored(ctx) * v..(ctx - 1) * v])
}

/// Perplexity of `tokens` with chunks of `ctx` (`bos`: see [`scored_logits`]);
/// `progress(done, total, ppl so far)` after each chunk.
pub fn perplexity(
    model: &Model,
    tokens: &[u32],
    ctx: usize,
    bos: Option<u32>,
    mut progress: impl FnMut(usize, usize, f64),
) -> Result<Perplexity, ModelError> {
    let chunks = n_chunks(tokens.len(), ctx)?;
    let mut state = model.new_state(ctx, ctx);
    let v = model.cfg.vocab;
    let first = first_scored(ctx);
    let (mut nll, mut nll2, mut count) = (0f64, 0f64, 0usize);
    for c in 0..chunks {
        let chunk = &tokens[c * ctx..(c + 1) * ctx];
        let logits = scored_logits(model, &mut state, chunk, bos)?;
        for (j, row) in logits.chunks_exact(v).enumerate() {
            let lp = row[chunk[first + j + 1] as usize] as f64 - log_sum_exp(row);
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
