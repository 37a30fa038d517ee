//! Greedy speculative decoding (Leviathan, Kalman, Matias 2023; prompt lookup, Saxena 2023):
//! a cheap drafter proposes up to `draft_max` tokens, the target checks them all in one
//! batched forward, keeps the longest prefix it would have chosen itself plus its own next
//! token, and its KV cache forgets the rest. Under greedy decoding the output is the target's
//! alone, token for token. The drafters: `Ngram` (the tokens that followed the latest earlier
//! occurrence of the context's last n tokens, no model) and `Model` (a small model with the
//! target's vocabulary, greedy). Sampling with the rejection rule is not built here.

use super::generate::{check_prompt, Emitter, GenerateOptions, Generation};
use super::sampler::Sampler;
use crate::gguf::GgufFile;
use crate::model::{Logits, Model, ModelError, State};
use crate::tokenizer::Tokenizer;
use std::time::Instant;

pub enum Drafter<'a> {
    /// Prompt lookup on the last `n` (down to 1) tokens.
    Ngram { n: usize },
    /// A draft model and its state (holding what the target holds, or less).
    Model { model: &'a Model, state: Box<State> },
}

#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct SpecStats {
    /// Tokens the drafter proposed, and how many the target kept.
    pub drafted: usize,
    pub accepted: usize,
    /// Batched target forwards (each yields accepted + 1 tokens).
    pub rounds: usize,
}

/// Up to `k` tokens that followed the latest earlier occurrence of the last `n` (then fewer)
/// tokens of `hist`.
pub fn ngram_draft(hist: &[u32], n: usize, k: usize) -> Vec<u32> {
    for m in (1..=n.min(hist.len().saturating_sub(1))).rev() {
        let tail = &hist[hist.len() - m..];
        if let Some(at) = (0..hist.len() - m).rev().find(|&i| &hist[i..i + m] == tail) {
            let from = at + m;
            return hist[from..(from + k).min(hist.len())].to_vec();
        }
    }
    Vec::new()
}

impl Drafter<'_> {
    /// Up to `k` tokens to follow `hist` (the prompt and what was generated).
    fn propose(&mut self, hist: &[u32], k: usize) -> Result<Vec<u32>, ModelError> {
        match self {
            Drafter::Ngram { n } => Ok(ngram_draft(hist, *n, k)),
            Drafter::Model { model, state } => {
                // catch up on what the target kept, then draft greedily
                let have = state.pos().min(hist.len() - 1);
                state.cache.truncate(have);
                let have = state.pos();
                let room = state.cache.ctx.saturating_sub(hist.len());
                let mut logits = model.forward(state, &hist[have..], Logits::Last)?.to_vec();
                let mut out = Vec::new();
                while out.len() < k.min(room) {
                    let id = argmax(&logits);
                    out.push(id);
                    if out.len() == k.min(room) {
                        break;
                    }
                    logits.copy_from_slice(model.forward(state, &[id], Logits::Last)?);
                }
                Ok(out)
            }
        }
    }
}

/// A draft must share the target's vocabulary, as llama.cpp checks it: the same tokenizer
/// type, special token ids and tokens.
pub fn check_draft_vocab(target: &GgufFile, draft: &GgufFile) -> Result<(), ModelError> {
    for key in [
        "tokenizer.ggml.model",
        "tokenizer.ggml.bos_token_id",
        "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.tokens",
    ] {
        if target.get(key) != draft.get(key) {
            return Err(ModelError::Speculative(format!(
                "the draft's {key} differs from the target's: a draft needs the target's vocabulary"
            )));
        }
    }
    Ok(())
}

fn argmax(x: &[f32]) -> u32 {
    let mut best = 0;
    for (i, v) in x.iter().enumerate() {
        if *v > x[best] {
            best = i;
        }
    }
    best as u32
}

