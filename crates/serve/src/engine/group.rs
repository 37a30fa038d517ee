//! The slots of one model: each holds a KV cache and the tokens in it, and at most one
//! running sequence. A step prefills one chunk of one prompt, then decodes one token for
//! every decoding slot in one batched pass (`Model::forward_multi`), so a long prompt
//! delays running streams by one chunk, never by its whole length.
//!
//! Greedy output must not depend on what the cache held before. The model's result is
//! independent of how tokens are batched only within one attention regime: chunks under
//! 64 tokens (and single decode steps) share llama.cpp's f16 regime, longer chunks use the
//! f32 one. So prefill chunks start at multiples of the chunk size, whatever was reused,
//! and a reused prefix ends where a chunk would start (or anywhere inside a final chunk
//! that is short enough for the f16 regime): every position is then computed exactly as a
//! cold prefill of the same prompt computes it.

use super::logprob::token_logprob;
use super::seq::{Outcome, Seq};
use super::spec::{SlotDraft, Spec};
use super::{Event, FinishReason, SeqDone};
use crate::models::LoadedModel;
use rayon::prelude::*;
use std::sync::Arc;
use std::time::Instant;
use tinynn::pool::Adaptive;
use toy::infer::constrain::{Guide, Mask};
use toy::infer::kv_cache::{f16_attention, KvCache};
use toy::model::{Logits, ModelError, State};

pub struct Slot {
    pub cache: KvCache,
    /// The tokens whose keys and values `cache` holds, in order (`cache.pos` of them).
    pub tokens: Vec<u32>,
    /// The LoRA adapters (id, scale) those keys and values were computed with: a prefix is
    /// shared only between sequences with the same adapters.
    pub lora: Vec<(usize, f32)>,
    pub seq: Option<Seq>,
    /// When the slot last finished a sequence (least recently used goes first).
    pub freed: Instant,
    /// The draft model's cache of this slot (speculative decoding with a draft).
    pub draft: Option<SlotDraft>,
}

pub struct Group {
    pub model: Arc<LoadedModel>,
    pub slots: Vec<Slot>,
    /// Activation buffers shared by all slots (its own cache is unused).
    pub(super) scratch: State,
    /// Reused copy of one row of logits for sampling with bias or penalties.
    pub(super) buf: Vec<f32>,
    /// Speculative decoding, when on; the draft model's activation buffers.
    pub(super) spec: Option<Spec>,
    pub(super) draft_scratch: Option<State>,
    /// Decode steps move to one thread while another process holds a core; one chooser per
    /// power-of-two batch size (1, 2-3, 4-7, ...), since it compares timings of like jobs.
    pools: Vec<Adaptive>,
    chunk: usize,
}

fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// What `slot`'s cache shares with a prompt run with adapters `lora`: nothing when the
/// adapters differ.
fn shared_prefix(slot: &Slot, prompt: &[u32], lora: &[(usize, f32)]) -> usize {
    if slot.lora == lora {
        common_prefix(&slot.tokens, prompt)
    } else {
        0
    }
}

/// The most of a cached prefix of `p` positions that a prompt of `len` tokens may keep so
/// that prefilling the rest, in chunks starting at multiples of `chunk`, computes every
/// position as a cold prefill does. At most `len - 1`: the last prompt token is always
/// fed, for the logits of the first output token.
pub fn resume_point(p: usize, len: usize, chunk: usize) -> usize {
    let p = p.min(len.saturating_sub(1));
    let last = (len.saturating_sub(1)) / chunk * chunk;
    let split_invariant = f16_attention(chunk) || (p >= last && f16_attention(len - last));
    if split_invariant {
        p
    } else {
        p / chunk * chunk
    }
}

