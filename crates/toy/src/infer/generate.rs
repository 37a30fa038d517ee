//! The generation loop: prefill the prompt in batches, then decode one token at a time,
//! streaming text that is never broken UTF-8 and never shows a stop string. Ends on an
//! end-of-generation token, a stop string, `max_tokens`, or a full context.

use super::constrain::Guide;
use super::sampler::{Sampler, SamplerConfig};
use crate::model::{Logits, Model, ModelError, State};
use crate::tokenizer::Tokenizer;
use std::time::Instant;

#[derive(Clone, Debug)]
pub struct GenerateOptions {
    pub max_tokens: usize,
    pub stop: Vec<String>,
    pub sampler: SamplerConfig,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// An end-of-generation token or a stop string.
    Stop,
    /// `max_tokens` reached, or the context is full.
    Length,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct Generation {
    pub prompt_tokens: usize,
    pub tokens: Vec<u32>,
    pub text: String,
    pub finish_reason: FinishReason,
    pub prefill_ms: f64,
    pub decode_ms: f64,
}

impl Generation {
    pub fn prefill_tok_s(&self) -> f64 {
        self.prompt_tokens as f64 / (self.prefill_ms / 1e3).max(1e-9)
    }
    /// Decode speed over the tokens after the first (the first comes from prefill).
    pub fn decode_tok_s(&self) -> f64 {
        self.tokens.len().saturating_sub(1) as f64 / (self.decode_ms / 1e3).max(1e-9)
    }
}

/// Text held back until it can no longer turn into a stop string.
struct StopFilter<'a> {
    stops: &'a [String],
    text: String,
    emitted: usize,
}

impl StopFilter<'_> {
    /// Add text; return what may be shown now, and whether a stop string was hit.
    fn push(&mut self, piece: &str) -> (String, bool) {
        let from = self.emitted;
        self.text.push_str(piece);
        let search_from =
            from.saturating_sub(self.stops.iter().map(|s| s.len()).max().unwrap_or(0));
        let search_from = (0..=search_from)
            .rev()
            .find(|&i| self.text.is_char_boundary(i))
            .unwrap_or(0);
        let hit = self
            .stops
            .iter()
            .filter(|s| !s.is_empty())
            .filter_map(|s| {
                self.text[search_from..]
                    .find(s.as_str())
                    .map(|i| i + search_from)
            })
            .min();
        if let Some(end) = hit {
            self.text.truncate(end);
            let out = self.text[from.min(end)..].to_string();
            self.emitted = self.text.len();
            return (out, true);
        }
        // Hold back the longest tail that is a prefix of some stop string.
        let mut keep = 0;
        for s in self.stops {
            for n in (1..s.len().min(self.text.len() - from + 1)).rev() {
                if s.is_char_boundary(n) && self.text.ends_with(&s[..n]) {
                    keep = keep.max(n);
                    break;
                }
            }
        }
        let upto = self.text.len() - keep;
        let out = self.text[from..upto].to_string();
        self.emitted = upto;
        (out, false)
    }

    fn finish(&mut self) -> String {
        let out = self.text[self.emitted..].to_string();
        self.emitted = self.text.len();
        out
    }
}

/// What a generation has emitted: its tokens, and its text as far as it may be shown.
pub(crate) struct Emitter<'a> {
    pub tokens: Vec<u32>,
    tok: &'a Tokenizer,
    dec: crate::tokenizer::StreamDecoder<'a>,
    filter: StopFilter<'a>,
    pub finish: FinishReason,
}

impl<'a> Emitter<'a> {
    pub fn new(tok: &'a Tokenizer, stops: &'a [String]) -> Self {
        Self {
            tokens: Vec::new(),
            tok,
            dec: tok.stream_decoder(),
            filter: StopFilter {
                stops,
                text: String::new(),
                emitted: 0,
            },
            finish: FinishReason::Length,
        }
    }

    /// Emit `id`; false when the generation ends here (an end-of-generation token, which is
    /// not kept, or a stop string).
    pub fn push(&mut self, id: u32, on_text: &mut impl FnMut(&str)) -> bool {
        if self.tok.is_eog(id) {
            self.finish = FinishReason::Stop;
            return false;
        }
        self.tokens.push(id);
        let (shown, stopped) = self.filter.push(&self.dec.push(id));
        if !shown.is_empty() {
            on_text(&shown);
        }
        if stopped {
            self.finish = FinishReason::Stop;
        }
        !stopped
    }

    /// The generation, after what is held back is shown (unless a stop string ended it).
    pub fn done(
        mut self,
        prompt_tokens: usize,
        prefill_ms: f64,
        decode_ms: f64,
        on_text: &mut impl FnMut(&str),
    ) -> Generation {
        if self.finish == FinishReason::Length {
            let (shown, _) = self.filter.push(&self.dec.finish());
            let rest = shown + &self.filter.finish();
            if !rest.is_empty() {
                on_text(&rest);
            }
        }
        Generation {
            prompt_tokens,
            tokens: self.tokens,
            text: self.filter.text,
            finish_reason: self.finish,
            prefill_ms,
            decode_ms,
        }
    }
}

