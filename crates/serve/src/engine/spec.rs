//! Speculative decoding inside continuous batching: before the batched decode step, each
//! decoding sequence with a draft (prompt lookup on its slot's tokens, or a draft model
//! with a cache per slot) has it verified in one forward pass over its own cache, kept or
//! refused by Leviathan et al.'s rule (`toy::infer::verify`) with the sequence's sampler
//! and constraint; refused positions are forgotten (a hybrid's recurrent layers go back to
//! the mark taken before the pass and take the kept tokens again). Sequences without a
//! draft join the batched step as before.

use super::group::Group;
use super::seq::{Outcome, Seq};
use super::{FinishReason, SeqDone};
use crate::models::LoadedModel;
use std::sync::Arc;
use std::time::Instant;
use toy::infer::constrain::Guide;
use toy::infer::kv_cache::KvCache;
use toy::infer::sampler::Sampler;
use toy::infer::speculative::{model_draft, ngram_draft, rewind_cache, SpecStats};
use toy::infer::verify::{settle, Verify};
use toy::model::{Logits, Model, ModelError};

/// Drafted tokens and, from a draft model, the distributions they were drawn from.
type Draft = (Vec<u32>, Option<Vec<Vec<(u32, f64)>>>);

/// The drafter of a model's slots.
pub struct Spec {
    /// `None`: prompt lookup.
    pub draft: Option<Arc<Model>>,
    pub max: usize,
    pub p_min: f32,
}

/// A draft model's cache for one slot and the tokens it holds.
#[derive(Default)]
pub struct SlotDraft {
    cache: KvCache,
    fed: Vec<u32>,
}

/// The engine's side of a verify pass for one sequence.
struct SeqVerify<'a> {
    seq: &'a mut Seq,
    m: &'a LoadedModel,
    rows: &'a [f32],
    buf: &'a mut Vec<f32>,
    end: Option<FinishReason>,
}

impl Verify for SeqVerify<'_> {
    fn distribution(&mut self, row: &[f32]) -> Result<Vec<(u32, f64)>, ModelError> {
        self.buf.clear();
        self.buf.extend_from_slice(row);
        if let Some(g) = self.seq.guide.as_mut() {
            let mask = g.mask()?;
            Guide::apply(&mask, self.buf);
        }
        Ok(self.seq.sampler.distribution(self.buf))
    }

    fn uniform(&mut self) -> f64 {
        self.seq.sampler.uniform()
    }

    fn keep(&mut self, x: u32, at: usize) -> Result<bool, ModelError> {
        let v = self.m.model.cfg.vocab;
        // the draft was sized to fit, so there is room after it
        match self
            .seq
            .emit(self.m, x, &self.rows[at * v..(at + 1) * v], true)
        {
            Outcome::Continue => Ok(true),
            Outcome::Finished(r) => {
                self.end = Some(r);
                Ok(false)
            }
        }
    }
}

impl Group {
    /// Verify the drafts of every decoding sequence that has one; returns the slots done
    /// this way (the batched step skips them) and the tokens they produced.
    pub(super) fn speculate(
        &mut self,
        done: &mut Vec<SeqDone>,
    ) -> Result<(Vec<usize>, usize), ModelError> {
        let mut handled = Vec::new();
        let mut produced = 0;
        if self.spec.is_none() {
            return Ok((handled, produced));
        }
        for i in 0..self.slots.len() {
            let Some(draft) = self.draft_for(i)? else {
                continue;
            };
            handled.push(i);
            produced += self.verify(i, draft, done)?;
        }
        Ok((handled, produced))
    }

    /// Slot `i`'s draft, when it has a decoding sequence with room for one.
    fn draft_for(&mut self, i: usize) -> Result<Option<Draft>, ModelError> {
        let Some(spec) = self.spec.as_ref() else {
            return Ok(None);
        };
        let slot = &mut self.slots[i];
        let Some(seq) = slot
            .seq
            .as_mut()
            .filter(|q| q.next.is_some() && !q.prefilling())
        else {
            return Ok(None);
        };
        let left = seq.job.params.max_tokens.saturating_sub(seq.generated + 1);
        let room = slot.cache.ctx.saturating_sub(slot.cache.pos + 2);
        let k = spec.max.min(left).min(room);
        if k == 0 {
            return Ok(None);
        }
        let mut hist = slot.tokens.clone();
        hist.extend(seq.next);
        let (draft, q) = match &spec.draft {
            None => (ngram_draft(&hist, 3, k), None),
            Some(dm) => {
                let sd = slot.draft.get_or_insert_with(|| SlotDraft {
                    cache: dm.new_cache(slot.cache.ctx),
                    fed: Vec::new(),
                });
                let cfg = seq.sampler.cfg.clone();
                let sampler = seq.draft_sampler.get_or_insert_with(|| {
                    let mut cfg = cfg;
                    cfg.seed ^= 0x9E37_79B9_7F4A_7C15;
                    Sampler::new(cfg)
                });
                let scratch = self
                    .draft_scratch
                    .get_or_insert_with(|| dm.new_state(64, 64));
                std::mem::swap(&mut scratch.cache, &mut sd.cache);
                let r = model_draft(dm, scratch, &mut sd.fed, sampler, &hist, k, spec.p_min);
                std::mem::swap(&mut scratch.cache, &mut sd.cache);
                let (d, q) = r?;
                (d, Some(q))
            }
        };
        Ok((!draft.is_empty()).then_some((draft, q)))
    }

    /// Verify slot `i`'s draft; returns the tokens its sequence produced.
    fn verify(
        &mut self,
        i: usize,
        (draft, q): Draft,
        done: &mut Vec<SeqDone>,
    ) -> Result<usize, ModelError> {
        let Self {
            model,
            slots,
            scratch,
            buf,
            ..
        } = self;
        let m = &model.model;
        let v = m.cfg.vocab;
        let slot = &mut slots[i];
        let Some(seq) = slot.seq.as_mut() else {
            return Ok(0);
        };
        let Some(next) = seq.next.take() else {
            return Ok(0);
        };
        let mut feed = vec![next];
        feed.extend_from_slice(&draft);
        let pos0 = slot.cache.pos;
        slot.cache.mark();
        let lora = seq.job.params.lora.clone();
        let rows = m
            .forward_cache_lora(scratch, &mut slot.cache, &feed, Logits::All, &lora)?
            .to_vec();
        // masks computed during an earlier batched step describe the state before `next`
        seq.mask = None;
        let mut stats = SpecStats::default();
        let mut sv = SeqVerify {
            seq,
            m: model,
            rows: &rows,
            buf,
            end: None,
        };
        let (kept, t) = settle(&mut sv, &rows, v, &draft, q.as_deref(), &mut stats)?;
        let end = sv.end;
        rewind_cache(m, scratch, &mut slot.cache, pos0, &feed[..1 + kept], &lora)?;
        slot.tokens.extend_from_slice(&feed[..1 + kept]);
        seq.job.metrics.record_spec(stats.drafted, stats.accepted);
        let room = slot.cache.pos < slot.cache.ctx;
        let outcome = match t {
            None => Outcome::Finished(end.unwrap_or(FinishReason::Length)),
            Some(t) => seq.emit(model, t, &rows[kept * v..(kept + 1) * v], room),
        };
        if let Outcome::Finished(r) = outcome {
            done.push(seq.finish(r));
            slot.seq = None;
            slot.freed = Instant::now();
        }
        Ok(1 + kept)
    }
}
