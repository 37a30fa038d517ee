//! The samplers of llama.cpp's chain beyond top-k/top-p/min-p (`src/llama-sampler.cpp` of
//! 0c1e570), each as its `llama_sampler_*_apply` computes it: top-n-sigma (Tang et al. 2024),
//! locally typical sampling (Meister et al. 2022), XTC ("exclude top choices"), and dynamic
//! temperature (entropy-scaled, `temp_ext`), and mirostat 1.0 / 2.0's truncations (which
//! replace top-k/top-p/min-p and steer the surprise of the drawn tokens to a target). `sampler.rs` runs them in llama.cpp's default
//! order: top_n_sigma, top_k, typical_p, top_p, min_p, xtc, temperature.
//! Candidates are (token, logit) pairs.

/// Top-n-sigma over the whole vocabulary: logits below max - n * std (the standard
/// deviation of the finite logits) become -inf. n <= 0 leaves them. The mean and deviation
/// are summed in f32 in the logits' order, as llama.cpp does, so the cut falls where its does.
pub fn top_n_sigma(l: &mut [f32], n: f32) {
    if n <= 0.0 || l.len() <= 1 {
        return;
    }
    let (mut max, mut sum, mut count) = (f32::NEG_INFINITY, 0f32, 0usize);
    for &v in l.iter().filter(|v| **v != f32::NEG_INFINITY) {
        max = max.max(v);
        sum += v;
        count += 1;
    }
    if count == 0 {
        return;
    }
    let mean = sum / count as f32;
    let mut acc = 0f32;
    for &v in l.iter().filter(|v| **v != f32::NEG_INFINITY) {
        // C++'s pow(float, int) is a double, added to a float accumulator
        acc = (acc as f64 + ((v - mean) as f64).powi(2)) as f32;
    }
    let floor = max - n * (acc / count as f32).sqrt();
    l.iter_mut()
        .filter(|v| **v < floor)
        .for_each(|v| *v = f32::NEG_INFINITY);
}

/// Probabilities as llama.cpp's `llama_sampler_softmax_impl` makes them, in f32 (exp of
/// logit - max, summed in the candidates' order): the cumulative cuts of top-p and typical
/// compare these, so they cut where llama.cpp does.
pub(super) fn probs_f32(cand: &[(u32, f32)]) -> Vec<f32> {
    let max = cand.iter().map(|x| x.1).fold(f32::NEG_INFINITY, f32::max);
    let mut p: Vec<f32> = cand.iter().map(|x| (x.1 - max).exp()).collect();
    let sum = p.iter().fold(0f32, |a, &b| a + b);
    p.iter_mut().for_each(|x| *x /= sum);
    p
}

/// Top-p (Holtzman et al. 2019) on candidates sorted largest first: how many to keep, the
/// fewest whose probability reaches `p` (running sum in f32, as llama.cpp). `z_order` is the
/// order llama.cpp's array is in when it sums the softmax's normaliser (None: sorted).
pub fn top_p_keep(cand: &[(u32, f32)], p: f32, z_order: Option<&[(u32, f32)]>) -> usize {
    let mut pr = probs_f32(cand);
    if let Some(z) = z_order {
        // the same exps, normalised by their sum in llama.cpp's order
        let max = cand[0].1;
        let sum = z.iter().fold(0f32, |a, x| a + (x.1 - max).exp());
        pr = cand.iter().map(|x| (x.1 - max).exp() / sum).collect();
    }
    let mut cum = 0f32;
    pr.iter()
        .position(|&x| {
            cum += x;
            cum >= p
        })
        .map_or(cand.len(), |i| i + 1)
}

/// The entropy (nats) of f32 probabilities, zeros skipped, summed in f32.
fn entropy_f32(pr: &[f32]) -> f32 {
    pr.iter()
        .filter(|&&x| x > 0.0)
        .fold(0f32, |e, &x| e - x * x.ln())
}

/// The probabilities of candidates at temperature `temp` (the sampler's softmax), into `out`.
pub(super) fn softmax_of(cand: &[(u32, f32)], temp: f32, out: &mut Vec<f64>) {
    let max = cand.iter().map(|x| x.1).fold(f32::NEG_INFINITY, f32::max) as f64;
    out.clear();
    out.extend(
        cand.iter()
            .map(|x| ((x.1 as f64 - max) / temp as f64).exp()),
    );
    let s: f64 = out.iter().sum();
    out.iter_mut().for_each(|v| *v /= s);
}