impl Group {
    pub fn new(model: Arc<LoadedModel>, parallel: usize, chunk: usize, spec: Option<Spec>) -> Self {
        let n_batch = chunk.max(parallel).max(1);
        let scratch = model.model.new_state(n_batch, n_batch);
        let slots = (0..parallel.max(1))
            .map(|_| Slot {
                cache: model.model.new_cache(model.ctx),
                tokens: Vec::new(),
                lora: Vec::new(),
                seq: None,
                freed: Instant::now(),
                draft: None,
            })
            .collect();
        Self {
            model,
            slots,
            scratch,
            buf: Vec::new(),
            spec,
            draft_scratch: None,
            pools: (0..=parallel.max(1).ilog2())
                .map(|_| Adaptive::new())
                .collect(),
            chunk: chunk.max(1),
        }
    }

    pub fn active(&self) -> usize {
        self.slots.iter().filter(|s| s.seq.is_some()).count()
    }

    /// The free slot whose cache shares the longest prefix with `prompt` run with adapters
    /// `lora` (ties: the least recently used), and that prefix's length.
    pub fn best_slot(&self, prompt: &[u32], lora: &[(usize, f32)]) -> Option<(usize, usize)> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.seq.is_none())
            .map(|(i, s)| {
                (
                    shared_prefix(s, prompt, lora),
                    std::cmp::Reverse(s.freed),
                    i,
                )
            })
            .max()
            .map(|(common, _, i)| (i, common))
    }

    /// Put `seq` into free slot `i`, keeping the `common` positions its cache shares with
    /// the prompt when `reuse` allows.
    pub fn admit(&mut self, i: usize, common: usize, mut seq: Seq, reuse: bool) {
        let slot = &mut self.slots[i];
        let same = slot.lora == seq.job.params.lora;
        let keep = if reuse && same {
            resume_point(common, seq.prompt.len(), self.chunk)
        } else {
            0
        };
        if !same {
            slot.lora.clone_from(&seq.job.params.lora);
        }
        // a hybrid's recurrent layers go back only to a snapshot: keep what truncate kept
        slot.cache.truncate(keep);
        let keep = slot.cache.pos;
        slot.tokens.truncate(keep);
        seq.fed = keep;
        seq.cached = keep;
        seq.admitted = Instant::now();
        slot.seq = Some(seq);
    }

    /// Free the slots of clients that went away; returns how many.
    pub fn drop_cancelled(&mut self) -> Vec<SeqDone> {
        let mut out = Vec::new();
        for slot in &mut self.slots {
            if slot.seq.as_ref().is_some_and(|s| s.job.events.is_closed()) {
                if let Some(mut seq) = slot.seq.take() {
                    out.push(seq.finish(FinishReason::Cancelled));
                    slot.freed = Instant::now();
                }
            }
        }
        out
    }

    /// One engine step for this model; returns the sequences that ended and how many
    /// tokens were decoded.
    pub fn step(&mut self) -> (Vec<SeqDone>, usize) {
        let mut done = Vec::new();
        self.share_prefixes();
        if let Err(e) = self.prefill_one(&mut done) {
            self.fail_all(&e, &mut done);
        }
        let r = self
            .speculate(&mut done)
            .and_then(|(skip, n)| Ok(n + self.decode_all(&mut done, &skip)?));
        match r {
            Ok(n) => (done, n),
            Err(e) => {
                self.fail_all(&e, &mut done);
                (done, 0)
            }
        }
    }

    /// Let prefilling sequences take what other slots already computed: when another
    /// slot's cache holds a longer prefix of the prompt, its rows are copied (up to a
    /// `resume_point`, so identical to what prefill would compute). A prompt left with one
    /// token to feed joins the batched decode step instead of a prefill pass of its own,
    /// so N clients sending the same prompt cost one prefill and one batched step.
    fn share_prefixes(&mut self) {
        for i in 0..self.slots.len() {
            let Some(seq) = self.slots[i].seq.as_ref() else {
                continue;
            };
            if !seq.prefilling() || seq.job.params.prompt_logprobs {
                continue;
            }
            let (fed, len) = (seq.fed, seq.prompt.len());
            let prompt = seq.prompt.clone();
            let job = seq.job.clone();
            let best = (0..self.slots.len())
                .filter(|&j| j != i)
                .map(|j| {
                    let common = shared_prefix(&self.slots[j], &prompt, &job.params.lora);
                    (resume_point(common, len, self.chunk), j)
                })
                .max();
            if let Some((upto, j)) = best.filter(|&(upto, _)| upto > fed) {
                let (src, dst) = pair(&mut self.slots, j, i);
                // a hybrid's recurrent layers come only as far as a snapshot of src
                let upto = dst.cache.copy_prefix_from(&src.cache, fed, upto);
                dst.tokens.extend_from_slice(&prompt[fed..upto]);
                if let Some(seq) = dst.seq.as_mut() {
                    seq.fed = upto;
                    seq.cached += upto - fed;
                }
            }
            let slot = &mut self.slots[i];
            if let Some(seq) = slot.seq.as_mut() {
                if seq.fed + 1 == len && seq.job.params.max_tokens > 0 {
                    seq.fed = len;
                    seq.next = Some(prompt[len - 1]);
                }
            }
        }
    }

    /// Feed the next chunk of the prompt admitted first; sample its first token when the
    /// prompt is complete.
    fn prefill_one(&mut self, done: &mut Vec<SeqDone>) -> Result<(), ModelError> {
        let Some(i) = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                s.seq
                    .as_ref()
                    .filter(|q| q.prefilling())
                    .map(|q| (q.admitted, i))
            })
            .min()
            .map(|(_, i)| i)
        else {
            return Ok(());
        };
        let Self {
            model,
            slots,
            scratch,
            buf,
            chunk,
            ..
        } = self;
        let m = &model.model;
        let slot = &mut slots[i];
        let Some(seq) = slot.seq.as_mut() else {
            return Ok(());
        };
        // chunks start at multiples of the chunk size (see the file's doc)
        let from = seq.fed;
        let to = ((from / *chunk + 1) * *chunk).min(seq.prompt.len());
        let toks = &seq.prompt[from..to];
        let all = seq.job.params.prompt_logprobs;
        let which = if all { Logits::All } else { Logits::Last };
        let lora = &seq.job.params.lora;
        let logits = m.forward_cache_lora(scratch, &mut slot.cache, toks, which, lora)?;
        slot.tokens.extend_from_slice(toks);
        seq.fed = to;
        let v = m.cfg.vocab;
        if all {
            // row r predicts the token after position from + r
            for r in 0..toks.len() {
                if let Some(&next) = seq.prompt.get(from + r + 1) {
                    let n = seq.job.params.logprobs.unwrap_or(0);
                    let lp = token_logprob(&logits[r * v..(r + 1) * v], next, n);
                    seq.prompt_logprobs.push(lp);
                }
            }
        }
        if seq.fed < seq.prompt.len() {
            return Ok(());
        }
        if all {
            let lps = std::mem::take(&mut seq.prompt_logprobs);
            let _ = seq.job.events.send(Event::PromptLogprobs {
                index: seq.index,
                logprobs: lps,
            });
        }
        let last = if all { (toks.len() - 1) * v } else { 0 };
        let row = &logits[last..last + v];
        let outcome = if seq.job.params.max_tokens == 0 {
            Outcome::Finished(FinishReason::Length)
        } else {
            let room = slot.cache.pos < slot.cache.ctx;
            seq.take_token(model, row, buf, room)
        };
        if let Outcome::Finished(r) = outcome {
            done.push(seq.finish(r));
            slot.seq = None;
            slot.freed = Instant::now();
        }
        Ok(())
    }

    /// One token for every slot with a sampled token to feed, in one batched pass.
    fn decode_all(&mut self, done: &mut Vec<SeqDone>, skip: &[usize]) -> Result<usize, ModelError> {
        let Self {
            model,
            slots,
            scratch,
            buf,
            pools,
            ..
        } = self;
        let mut tokens = Vec::with_capacity(slots.len());
        let mut caches: Vec<&mut KvCache> = Vec::with_capacity(slots.len());
        let mut which = Vec::with_capacity(slots.len());
        // each row's adapters: sequences with different ones share the pass
        let mut picks: Vec<&[(usize, f32)]> = Vec::with_capacity(slots.len());
        // the constrained sequences' masks, computed while the pass runs
        let mut guides: Vec<(&mut Guide, &mut Option<Mask>)> = Vec::new();
        for (i, s) in slots.iter_mut().enumerate() {
            let Some(q) = s.seq.as_mut().filter(|q| q.next.is_some()) else {
                continue;
            };
            if skip.contains(&i) {
                continue;
            }
            let Seq {
                job,
                next,
                guide,
                mask,
                ..
            } = q;
            tokens.extend(*next);
            picks.push(&job.params.lora);
            caches.push(&mut s.cache);
            which.push(i);
            if let Some(g) = guide.as_mut() {
                guides.push((g, mask));
            }
        }
        if tokens.is_empty() {
            return Ok(0);
        }
        let m = &model.model;
        let pool = &mut pools[tokens.len().ilog2() as usize];
        let (logits, ()) = pool.run(|| {
            rayon::join(
                || {
                    m.forward_multi_lora(scratch, &mut caches, &tokens, &picks)
                        .map(|_| ())
                },
                // an error here is met again, and reported, when the token is taken
                || {
                    guides
                        .par_iter_mut()
                        .for_each(|(g, mask)| **mask = g.mask().ok())
                },
            )
        });
        drop(caches);
        drop(picks);
        drop(guides);
        logits?;
        let v = m.cfg.vocab;
        let logits = &scratch.logits;
        for (k, &i) in which.iter().enumerate() {
            let slot = &mut slots[i];
            slot.tokens.push(tokens[k]);
            let room = slot.cache.pos < slot.cache.ctx;
            let Some(seq) = slot.seq.as_mut() else {
                continue;
            };
            seq.next = None;
            let row = &logits[k * v..(k + 1) * v];
            if let Outcome::Finished(r) = seq.take_token(model, row, buf, room) {
                done.push(seq.finish(r));
                slot.seq = None;
                slot.freed = Instant::now();
            }
        }
        Ok(tokens.len())
    }

    /// A model error ends every running sequence with it (the slots start over).
    fn fail_all(&mut self, e: &ModelError, done: &mut Vec<SeqDone>) {
        self.abort(&format!("model error: {e}"), done);
    }

    /// End every running sequence with an error and empty the caches.
    pub fn abort(&mut self, message: &str, done: &mut Vec<SeqDone>) {
        for slot in &mut self.slots {
            if let Some(mut seq) = slot.seq.take() {
                let _ = seq.job.events.send(Event::Error {
                    index: seq.index,
                    message: message.to_string(),
                });
                done.push(seq.finish(FinishReason::Error));
            }
            slot.cache.truncate(0);
            slot.tokens.clear();
        }
    }
}

