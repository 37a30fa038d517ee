//! Speculative decoding (Leviathan, Kalman, Matias 2023; prompt lookup, Saxena 2023): a cheap
//! drafter proposes up to `draft_max` tokens, the target scores them all in one batched
//! forward, and its KV cache forgets what it does not keep. Each drafted token x is kept with
//! probability min(1, p(x) / q(x)) (p: the target's sampling distribution there, q: the
//! draft's, a point mass for prompt lookup); at the first refusal the next token is drawn
//! from norm(max(0, p - q)), and when all are kept the target adds one of its own. So the
//! output follows the target's distribution; under greedy decoding it is the target's
//! output token for token. The drafters: `Ngram` (the tokens that followed the latest
//! earlier occurrence of the context's last n tokens) and `Model` (a small model with the
//! target's vocabulary, sampling with the target's settings).

use super::constrain::Guide;
use super::generate::{check_prompt, Emitter, GenerateOptions, Generation};
use super::kv_cache::KvCache;
use super::sampler::Sampler;
use super::spec_tune::DraftTuner;
pub use super::verify::{accept_or_resample, draw, SpecStats};
use super::verify::{settle, Verify};
use crate::gguf::GgufFile;
use crate::model::{Logits, Model, ModelError, State};
use crate::tokenizer::Tokenizer;
use std::time::Instant;

pub enum Drafter<'a> {
    /// Prompt lookup on the last `n` (down to 1) tokens.
    Ngram { n: usize },
    /// A draft model, its state, the tokens that state holds, its sampler, and the least
    /// probability of its top token to go on drafting (llama.cpp's `--draft-p-min`).
    Model {
        model: &'a Model,
        state: Box<State>,
        fed: Vec<u32>,
        sampler: Box<Sampler>,
        p_min: f32,
    },
}

/// `generate_speculative`'s side of a verify pass.
struct Local<'a, 'b, F: FnMut(&str)> {
    sampler: &'a mut Sampler,
    guide: Option<&'a mut Guide>,
    row: &'a mut Vec<f32>,
    out: &'a mut Emitter<'b>,
    hist: &'a mut Vec<u32>,
    on_text: &'a mut F,
    max_tokens: usize,
}

impl<F: FnMut(&str)> Verify for Local<'_, '_, F> {
    fn distribution(&mut self, row: &[f32]) -> Result<Vec<(u32, f64)>, ModelError> {
        self.row.copy_from_slice(row);
        if let Some(g) = self.guide.as_deref_mut() {
            g.constrain(self.row)?;
        }
        Ok(self.sampler.distribution(self.row))
    }

    fn uniform(&mut self) -> f64 {
        self.sampler.uniform()
    }

    fn keep(&mut self, x: u32, _at: usize) -> Result<bool, ModelError> {
        if !self.out.push(x, self.on_text) {
            return Ok(false);
        }
        if let Some(g) = self.guide.as_deref_mut() {
            g.consume(x)?;
        }
        self.sampler.accept(x);
        self.hist.push(x);
        Ok(self.out.tokens.len() < self.max_tokens)
    }
}

/// Leave `state` holding `kept` after its first `pos0` positions, the tokens of a verify
/// pass it keeps (see [`rewind_cache`]).
pub fn rewind(
    model: &Model,
    state: &mut State,
    pos0: usize,
    kept: &[u32],
) -> Result<(), ModelError> {
    let mut cache = std::mem::take(&mut state.cache);
    let r = rewind_cache(model, state, &mut cache, pos0, kept, model.default_loras());
    state.cache = cache;
    r
}

