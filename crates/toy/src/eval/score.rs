//! Teacher-forced scoring: feed prompt + continuation in one pass and read, at each
//! continuation position, the log-softmax of the raw logits (as llama.cpp's `n_probs`).

use crate::model::{Logits, Model, ModelError, State};
use tinynn::kernels::act::log_sum_exp;

#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct TopLogprob {
    pub id: u32,
    pub logprob: f64,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct TokenScore {
    pub id: u32,
    pub logprob: f64,
    pub top: Vec<TopLogprob>,
}

/// Log-probabilities of `row` (V) after log-softmax: the `n` most likely, best first.
pub fn top_logprobs(row: &[f32], n: usize) -> Vec<TopLogprob> {
    let lse = log_sum_exp(row);
    let mut idx: Vec<u32> = (0..row.len() as u32).collect();
    let n = n.min(row.len());
    if n == 0 {
        return Vec::new();
    }
    idx.select_nth_unstable_by(n - 1, |a, b| {
        row[*b as usize].total_cmp(&row[*a as usize]).then(a.cmp(b))
    });
    idx.truncate(n);
    idx.sort_by(|a, b| row[*b as usize].total_cmp(&row[*a as usize]).then(a.cmp(b)));
    idx.into_iter()
        .map(|id| TopLogprob {
            id,
            logprob: row[id as usize] as f64 - lse,
        })
        .collect()
}

/// Score `continuation` after `prompt` (the prompt must not be empty) from a fresh state.
pub fn score(
    model: &Model,
    state: &mut State,
    prompt: &[u32],
    continuation: &[u32],
    top: usize,
) -> Result<Vec<TokenScore>, ModelError> {
    if prompt.is_empty() || continuation.is_empty() {
        return Err(ModelError::Empty);
    }
    // The last continuation token is never fed to `forward`, so check it (and the rest) here:
    // an out-of-range id would otherwise score as a silent -inf.
    let v = model.cfg.vocab;
    if let Some(&id) = prompt
        .iter()
        .chain(continuation)
        .find(|&&id| id as usize >= v)
    {
        return Err(ModelError::BadToken { id, vocab: v });
    }
    let mut input = prompt.to_vec();
    input.extend_from_slice(&continuation[..continuation.len() - 1]);
    state.reset();
    let logits = model.forward(state, &input, Logits::All)?;
    Ok(continuation
        .iter()
        .enumerate()
        .map(|(j, &id)| {
            let row = &logits[(prompt.len() - 1 + j) * v..(prompt.len() + j) * v];
            let lp = row
                .get(id as usize)
                .map_or(f64::NEG_INFINITY, |x| *x as f64 - log_sum_exp(row));
            TokenScore {
                id,
                logprob: lp,
                top: top_logprobs(row, top),
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_logprobs_sorted_and_normalised() {
        let row = [0.0f32, 2.0, 1.0, 2.0];
        let t = top_logprobs(&row, 3);
        assert_eq!(t.iter().map(|x| x.id).collect::<Vec<_>>(), vec![1, 3, 2]);
        let total: f64 = top_logprobs(&row, 4).iter().map(|x| x.logprob.exp()).sum();
        assert!((total - 1.0).abs() < 1e-9);
    }
}