/// Softmax of the candidates' logits at temperature 1.
fn probs(cand: &[(u32, f32)]) -> Vec<f64> {
    let mut out = Vec::with_capacity(cand.len());
    softmax_of(cand, 1.0, &mut out);
    out
}

/// Locally typical sampling: the tokens whose surprise -ln p is closest to the entropy,
/// nearest first, until their probability passes `p` (at least one). p >= 1 keeps all.
/// The kept candidates come back in that order. In f32 as llama.cpp, except that a
/// probability of 0 adds nothing to the entropy (llama.cpp's sum turns NaN there).
pub fn typical(cand: &mut Vec<(u32, f32)>, p: f32) {
    if p >= 1.0 || cand.len() < 2 {
        return;
    }
    let pr = probs_f32(cand);
    let entropy = entropy_f32(&pr);
    let shifted: Vec<f32> = pr.iter().map(|x| (-x.ln() - entropy).abs()).collect();
    let mut order: Vec<usize> = (0..cand.len()).collect();
    order.sort_by(|&a, &b| shifted[a].total_cmp(&shifted[b]));
    let mut cum = 0f32;
    let mut keep = order.len();
    for (i, &j) in order.iter().enumerate() {
        cum += pr[j];
        if cum > p {
            keep = i + 1;
            break;
        }
    }
    *cand = order[..keep].iter().map(|&j| cand[j]).collect();
}

/// XTC: with probability `prob` (drawn as `u`), when two or more candidates have probability
/// at least `threshold`, all of them but the least likely one are removed. Needs candidates
/// sorted by logit, largest first; a threshold above 0.5 never finds two. Whether it ran
/// (llama.cpp sorts its array then).
pub fn xtc(cand: &mut Vec<(u32, f32)>, prob: f32, threshold: f32, u: f64) -> bool {
    if prob <= 0.0 || threshold > 0.5 || cand.len() < 2 || u >= prob as f64 {
        return false;
    }
    let pr = probs(cand);
    let above = pr.iter().take_while(|&&x| x >= threshold as f64).count();
    if above >= 2 {
        cand.drain(..above - 1);
    }
    true
}

/// Dynamic temperature: with `range` > 0 the temperature moves within temp ± range with
/// the candidates' normalised entropy (0 for one certain token, 1 for a uniform spread) to
/// the power `exponent`; otherwise it is `temp`. In f32 as llama.cpp's `temp_ext`.
pub fn dynamic_temperature(cand: &[(u32, f32)], temp: f32, range: f32, exponent: f32) -> f32 {
    if range <= 0.0 || cand.len() < 2 {
        return temp;
    }
    let (lo, hi) = ((temp - range).max(0.0), temp + range);
    let max_entropy = -(1.0 / cand.len() as f32).ln();
    let norm = entropy_f32(&probs_f32(cand)) / max_entropy;
    lo + (hi - lo) * norm.powf(exponent)
}

/// Mirostat 2.0 (Basu et al. 2021, llama.cpp's `mirostat_v2`): of candidates sorted by
/// probability `probs`, how many to keep: those whose surprise -log2 p is at most `mu`
/// (at least one).
pub fn mirostat_v2_keep(probs: &[f64], mu: f32) -> usize {
    let k = probs.iter().take_while(|p| -p.log2() <= mu as f64).count();
    k.max(1)
}

