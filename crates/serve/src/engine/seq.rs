//! One sequence being generated (one choice of a request) and what happens to each token it
//! samples: logprobs if asked, end-of-generation, stop strings, the length limit, and the
//! events that carry it to the request's handler.

use super::logprob::{token_logprob, TokenLogprob};
use super::text::TextStream;
use super::{Event, FinishReason, GenJob, SeqDone};
use crate::models::LoadedModel;
use std::sync::Arc;
use std::time::Instant;
use toy::infer::constrain::{Guide, Mask};
use toy::infer::sampler::{argmax, Sampler};

pub struct Seq {
    pub job: Arc<GenJob>,
    /// Choice index in the response.
    pub index: usize,
    pub prompt: Arc<Vec<u32>>,
    /// Prompt tokens in the cache so far (reused ones included).
    pub fed: usize,
    /// Prompt tokens not computed for this sequence: kept in its slot's cache at admission
    /// or copied from another slot's.
    pub cached: usize,
    pub sampler: Sampler,
    pub text: TextStream,
    pub generated: usize,
    /// The sampled token the next decode step feeds.
    pub next: Option<u32>,
    /// Logprobs of prompt tokens (echo with logprobs), one per token after the first.
    pub prompt_logprobs: Vec<TokenLogprob>,
    pub admitted: Instant,
    pub first_token: Option<Instant>,
    /// The constraint the output follows, if any, and the mask of allowed tokens for the
    /// logits the running step makes (computed while it runs; `None`: compute when needed).
    pub guide: Option<Guide>,
    pub mask: Option<Mask>,
    /// The draft model's sampler (speculative decoding with a draft), made on first use.
    pub draft_sampler: Option<Sampler>,
}

/// What a sampled token did to its sequence.
pub enum Outcome {
    /// Feed it and go on.
    Continue,
    Finished(FinishReason),
}

impl Seq {
    pub fn prefilling(&self) -> bool {
        self.fed < self.prompt.len()
    }

    fn send(&self, ev: Event) -> bool {
        self.job.events.send(ev).is_ok()
    }

    /// Choose the next token from `logits` (V) and hand it to the client. `room` is whether
    /// the cache can take one more position after this token.
    pub fn take_token(
        &mut self,
        m: &LoadedModel,
        logits: &[f32],
        buf: &mut Vec<f32>,
        room: bool,
    ) -> Outcome {
        if self.first_token.is_none() {
            self.first_token = Some(Instant::now());
        }
        let mask = match (self.mask.take(), self.guide.as_mut()) {
            (Some(mask), _) => Some(Ok(mask)),
            (None, Some(g)) => Some(g.mask()),
            (None, None) => None,
        };
        let id = match mask {
            Some(Err(e)) => {
                let message = format!("constrained decoding: {e}");
                self.send(Event::Error {
                    index: self.index,
                    message,
                });
                return Outcome::Finished(FinishReason::Error);
            }
            Some(Ok(mask)) => {
                buf.clear();
                buf.extend_from_slice(logits);
                Guide::apply(&mask, buf);
                self.sampler.sample_in_place(buf)
            }
            None if self.sampler.is_plain_greedy() => argmax(logits),
            None => {
                buf.clear();
                buf.extend_from_slice(logits);
                self.sampler.sample_in_place(buf)
            }
        };
        self.emit(m, id, logits, room)
    }

    /// Hand `id`, chosen from `logits` (for its logprob), to the client: end of generation,
    /// the constraint, stop strings, the length limit. `room`: whether the cache can take
    /// one more position after it.
    pub fn emit(&mut self, m: &LoadedModel, id: u32, logits: &[f32], room: bool) -> Outcome {
        if m.tok.is_eog(id) {
            return Outcome::Finished(FinishReason::Eog);
        }
        if let Some(Err(e)) = self.guide.as_mut().map(|g| g.consume(id)) {
            let message = format!("constrained decoding: {e}");
            self.send(Event::Error {
                index: self.index,
                message,
            });
            return Outcome::Finished(FinishReason::Error);
        }
        let logprob = self
            .job
            .params
            .logprobs
            .map(|n| token_logprob(logits, id, n));
        self.generated += 1;
        self.sampler.accept(id);
        let (text, stopped) = self.text.push(&m.tok.token_bytes(id));
        let alive = self.send(Event::Token {
            index: self.index,
            id,
            text,
            logprob,
        });
        if !alive {
            return Outcome::Finished(FinishReason::Cancelled);
        }
        if stopped {
            Outcome::Finished(FinishReason::StopString)
        } else if self.generated >= self.job.params.max_tokens || !room {
            Outcome::Finished(FinishReason::Length)
        } else {
            self.next = Some(id);
            Outcome::Continue
        }
    }

