//! One verify pass of speculative decoding (Leviathan, Kalman, Matias 2023, Algorithm 1),
//! shared by `toy generate` and the server: over the target's logits at the drafted
//! positions, each drafted token is kept with probability min(1, p/q); the first refusal is
//! replaced by a draw from norm(max(0, p - q)); when all are kept, a bonus token is drawn
//! from the last row. The caller's [`Verify`] supplies p (its sampler, constraint and
//! penalties, after what was kept) and takes the kept tokens.

use crate::model::ModelError;

/// A token's probability in a distribution of (token, probability) pairs.
fn prob(d: &[(u32, f64)], x: u32) -> f64 {
    d.iter().find(|e| e.0 == x).map_or(0.0, |e| e.1)
}

/// The token at cumulative probability `u` of `d` (weights need not sum to 1).
pub fn draw(d: &[(u32, f64)], u: f64) -> u32 {
    let total: f64 = d.iter().map(|e| e.1).sum();
    let mut cum = 0.0;
    for e in d {
        cum += e.1;
        if u * total < cum {
            return e.0;
        }
    }
    d.last().map_or(0, |e| e.0)
}

/// Leviathan et al.'s test of drafted token `x`: kept (`Ok`) when `u1 < p(x) / q(x)`, else
/// the token drawn with `u2` from norm(max(0, p - q)) (`q` None: a point mass on x).
pub fn accept_or_resample(
    p: &[(u32, f64)],
    q: Option<&[(u32, f64)]>,
    x: u32,
    u1: f64,
    u2: f64,
) -> Result<(), u32> {
    let qx = q.map_or(1.0, |q| prob(q, x));
    if qx > 0.0 && u1 < (prob(p, x) / qx).min(1.0) {
        return Ok(());
    }
    let qof = |t: u32| q.map_or(if t == x { 1.0 } else { 0.0 }, |q| prob(q, t));
    let residual: Vec<(u32, f64)> = p
        .iter()
        .map(|&(t, pt)| (t, (pt - qof(t)).max(0.0)))
        .filter(|e| e.1 > 0.0)
        .collect();
    // p <= q everywhere only when p = q, where nothing is refused but for rounding
    Err(if residual.is_empty() {
        draw(p, u2)
    } else {
        draw(&residual, u2)
    })
}

#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct SpecStats {
    /// Drafted tokens the target checked (not those after the generation ended), and how
    /// many it kept.
    pub drafted: usize,
    pub accepted: usize,
    /// Batched target forwards (each yields accepted + 1 tokens).
    pub rounds: usize,
}

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