/// `cache` keeps `kept` after its first `pos0` positions: attention layers truncate,
/// recurrent layers go back to the mark at `pos0` and take the kept tokens again (with
/// `scratch`'s buffers and adapters `lora`).
pub fn rewind_cache(
    model: &Model,
    scratch: &mut State,
    cache: &mut KvCache,
    pos0: usize,
    kept: &[u32],
    lora: &[(usize, f32)],
) -> Result<(), ModelError> {
    let end = pos0 + kept.len();
    cache.truncate(end);
    let at = cache.pos;
    if at < pos0 {
        return Err(ModelError::Speculative(format!(
            "the recurrent state went back to position {at}, before the verify step at {pos0}"
        )));
    }
    if at < end {
        model.forward_cache_lora(scratch, cache, &kept[at - pos0..], Logits::Last, lora)?;
    }
    cache.unmark(pos0);
    Ok(())
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
    /// Up to `k` tokens to follow `hist` (the prompt and what was generated), with the
    /// distributions they were drawn from (None: chosen, not drawn).
    #[allow(clippy::type_complexity)]
    fn propose(
        &mut self,
        hist: &[u32],
        k: usize,
    ) -> Result<(Vec<u32>, Option<Vec<Vec<(u32, f64)>>>), ModelError> {
        match self {
            Drafter::Ngram { n } => Ok((ngram_draft(hist, *n, k), None)),
            Drafter::Model {
                model,
                state,
                fed,
                sampler,
                p_min,
            } => {
                let (out, dists) = model_draft(model, state, fed, sampler, hist, k, *p_min)?;
                Ok((out, Some(dists)))
            }
        }
    }
}

/// Up to `k` tokens a draft model samples after `hist`, with the distributions they came
/// from. `state` holds the tokens `fed`; it keeps what it holds of `hist` (not the drafted
/// tokens the target refused), takes the rest, then drafts, stopping early after a token
/// where the draft's own top token had probability under `p_min`. Unlike llama.cpp's
/// `--draft-p-min`, which drops that unsure token, it is proposed: its logits are already
/// paid for and a verify pass checks one more token for about a fortieth of a decode step,
/// while a draft step on it (the one building on a guess the target likely refuses) is not
/// taken.
#[allow(clippy::type_complexity)]
pub fn model_draft(
    model: &Model,
    state: &mut State,
    fed: &mut Vec<u32>,
    sampler: &mut Sampler,
    hist: &[u32],
    k: usize,
    p_min: f32,
) -> Result<(Vec<u32>, Vec<Vec<(u32, f64)>>), ModelError> {
    let same = fed.iter().zip(hist).take_while(|(a, b)| a == b).count();
    state.cache.truncate(same.min(hist.len() - 1));
    fed.truncate(state.pos());
    let k = k.min(state.cache.ctx.saturating_sub(hist.len()));
    let new = &hist[fed.len()..];
    // a draft only proposes: ggml's one-plane activation rounding (half the integer work of
    // toy's two planes on the legacy types) changes how many tokens are kept, never the output
    let forward = |state: &mut State, toks: &[u32]| {
        let mut run = || model.forward(state, toks, Logits::Last).map(|l| l.to_vec());
        match model.drafts_coarsely() {
            true => tinynn::kernels::coarse_activations(run),
            false => run(),
        }
    };
    let mut logits = forward(state, new)?;
    fed.extend_from_slice(new);
    // penalties see what the target's sampler sees, then the drafted tokens
    sampler.set_history(hist);
    let (mut out, mut dists) = (Vec::new(), Vec::new());
    while out.len() < k {
        let sure = tinynn::kernels::act::max_prob(&logits) >= p_min;
        let d = sampler.distribution(&logits);
        let id = draw(&d, sampler.uniform());
        sampler.accept(id);
        out.push(id);
        dists.push(d);
        if out.len() == k || !sure {
            break;
        }
        logits = forward(state, &[id])?;
        fed.push(id);
    }
    Ok((out, dists))
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

/// [`super::generate::generate`] with a drafter: the same distribution of outputs (the same
/// tokens when greedy), fewer target forwards. With a `guide`, the target's distribution at
/// each position is the constrained one, so drafted tokens the constraint forbids are refused.
/// With `tune`, each round drafts as many tokens (up to `draft_max`, 0 for a plain step) as
/// the costs and acceptance seen so far make fastest (`spec_tune`); without, up to
/// `draft_max` every round.
#[allow(clippy::too_many_arguments)]
pub fn generate_speculative(
    model: &Model,
    state: &mut State,
    tok: &Tokenizer,
    prompt: &[u32],
    opts: &GenerateOptions,
    drafter: &mut Drafter,
    draft_max: usize,
    tune: bool,
    mut guide: Option<&mut Guide>,
    mut on_text: impl FnMut(&str),
) -> Result<(Generation, SpecStats), ModelError> {
    check_prompt(state, prompt)?;
    let ctx = state.cache.ctx;
    let v = model.cfg.vocab;
    let mut sampler = Sampler::new(opts.sampler.clone());
    prompt.iter().for_each(|&t| sampler.accept(t));
    let mut hist: Vec<u32> = prompt.to_vec();
    let t0 = Instant::now();
    let mut row = model.forward(state, prompt, Logits::Last)?.to_vec();
    if let Some(g) = guide.as_deref_mut() {
        g.constrain(&mut row)?;
    }
    let first = sampler.distribution(&row);
    let mut next = draw(&first, sampler.uniform());
    let prefill_ms = t0.elapsed().as_secs_f64() * 1e3;
    let t1 = Instant::now();
    let mut out = Emitter::new(tok, &opts.stop);
    let mut stats = SpecStats::default();
    let mut tuner = tune.then(|| DraftTuner::new(draft_max));
    'gen: loop {
        if !out.push(next, &mut on_text) {
            break;
        }
        if let Some(g) = guide.as_deref_mut() {
            g.consume(next)?;
        }
        sampler.accept(next);
        hist.push(next);
        let left = opts.max_tokens - out.tokens.len();
        if left == 0 || state.pos() + 1 >= ctx {
            break;
        }
        // the target runs `next` and the draft: k <= what may still be emitted after next
        let room = ctx - state.pos() - 1;
        let k = tuner.as_mut().map_or(draft_max, DraftTuner::next_k);
        let k = k.min(left - 1).min(room);
        let t_draft = Instant::now();
        let (mut draft, q) = match k {
            0 => (Vec::new(), None),
            _ => drafter.propose(&hist, k)?,
        };
        draft.truncate(k);
        let (draft_ms, t_verify) = (ms(t_draft), Instant::now());
        let pos0 = state.pos();
        // a hybrid's recurrent layers come back only to a snapshot: take one here
        state.cache.mark();
        let mut feed = vec![next];
        feed.extend(&draft);
        let rows = model.forward(state, &feed, Logits::All)?;
        let mut seq = Local {
            sampler: &mut sampler,
            guide: guide.as_deref_mut(),
            row: &mut row,
            out: &mut out,
            hist: &mut hist,
            on_text: &mut on_text,
            max_tokens: opts.max_tokens,
        };
        let (kept, t) = settle(&mut seq, rows, v, &draft, q.as_deref(), &mut stats)?;
        let Some(t) = t else {
            break 'gen;
        };
        next = t;
        // keep next and the accepted draft; forget the rest
        rewind(model, state, pos0, &feed[..1 + kept])?;
        if let Some(tuner) = tuner.as_mut() {
            tuner.record(draft.len(), kept, draft_ms, feed.len(), ms(t_verify));
        }
    }
    let decode_ms = t1.elapsed().as_secs_f64() * 1e3;
    let g = out.done(prompt.len(), prefill_ms, decode_ms, &mut on_text);
    Ok((g, stats))
}