/// Mirostat 1.0's k: the Zipf exponent s estimated from the `m` most likely of the sorted
/// `probs`, then the top-k that makes the expected surprise `mu` over `n_vocab` tokens.
pub fn mirostat_v1_k(probs: &[f64], mu: f32, n_vocab: usize, m: usize) -> usize {
    let (mut sum_tb, mut sum_tt) = (0f64, 0f64);
    for i in 0..(m - 1).min(probs.len().saturating_sub(1)) {
        let t = ((i + 2) as f64 / (i + 1) as f64).ln();
        let b = (probs[i] / probs[i + 1]).ln();
        sum_tb += t * b;
        sum_tt += t * t;
    }
    let s = sum_tb / sum_tt;
    let eps = s - 1.0;
    let k = (eps * 2f64.powf(mu as f64) / (1.0 - (n_vocab as f64).powf(-eps))).powf(1.0 / s);
    if k.is_finite() && k >= 1.0 {
        (k as usize).min(probs.len())
    } else {
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(c: &[(u32, f32)]) -> Vec<u32> {
        c.iter().map(|x| x.0).collect()
    }

    #[test]
    fn top_n_sigma_keeps_the_logits_within_n_deviations_of_the_top() {
        // mean 1, std sqrt(2): n = 1 keeps logits >= 3 - 1.414
        let mut l = vec![3.0, 2.0, 1.0, 0.0, -1.0, f32::NEG_INFINITY];
        top_n_sigma(&mut l, 1.0);
        assert_eq!(&l[..3], &[3.0, 2.0, f32::NEG_INFINITY]);
        let mut all = vec![1.0f32; 5];
        top_n_sigma(&mut all, 1.0);
        assert_eq!(all, vec![1.0; 5], "all equal: std 0 keeps every one");
        let mut off = vec![3.0, -5.0];
        top_n_sigma(&mut off, 0.0);
        assert_eq!(off, vec![3.0, -5.0]);
    }

    #[test]
    fn typical_keeps_the_tokens_nearest_the_entropy() {
        // p = [0.5, 0.25, 0.125, 0.125]: entropy 1.2130 nats; surprises 0.693, 1.386, 2.079
        // -> distances 0.520, 0.173, 0.866: order 1, 0, then 2 and 3
        let l2 = std::f32::consts::LN_2;
        let mut c = vec![(0, 3.0 * l2), (1, 2.0 * l2), (2, l2), (3, l2)];
        typical(&mut c, 0.5);
        assert_eq!(ids(&c), vec![1, 0], "0.25 alone does not pass 0.5");
        let mut c = vec![(0, 3.0 * l2), (1, 2.0 * l2), (2, l2), (3, l2)];
        typical(&mut c, 0.2);
        assert_eq!(ids(&c), vec![1]);
        let mut c = vec![(0, 1.0), (1, 0.0)];
        typical(&mut c, 1.0);
        assert_eq!(ids(&c), vec![0, 1]);
    }

    #[test]
    fn xtc_drops_every_likely_token_but_the_least_likely_at_its_rate() {
        // p ~ [0.61, 0.22, 0.08, 0.03, ...]: two at or above 0.2
        let base: Vec<(u32, f32)> = (0..6).map(|i| (i, -(i as f32))).collect();
        let mut c = base.clone();
        xtc(&mut c, 1.0, 0.2, 0.5);
        assert_eq!(ids(&c), vec![1, 2, 3, 4, 5]);
        let mut c = base.clone();
        xtc(&mut c, 0.3, 0.2, 0.5);
        assert_eq!(c, base, "the draw 0.5 is not under the probability 0.3");
        let mut c = base.clone();
        xtc(&mut c, 1.0, 0.7, 0.0);
        assert_eq!(c, base, "a threshold over 0.5 never applies");
        let mut c = base.clone();
        xtc(&mut c, 1.0, 0.3, 0.0);
        assert_eq!(c, base, "one token above the threshold stays");
    }

    #[test]
    fn dynamic_temperature_follows_the_entropy() {
        let flat: Vec<(u32, f32)> = (0..8).map(|i| (i, 0.0)).collect();
        assert!((dynamic_temperature(&flat, 1.0, 0.5, 1.0) - 1.5).abs() < 1e-6);
        let sharp = vec![(0, 30.0), (1, 0.0), (2, 0.0)];
        assert!((dynamic_temperature(&sharp, 1.0, 0.5, 1.0) - 0.5).abs() < 1e-4);
        let mid = vec![(0, 1.0), (1, 0.0)];
        let t = dynamic_temperature(&mid, 0.8, 0.4, 2.0);
        let p = 1.0 / (1.0 + (-1f64).exp());
        let h = -(p * p.ln() + (1.0 - p) * (1.0 - p).ln()) / 2f64.ln();
        assert!((t as f64 - (0.4 + 0.8 * h.powi(2))).abs() < 1e-6, "{t}");
        assert_eq!(dynamic_temperature(&mid, 0.8, 0.0, 1.0), 0.8);
    }
}
