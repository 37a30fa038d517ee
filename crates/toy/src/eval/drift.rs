//! Token drift between two models on the same text (the seed's `ToyTokenDrift`): at every
//! position of every chunk, KL(A‖B) of the next-token distributions, whether their top
//! tokens agree, and the positions that drift most, with both models' top tokens. A model
//! against itself drifts by zero everywhere.

use crate::model::{Logits, Model, ModelError};
use tinynn::kernels::act::log_sum_exp;

#[derive(Debug, thiserror::Error)]
pub enum DriftError {
    #[error("the models' vocabularies differ: {0} against {1} tokens")]
    Vocab(usize, usize),
    #[error(transparent)]
    Model(#[from] ModelError),
}

/// One position: where it is, its KL(A‖B), the token that follows in the text and the top
/// tokens of A and of B with their probabilities.
#[derive(Clone, Debug, serde::Serialize)]
pub struct DriftAt {
    /// Index of the predicted token in the whole text.
    pub index: usize,
    pub kl: f64,
    pub next: u32,
    pub top_a: Vec<(u32, f32)>,
    pub top_b: Vec<(u32, f32)>,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct Drift {
    pub positions: usize,
    pub mean_kl: f64,
    pub median_kl: f64,
    pub p99_kl: f64,
    pub max_kl: f64,
    /// Share of positions whose top tokens agree.
    pub top1_agree: f64,
    /// Histogram of log10 KL: (lower edge, count) in decades from 1e-8 (below: the first bin).
    pub histogram: Vec<(f64, usize)>,
    /// The positions of largest KL, largest first.
    pub worst: Vec<DriftAt>,
}

/// log-softmax of one row of logits, in f64.
fn log_probs(row: &[f32]) -> Vec<f64> {
    let z = log_sum_exp(row) as f64;
    row.iter().map(|&x| x as f64 - z).collect()
}

fn top(lp: &[f64], k: usize) -> Vec<(u32, f32)> {
    let mut idx: Vec<usize> = (0..lp.len()).collect();
    let k = k.min(idx.len());
    idx.select_nth_unstable_by(k.saturating_sub(1), |&i, &j| lp[j].total_cmp(&lp[i]));
    idx.truncate(k);
    idx.sort_by(|&i, &j| lp[j].total_cmp(&lp[i]));
    idx.into_iter()
        .map(|i| (i as u32, lp[i].exp() as f32))
        .collect()
}

/// Drift of `b` from `a` on `tokens` in chunks of `ctx` (every position of a chunk but its
/// last predicts the next token), keeping the `n_worst` largest; `progress(done, total)`.
pub fn drift(
    a: &Model,
    b: &Model,
    tokens: &[u32],
    ctx: usize,
    n_worst: usize,
    mut progress: impl FnMut(usize, usize),
) -> Result<Drift, DriftError> {
    let v = a.cfg.vocab;
    if b.cfg.vocab != v {
        return Err(DriftError::Vocab(v, b.cfg.vocab));
    }
    let chunks = tokens.len() / ctx.max(2);
    if ctx < 2 || chunks == 0 {
        return Err(ModelError::ContextOverflow {
            pos: 0,
            n: tokens.len(),
            ctx,
        }
        .into());
    }
    let (mut sa, mut sb) = (a.new_state(ctx, ctx), b.new_state(ctx, ctx));
    let (mut kls, mut agree) = (Vec::new(), 0usize);
    let mut worst: Vec<DriftAt> = Vec::new();
    for c in 0..chunks {
        let chunk = &tokens[c * ctx..(c + 1) * ctx];
        sa.reset();
        sb.reset();
        let la = a.forward(&mut sa, chunk, Logits::All)?.to_vec();
        let lb = b.forward(&mut sb, chunk, Logits::All)?;
        for j in 0..ctx - 1 {
            let (pa, pb) = (
                log_probs(&la[j * v..(j + 1) * v]),
                log_probs(&lb[j * v..(j + 1) * v]),
            );
            let kl: f64 = pa.iter().zip(&pb).map(|(x, y)| x.exp() * (x - y)).sum();
            let kl = kl.max(0.0);
            let (ta, tb) = (top(&pa, 3), top(&pb, 3));
            agree += (ta[0].0 == tb[0].0) as usize;
            kls.push(kl);
            if n_worst > 0 && (worst.len() < n_worst || kl > worst[worst.len() - 1].kl) {
                worst.push(DriftAt {
                    index: c * ctx + j + 1,
                    kl,
                    next: chunk[j + 1],
                    top_a: ta,
                    top_b: tb,
                });
                worst.sort_by(|x, y| y.kl.total_cmp(&x.kl));
                worst.truncate(n_worst);
            }
        }
        progress(c + 1, chunks);
    }
    let n = kls.len();
    let mean_kl = kls.iter().sum::<f64>() / n as f64;
    let mut sorted = kls.clone();
    sorted.sort_by(f64::total_cmp);
    let q = |p: f64| sorted[((n - 1) as f64 * p).round() as usize];
    let mut histogram: Vec<(f64, usize)> = (-8..=1).map(|e| (10f64.powi(e), 0)).collect();
    for &k in &kls {
        let bin = if k <= 0.0 {
            0
        } else {
            (k.log10().floor() + 8.0).clamp(0.0, 9.0) as usize
        };
        histogram[bin].1 += 1;
    }
    Ok(Drift {
        positions: n,
        mean_kl,
        median_kl: q(0.5),
        p99_kl: q(0.99),
        max_kl: sorted[n - 1],
        top1_agree: agree as f64 / n as f64,
        histogram,
        worst,
    })
}