/// Mutable `b` and shared `a` of one slice (a != b).
fn pair(slots: &mut [Slot], a: usize, b: usize) -> (&Slot, &mut Slot) {
    if a < b {
        let (lo, hi) = slots.split_at_mut(b);
        (&lo[a], &mut hi[0])
    } else {
        let (lo, hi) = slots.split_at_mut(a);
        (&hi[0], &mut lo[b])
    }
}

#[cfg(test)]
mod tests {
    use super::resume_point;

    #[test]
    fn reused_prefixes_end_where_a_cold_prefill_would_split() {
        // full chunks of 64 run in the f32 regime: keep whole chunks only
        assert_eq!(resume_point(100, 300, 64), 64);
        assert_eq!(resume_point(128, 300, 64), 128);
        // inside a final chunk short enough for the f16 regime, anywhere
        assert_eq!(resume_point(270, 300, 64), 270);
        assert_eq!(resume_point(299, 300, 64), 299);
        // a final chunk of exactly 64 is f32 too
        assert_eq!(resume_point(250, 256, 64), 192);
        // never the whole prompt
        assert_eq!(resume_point(500, 300, 64), 299);
        assert_eq!(resume_point(5, 1, 64), 0);
        // chunks under 64 are all f16: any point
        assert_eq!(resume_point(100, 300, 48), 100);
    }
}