/// Milliseconds since `t`.
fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
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

    /// The first token of a round, over many rounds: the draft's token when kept, else the
    /// resampled one. It must follow p whatever q is (Leviathan et al., Theorem 1).
    #[test]
    fn kept_or_resampled_tokens_follow_the_targets_distribution() {
        use super::{accept_or_resample, draw};
        use rand::{Rng, SeedableRng};
        let p = [(0u32, 0.5), (1, 0.3), (2, 0.15), (3, 0.05)];
        let q = [(0u32, 0.1), (1, 0.2), (2, 0.3), (3, 0.4)];
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let n = 200_000;
        for point_mass in [false, true] {
            let mut counts = [0usize; 4];
            for _ in 0..n {
                // a model drafter draws x from q; prompt lookup always proposes token 2
                let x = if point_mass {
                    2
                } else {
                    draw(&q, rng.random())
                };
                let qd = (!point_mass).then_some(&q[..]);
                let t = match accept_or_resample(&p, qd, x, rng.random(), rng.random()) {
                    Ok(()) => x,
                    Err(t) => t,
                };
                counts[t as usize] += 1;
            }
            for (i, &(_, pi)) in p.iter().enumerate() {
                let f = counts[i] as f64 / n as f64;
                // 5 standard errors of a share of 200k draws
                let tol = 5.0 * (pi * (1.0 - pi) / n as f64).sqrt();
                assert!(
                    (f - pi).abs() < tol,
                    "point mass {point_mass}: token {i} {f} vs {pi}"
                );
            }
        }
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