/// [`super::generate::generate`] with a drafter: the same tokens under greedy sampling
/// (`opts.sampler` must be greedy), fewer target forwards.
#[allow(clippy::too_many_arguments)]
pub fn generate_speculative(
    model: &Model,
    state: &mut State,
    tok: &Tokenizer,
    prompt: &[u32],
    opts: &GenerateOptions,
    drafter: &mut Drafter,
    draft_max: usize,
    mut on_text: impl FnMut(&str),
) -> Result<(Generation, SpecStats), ModelError> {
    if opts.sampler.temperature > 0.0 {
        return Err(ModelError::Speculative(
            "greedy only: use --temp 0 (sampling's rejection rule is not built yet)".into(),
        ));
    }
    if model.cfg.gdn.is_some() {
        return Err(ModelError::Speculative(
            "the target's cache must go back to any position: not a hybrid yet".into(),
        ));
    }
    check_prompt(state, prompt)?;
    let ctx = state.cache.ctx;
    let v = model.cfg.vocab;
    let mut sampler = Sampler::new(opts.sampler.clone());
    prompt.iter().for_each(|&t| sampler.accept(t));
    let mut hist: Vec<u32> = prompt.to_vec();
    let t0 = Instant::now();
    let mut next = sampler.sample(model.forward(state, prompt, Logits::Last)?);
    let prefill_ms = t0.elapsed().as_secs_f64() * 1e3;
    let t1 = Instant::now();
    let mut out = Emitter::new(tok, &opts.stop);
    let mut stats = SpecStats::default();
    'gen: loop {
        if !out.push(next, &mut on_text) {
            break;
        }
        sampler.accept(next);
        hist.push(next);
        let left = opts.max_tokens - out.tokens.len();
        if left == 0 || state.pos() + 1 >= ctx {
            break;
        }
        // the target runs `next` and the draft: k <= what may still be emitted after next
        let room = ctx - state.pos() - 1;
        let mut draft = drafter.propose(&hist, draft_max.min(left - 1).min(room))?;
        draft.truncate(draft_max.min(left - 1).min(room));
        let pos0 = state.pos();
        let mut feed = vec![next];
        feed.extend(&draft);
        let rows = model.forward(state, &feed, Logits::All)?.to_vec();
        stats.rounds += 1;
        stats.drafted += draft.len();
        let mut kept = 0;
        next = loop {
            let pred = sampler.sample(&rows[kept * v..(kept + 1) * v]);
            if kept < draft.len() && draft[kept] == pred {
                stats.accepted += 1;
                kept += 1;
                if !out.push(pred, &mut on_text) {
                    break 'gen;
                }
                sampler.accept(pred);
                hist.push(pred);
                if out.tokens.len() >= opts.max_tokens {
                    break 'gen;
                }
                continue;
            }
            break pred;
        };
        // keep next and the accepted draft; forget the rest
        state.cache.truncate(pos0 + 1 + kept);
    }
    let decode_ms = t1.elapsed().as_secs_f64() * 1e3;
    let g = out.done(prompt.len(), prefill_ms, decode_ms, &mut on_text);
    Ok((g, stats))
}

#[cfg(test)]
mod tests {
    use super::{check_draft_vocab, ngram_draft};
    use crate::gguf::{GgufFile, GgufWriter, Value, ValueType};

    fn vocab_file(tokens: &[&str], eos: u32) -> GgufFile {
        let mut w = GgufWriter::new();
        w.add_metadata("tokenizer.ggml.model", Value::String("gpt2".into()));
        w.add_metadata("tokenizer.ggml.eos_token_id", Value::U32(eos));
        let toks = tokens
            .iter()
            .map(|t| Value::String(t.to_string()))
            .collect();
        w.add_metadata(
            "tokenizer.ggml.tokens",
            Value::Array(ValueType::String, toks),
        );
        let mut out = Vec::new();
        w.write_to(&mut out).unwrap();
        GgufFile::from_bytes(out).unwrap()
    }

    #[test]
    fn a_draft_needs_the_targets_vocabulary() {
        let t = vocab_file(&["a", "b", "c"], 2);
        assert!(check_draft_vocab(&t, &vocab_file(&["a", "b", "c"], 2)).is_ok());
        let e = check_draft_vocab(&t, &vocab_file(&["a", "b", "d"], 2)).unwrap_err();
        assert!(e.to_string().contains("tokenizer.ggml.tokens"), "{e}");
        let e = check_draft_vocab(&t, &vocab_file(&["a", "b", "c"], 1)).unwrap_err();
        assert!(e.to_string().contains("eos_token_id"), "{e}");
    }

    #[test]
    fn ngram_draft_follows_the_latest_earlier_match_of_the_longest_tail() {
        // "1 2 3 9 ... 1 2 3" -> what followed the last earlier "1 2 3"
        let h = [1, 2, 3, 9, 8, 5, 1, 2, 3, 7, 1, 2, 3];
        assert_eq!(ngram_draft(&h, 3, 2), [7, 1]);
        assert_eq!(ngram_draft(&h, 3, 10), [7, 1, 2, 3]);
        // no 3-gram match: falls back to the last token alone
        assert_eq!(ngram_draft(&[4, 5, 6, 5], 3, 2), [6, 5]);
        assert!(ngram_draft(&[1, 2, 3], 3, 4).is_empty());
    }
}
