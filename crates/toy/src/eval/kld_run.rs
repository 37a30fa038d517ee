//! Running a model for `toy eval kld`, chunk by chunk as llama-perplexity does (llama.cpp
//! 0c1e570, tools/perplexity/perplexity.cpp: `perplexity` with `--kl-divergence-base`, and
//! `kl_divergence`): `save_base` writes the model's log-probs of every scored position as a
//! base (`eval::kld_base`), `kl_divergence` scores a model against one (`eval::kld`).

use crate::eval::kld::{mean_unc, KldAccum, KldStats};
use crate::eval::kld_base::{
    encode_row, BaseHeader, BaseReader, BaseRow, BaseWriter, KldBaseError,
};
use crate::eval::perplexity::{first_scored, n_chunks, n_scored, scored_logits, Perplexity};
use crate::model::{Arch, Model, ModelError};
use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum KldError {
    #[error(transparent)]
    Base(#[from] KldBaseError),
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error("'{path}' holds log-probs over {base} tokens, but the model's vocabulary has {model}: the base was made with another model family")]
    Vocab {
        path: String,
        base: usize,
        model: usize,
    },
    #[error("'{path}' holds token id {id}, out of the model's vocabulary of {vocab}")]
    Token { path: String, id: u32, vocab: usize },
    #[error("'{path}' was made with chunks of {n_ctx} tokens, but the model has learned positions for only {max}")]
    Ctx {
        path: String,
        n_ctx: usize,
        max: usize,
    },
}
/// Evaluate `tokens` in chunks of `ctx` (at most `max_chunks`) and write the model's
/// log-probs of every scored position to `path` as a base; returns its perplexity.
/// `bos` and the chunking are llama-perplexity's (see `eval::perplexity`).
pub fn save_base(
    model: &Model,
    tokens: &[u32],
    ctx: usize,
    max_chunks: Option<usize>,
    bos: Option<u32>,
    path: &Path,
    mut progress: impl FnMut(usize, usize, f64),
) -> Result<Perplexity, KldError> {
    let n_chunk = n_chunks(tokens.len(), ctx)?.min(max_chunks.unwrap_or(usize::MAX).max(1));
    let v = model.cfg.vocab;
    let header = BaseHeader {
        n_ctx: ctx,
        n_vocab: v,
        n_chunk,
        tokens: tokens[..n_chunk * ctx].to_vec(),
    };
    let (row_len, first) = (header.row_len(), first_scored(ctx));
    let mut rows = vec![0u16; header.chunk_len()];
    let mut w = BaseWriter::create(path, header)?;
    let mut state = model.new_state(ctx, ctx);
    let (mut nll, mut nll2, mut count) = (0f64, 0f64, 0usize);
    for c in 0..n_chunk {
        let chunk = &tokens[c * ctx..(c + 1) * ctx];
        let logits = scored_logits(model, &mut state, chunk, bos)?;
        for (j, (row, out)) in logits
            .chunks_exact(v)
            .zip(rows.chunks_exact_mut(row_len))
            .enumerate()
        {
            let x = encode_row(row, chunk[first + j + 1] as usize, out);
            nll += x;
            nll2 += x * x;
            count += 1;
        }
        w.write_chunk(&rows)?;
        progress(c + 1, n_chunk, (nll / count as f64).exp());
    }
    w.finish()?;
    let est = mean_unc(nll, nll2, count);
    Ok(Perplexity {
        ppl: est.value.exp(),
        stderr: est.value.exp() * est.unc,
        chunks: n_chunk,
        tokens: n_chunk * ctx,
    })
}

/// Score `model` against `base` (at most `max_chunks` of its chunks);
/// `progress(done, total, &accum)` after each chunk.
pub fn kl_divergence(
    model: &Model,
    base: &mut BaseReader,
    max_chunks: Option<usize>,
    bos: Option<u32>,
    mut progress: impl FnMut(usize, usize, &KldAccum),
) -> Result<KldStats, KldError> {
    let h = base.header.clone();
    let path = base.path().display().to_string();
    let v = model.cfg.vocab;
    if h.n_vocab != v {
        return Err(KldError::Vocab {
            path,
            base: h.n_vocab,
            model: v,
        });
    }
    if let Some(&id) = h.tokens.iter().find(|&&t| t as usize >= v) {
        return Err(KldError::Token { path, id, vocab: v });
    }
    let (ctx, row_len, first) = (h.n_ctx, h.row_len(), first_scored(h.n_ctx));
    if model.cfg.arch == Arch::Gpt2 && ctx > model.cfg.ctx_train {
        let max = model.cfg.ctx_train;
        return Err(KldError::Ctx {
            path,
            n_ctx: ctx,
            max,
        });
    }
    let n_chunk = h.n_chunk.min(max_chunks.unwrap_or(usize::MAX).max(1));
    let mut state = model.new_state(ctx, ctx);
    let mut rows = Vec::with_capacity(h.chunk_len());
    let mut acc = KldAccum::default();
    for c in 0..n_chunk {
        base.read_chunk(&mut rows)?;
        let chunk = &h.tokens[c * ctx..(c + 1) * ctx];
        let logits = scored_logits(model, &mut state, chunk, bos)?;
        for (j, (row, stored)) in logits
            .chunks_exact(v)
            .zip(rows.chunks_exact(row_len))
            .enumerate()
        {
            acc.add(row, BaseRow::new(stored, v), chunk[first + j + 1] as usize);
        }
        progress(c + 1, n_chunk, &acc);
    }
    debug_assert_eq!(acc.count(), n_chunk * n_scored(ctx));
    Ok(KldStats {
        chunks: n_chunk,
        n_ctx: ctx,
        ..acc.finish()
    })
}