/// Fails when `prompt` and one generated token do not fit after what `state` holds.
pub(crate) fn check_prompt(state: &State, prompt: &[u32]) -> Result<(), ModelError> {
    let ctx = state.cache.ctx;
    if state.pos() + prompt.len() >= ctx {
        return Err(ModelError::ContextOverflow {
            pos: state.pos(),
            n: prompt.len() + 1,
            ctx,
        });
    }
    Ok(())
}

/// Generate after `prompt` (token ids), fed after what `state` already holds; `on_text` receives each
/// piece of visible text as soon as it is final.
pub fn generate(
    model: &Model,
    state: &mut State,
    tok: &Tokenizer,
    prompt: &[u32],
    opts: &GenerateOptions,
    on_text: impl FnMut(&str),
) -> Result<Generation, ModelError> {
    generate_guided(model, state, tok, prompt, opts, None, on_text)
}

/// `generate` with each token drawn only from those `guide` allows (constrained decoding);
/// a generation cut by `max_tokens` before the constraint is met ends with `Length`.
pub fn generate_guided(
    model: &Model,
    state: &mut State,
    tok: &Tokenizer,
    prompt: &[u32],
    opts: &GenerateOptions,
    mut guide: Option<&mut Guide>,
    mut on_text: impl FnMut(&str),
) -> Result<Generation, ModelError> {
    check_prompt(state, prompt)?;
    let ctx = state.cache.ctx;
    let mut sampler = Sampler::new(opts.sampler.clone());
    prompt.iter().for_each(|&t| sampler.accept(t));
    let t0 = Instant::now();
    // the mask for the logits a forward makes is computed while it runs (llguidance needs
    // only the tokens so far), on the pool's other thread
    let (logits, mask) = rayon::join(
        || {
            model
                .forward(state, prompt, Logits::Last)
                .map(<[f32]>::to_vec)
        },
        || guide.as_deref_mut().map(Guide::mask),
    );
    let (mut logits, mut mask) = (logits?, mask.transpose()?);
    let prefill_ms = t0.elapsed().as_secs_f64() * 1e3;
    let t1 = Instant::now();
    let mut out = Emitter::new(tok, &opts.stop);
    // decode steps drop to one thread while another process holds a core
    let mut pool = tinynn::pool::Adaptive::new();
    while out.tokens.len() < opts.max_tokens {
        if let Some(m) = &mask {
            Guide::apply(m, &mut logits);
        }
        let id = sampler.sample(&logits);
        if !out.push(id, &mut on_text) {
            break;
        }
        if let Some(g) = guide.as_deref_mut() {
            g.consume(id)?;
        }
        sampler.accept(id);
        if out.tokens.len() >= opts.max_tokens || state.pos() >= ctx {
            break;
        }
        let (step, m) = pool.run(|| {
            rayon::join(
                || {
                    model
                        .forward(state, &[id], Logits::Last)
                        .map(|l| logits.copy_from_slice(l))
                },
                || guide.as_deref_mut().map(Guide::mask),
            )
        });
        step?;
        mask = m.transpose()?;
    }
    let decode_ms = t1.elapsed().as_secs_f64() * 1e3;
    Ok(out.done(prompt.len(), prefill_ms, decode_ms, &mut on_text))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], pieces: &[&str]) -> (String, String, bool) {
        let stops: Vec<String> = stops.iter().map(|s| s.to_string()).collect();
        let mut f = StopFilter {
            stops: &stops,
            text: String::new(),
            emitted: 0,
        };
        let mut shown = String::new();
        let mut hit = false;
        for p in pieces {
            let (s, h) = f.push(p);
            shown += &s;
            if h {
                hit = true;
                break;
            }
        }
        if !hit {
            shown += &f.finish();
        }
        (shown, f.text, hit)
    }

    #[test]
    fn stop_string_split_across_pieces_is_never_shown() {
        let (shown, text, hit) = run(&["END"], &["hello E", "N", "D more"]);
        assert!(hit);
        assert_eq!(shown, "hello ");
        assert_eq!(text, "hello ");
    }

    #[test]
    fn held_back_prefix_is_released_when_it_diverges() {
        let (shown, _, hit) = run(&["END"], &["a E", "x", "b"]);
        assert!(!hit);
        assert_eq!(shown, "a Exb");
        let (shown, _, hit) = run(&["\n\n"], &["é", "\n", "ü"]);
        assert!(!hit);
        assert_eq!(shown, "é\nü");
    }
}
