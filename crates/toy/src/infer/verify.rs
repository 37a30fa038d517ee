//! One verify pass of speculative decoding (Leviathan, Kalman, Matias 2023, Algorithm 1),
//! shared by `toy generate` and the server: over the target's logits at the drafted
//! positions, each drafted token is kept with probability min(1, p/q); the first refusal is
//! replaced by a draw from norm(max(0, p - q)); when all are kept, a bonus token is drawn
//! from the last row. The caller's [`Verify`] supplies p (its sampler, constraint and
//! penalties, after what was kept) and takes the kept tokens.

use super::speculative::{accept_or_resample, draw, SpecStats};
use crate::model::ModelError;

/// What a verify pass needs from the sequence it runs for.
pub trait Verify {
    /// The target's sampling distribution at `row` (V logits), given the tokens kept so far.
    fn distribution(&mut self, row: &[f32]) -> Result<Vec<(u32, f64)>, ModelError>;
    /// A uniform draw in [0, 1) from the sequence's generator.
    fn uniform(&mut self) -> f64;
    /// Keep drafted token `x` (at row `at`); false when the generation ends with it.
    fn keep(&mut self, x: u32, at: usize) -> Result<bool, ModelError>;
}

/// The verdict on `draft` given `rows` ((len(draft) + 1) x `vocab` logits, row i scoring
/// the token after drafted token i - 1): how many drafted tokens were kept, and the token
/// that follows them (`None` when `keep` ended the generation).
pub fn settle(
    seq: &mut dyn Verify,
    rows: &[f32],
    vocab: usize,
    draft: &[u32],
    q: Option<&[Vec<(u32, f64)>]>,
    stats: &mut SpecStats,
) -> Result<(usize, Option<u32>), ModelError> {
    stats.rounds += 1;
    for (i, &x) in draft.iter().enumerate() {
        let p = seq.distribution(&rows[i * vocab..(i + 1) * vocab])?;
        stats.drafted += 1;
        let (u1, u2) = (seq.uniform(), seq.uniform());
        if let Err(t) = accept_or_resample(&p, q.map(|q| &q[i][..]), x, u1, u2) {
            return Ok((i, Some(t)));
        }
        stats.accepted += 1;
        if !seq.keep(x, i)? {
            return Ok((i + 1, None));
        }
    }
    let n = draft.len();
    let p = seq.distribution(&rows[n * vocab..(n + 1) * vocab])?;
    let u = seq.uniform();
    Ok((n, Some(draw(&p, u))))
}
