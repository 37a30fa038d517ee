//! Batches of chat-SFT samples ([`super::sft`]): one sample per row, no packing, in an order
//! shuffled afresh each epoch (Fisher-Yates) by SplitMix64 ([`crate::train::rng`]), whose
//! state is one u64, so a checkpoint that stores [`SftBatcher::state`] resumes exactly; or,
//! [`SftBatcher::in_file_order`], in the set's own order every epoch (as llama-finetune).
//!
//! B is the batch size, T the context. Row `b` of a batch holds sample `s` of length L
//! (L <= T + 1): `inputs[b, t] = s.tokens[t]` for t < L - 1, then the sample's last token as
//! padding; `targets[b, t] = s.tokens[t + 1]` where `s.train[t + 1]`, else [`IGNORE`], and
//! [`IGNORE`] over the padding. A batch may run across an epoch boundary.
//!
//! Packed ([`SftBatcher::next_packed`]): a row takes samples in order while the next still
//! fits (the first always does, cut to T), and `pos` counts each row's position inside its
//! sample from 0, for attention that stays inside each sample; the sample that did not fit
//! starts the next row (or the next batch: it is put back, so the state stays one position).

use super::sft::{Sample, SftSet, IGNORE};
use crate::train::rng::SplitMix64;

pub struct SftBatcher {
    rng: SplitMix64,
    /// The generator's state before this epoch's shuffle: with `epoch` and `pos`, all a
    /// resume needs.
    epoch_start: u64,
    order: Vec<usize>,
    shuffled: bool,
    epoch: usize,
    pos: usize,
    batch: usize,
    ctx: usize,
}

impl SftBatcher {
    pub fn new(n_samples: usize, seed: u64, batch: usize, ctx: usize) -> Self {
        Self::from_state(n_samples, (seed, 0, 0), batch, ctx)
    }

    /// `(rng state before this epoch's shuffle, epoch, position in the epoch)`.
    pub fn state(&self) -> (u64, usize, usize) {
        (self.epoch_start, self.epoch, self.pos)
    }

    /// The batcher [`Self::state`] described, given the same `n_samples`.
    pub fn from_state(
        n_samples: usize,
        (epoch_start, epoch, pos): (u64, usize, usize),
        batch: usize,
        ctx: usize,
    ) -> Self {
        assert!(n_samples > 0, "SftBatcher needs at least one sample");
        let mut b = Self {
            rng: SplitMix64::new(epoch_start),
            epoch_start,
            order: (0..n_samples).collect(),
            shuffled: true,
            epoch,
            pos: pos.min(n_samples),
            batch,
            ctx,
        };
        b.shuffle();
        b
    }

    /// The same batcher drawing the samples in the set's order, every epoch.
    pub fn in_file_order(mut self) -> Self {
        self.shuffled = false;
        self.order.sort_unstable();
        self
    }

    /// The pass over the samples now being drawn from (0-based); it advances when a sample
    /// is drawn after a full pass.
    pub fn epoch(&self) -> usize {
        self.epoch
    }

    fn shuffle(&mut self) {
        self.order.sort_unstable();
        if !self.shuffled {
            return;
        }
        for i in (1..self.order.len()).rev() {
            let j = self.rng.below(i as u64 + 1) as usize;
            self.order.swap(i, j);
        }
    }

    fn next_index(&mut self) -> usize {
        if self.pos == self.order.len() {
            self.epoch += 1;
            self.pos = 0;
            self.epoch_start = self.rng.state;
            self.shuffle();
        }
        self.pos += 1;
        self.order[self.pos - 1]
    }

    /// Fills `inputs` and `targets` (B, T) with the next B samples of `set` and returns how
    /// many targets carry loss.
    pub fn next(&mut self, set: &SftSet, inputs: &mut [u32], targets: &mut [u32]) -> usize {
        let (b, t) = (self.batch, self.ctx);
        self.check(set, inputs, targets);
        let mut trained = 0;
        for row in 0..b {
            let s = &set.samples[self.next_index()];
            let rows = row * t..(row + 1) * t;
            trained += put(s, &mut inputs[rows.clone()], &mut targets[rows]);
        }
        trained
    }

    /// As [`Self::next`] with several samples to a row, and `pos` (B, T) their positions.
    pub fn next_packed(
        &mut self,
        set: &SftSet,
        inputs: &mut [u32],
        targets: &mut [u32],
        pos: &mut [u32],
    ) -> usize {
        let (b, t) = (self.batch, self.ctx);
        self.check(set, inputs, targets);
        assert_eq!(pos.len(), b * t, "pos must be (B, T)");
        let mut trained = 0;
        for row in 0..b {
            let mut at = 0;
            while at < t {
                let s = &set.samples[self.next_index()];
                let n = len(s, t).max(1);
                if at > 0 && at + n > t {
                    self.pos -= 1; // it starts the next row
                    break;
                }
                let r = row * t + at..row * t + at + n;
                trained += put(s, &mut inputs[r.clone()], &mut targets[r.clone()]);
                count_from_zero(&mut pos[r]);
                at += n;
            }
            let r = row * t..(row + 1) * t;
            end_row(
                &mut inputs[r.clone()],
                &mut targets[r.clone()],
                &mut pos[r],
                at,
            );
        }
        trained
    }

    fn check(&self, set: &SftSet, inputs: &[u32], targets: &[u32]) {
        let (b, t) = (self.batch, self.ctx);
        assert_eq!(inputs.len(), b * t, "inputs must be (B, T)");
        assert_eq!(targets.len(), b * t, "targets must be (B, T)");
        assert_eq!(
            set.samples.len(),
            self.order.len(),
            "batcher built for another set"
        );
    }
}

/// Positions of `s` a row of `t` takes: its tokens but the last (cut to t when longer, as a
/// set loaded with a larger ctx can hold).
fn len(s: &Sample, t: usize) -> usize {
    s.tokens.len().saturating_sub(1).min(t)
}

/// A sample's positions inside a packed row: 0, 1, 2, ...
pub(super) fn count_from_zero(pos: &mut [u32]) {
    pos.iter_mut().zip(0..).for_each(|(p, i)| *p = i);
}

/// Pads one packed row (`x`, `y`, `pos` of T) from `at` on: the padding is a sample of its
/// own, its inputs the row's last token (or the row's first when it is empty), no targets.
pub(super) fn end_row(x: &mut [u32], y: &mut [u32], pos: &mut [u32], at: usize) {
    let pad = x[at.saturating_sub(1)];
    x[at..].fill(pad);
    y[at..].fill(IGNORE);
    count_from_zero(&mut pos[at..]);
}

/// Writes `s` into one row's `inputs` and `targets`, padding past its end with its last
/// token and [`IGNORE`]; returns how many targets carry loss.
fn put(s: &Sample, inp: &mut [u32], tgt: &mut [u32]) -> usize {
    let n = len(s, inp.len());
    let pad = s.tokens.last().copied().unwrap_or(0);
    let mut trained = 0;
    for (i, (x, y)) in inp.iter_mut().zip(tgt.iter_mut()).enumerate() {
        (*x, *y) = if i >= n {
            (pad, IGNORE)
        } else if s.train[i + 1] {
            trained += 1;
            (s.tokens[i], s.tokens[i + 1])
        } else {
            (s.tokens[i], IGNORE)
        };
    }
    trained
}
