//! Log-probabilities of the model's distribution (log-softmax of the raw logits, before
//! sampling settings), for `logprobs` / `top_logprobs`. Computed only when a request asks.

/// One position: the chosen token's log-probability and the `n` most likely tokens.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprob {
    pub id: u32,
    pub logprob: f32,
    /// Most likely first.
    pub top: Vec<(u32, f32)>,
}

/// Log-probability of `id` under `logits` (V), with the `top_n` most likely tokens.
pub fn token_logprob(logits: &[f32], id: u32, top_n: usize) -> TokenLogprob {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&l| ((l - max) as f64).exp()).sum();
    let norm = max as f64 + sum.ln();
    let lp = |l: f32| (l as f64 - norm) as f32;
    let mut top: Vec<(u32, f32)> = Vec::with_capacity(top_n + 1);
    if top_n > 0 {
        for (i, &l) in logits.iter().enumerate() {
            if top.len() == top_n && l <= top[top_n - 1].1 {
                continue;
            }
            let at = top.partition_point(|x| x.1 >= l);
            top.insert(at, (i as u32, l));
            top.truncate(top_n);
        }
    }
    TokenLogprob {
        id,
        logprob: logits
            .get(id as usize)
            .map_or(f32::NEG_INFINITY, |&l| lp(l)),
        top: top.into_iter().map(|(i, l)| (i, lp(l))).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logprobs_are_a_normalised_log_softmax_with_the_best_first() {
        let logits = [1.0f32, 3.0, 2.0, 3.0];
        let t = token_logprob(&logits, 2, 3);
        let z: f32 = logits.iter().map(|l| l.exp()).sum();
        assert!((t.logprob - (2f32.exp() / z).ln()).abs() < 1e-5);
        let ids: Vec<u32> = t.top.iter().map(|x| x.0).collect();
        assert_eq!(ids, vec![1, 3, 2], "ties keep the lower id first");
        let total: f32 = logits.iter().map(|&l| (l - z.ln()).exp()).sum();
        assert!((total - 1.0).abs() < 1e-5);
        assert!(token_logprob(&logits, 0, 0).top.is_empty());
    }
}