    /// Send what is held back and the end of the sequence.
    pub fn finish(&mut self, reason: FinishReason) -> SeqDone {
        if matches!(reason, FinishReason::Eog | FinishReason::Length) {
            let rest = self.text.finish();
            if !rest.is_empty() {
                self.send(Event::Text {
                    index: self.index,
                    text: rest,
                });
            }
        }
        let ttft_ms = self
            .first_token
            .map(|t| t.duration_since(self.job.enqueued).as_secs_f64() * 1e3);
        let done = SeqDone {
            index: self.index,
            finish: reason,
            prompt_tokens: self.prompt.len(),
            completion_tokens: self.generated,
            cached_tokens: self.cached,
            ttft_ms,
        };
        // counted before the handler hears of the end: a `/metrics` scrape that follows the
        // response (last SSE chunk or JSON body) always includes this sequence
        self.job.metrics.seq_done(&done);
        self.job.ended.push(done.clone());
        self.send(Event::Done(done.clone()));
        done
    }
}

#[cfg(test)]
mod tests {
    use super::Seq;
    use crate::engine::text::TextStream;
    use crate::engine::{Ended, Event, FinishReason, GenJob, GenParams};
    use crate::metrics::Metrics;
    use crate::models::LoadedModel;
    use std::path::PathBuf;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use std::time::Instant;
    use toy::infer::sampler::{Sampler, SamplerConfig};

    /// Regression (a `/metrics` scrape right after a 200 missed the request's tokens): the
    /// counters were added by the engine loop after the step that had already sent `Done`.
    #[test]
    fn a_sequence_is_counted_in_the_metrics_before_its_end_is_sent() {
        let path = std::env::var_os("TOY_MODEL")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                    .join("../../models/SmolLM2-135M-Instruct.Q4_1.gguf")
            });
        let model = Arc::new(
            LoadedModel::load("m", &path, 64, &Default::default())
                .expect("the model (scripts/fetch-model.sh)"),
        );
        let metrics = Arc::new(Metrics::default());
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let prompt = Arc::new(vec![1u32, 2, 3]);
        let job = Arc::new(GenJob {
            model,
            prompts: vec![(0, prompt.clone())],
            params: GenParams {
                max_tokens: 4,
                stop: Vec::new(),
                sampler: SamplerConfig::default(),
                logprobs: None,
                prompt_logprobs: false,
                lora: Vec::new(),
                guide: None,
            },
            events: tx,
            ended: Arc::new(Ended::default()),
            metrics: metrics.clone(),
            enqueued: Instant::now(),
        });
        let mut seq = Seq {
            job,
            index: 0,
            prompt,
            fed: 3,
            cached: 1,
            sampler: Sampler::new(SamplerConfig::default()),
            text: TextStream::new(Vec::new()),
            generated: 4,
            next: None,
            prompt_logprobs: Vec::new(),
            admitted: Instant::now(),
            first_token: None,
            guide: None,
            mask: None,
            draft_sampler: None,
        };
        seq.finish(FinishReason::Length);
        let mut saw_done = false;
        while let Ok(ev) = rx.try_recv() {
            if let Event::Done(d) = ev {
                saw_done = true;
                // what a handler reading this event would find in /metrics
                assert_eq!(metrics.completion_tokens.load(Ordering::SeqCst), 4);
                assert_eq!(metrics.prompt_tokens.load(Ordering::SeqCst), 3);
                assert_eq!(metrics.cached_tokens.load(Ordering::SeqCst), 1);
                assert_eq!(d.completion_tokens, 4);
            }
        }
        assert!(saw_done, "no Done event");
    }
}
