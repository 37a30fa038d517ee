//! Token sampling as llama.cpp's sampler chain (`common/sampling.cpp`): logit bias, then the
//! stages in `samplers` order (default: repetition / presence / frequency penalties over the
//! last `penalty_last_n` tokens, DRY, top-n-sigma, top-k, typical-p, top-p (Holtzman et al.
//! 2019), min-p, XTC, temperature (dynamic where asked); `samplers.rs` and `dry.rs` have the
//! newer ones, `order.rs` the names), then a draw from a seeded RNG. Temperature <= 0 is
//! greedy (argmax after bias, penalties and DRY). Mirostat replaces the chain after the bias
//! with temperature and its own truncation, as in llama.cpp.

use super::dry::{Dry, DryBreakers};
use super::order::{Stage, DEFAULT_ORDER};
use super::samplers::softmax_of;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A seed for a run or request that gives none, as llama.cpp and ollama draw one: different
/// on every call (the clock's nanoseconds mixed with a per-process counter).
pub fn fresh_seed() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    (t ^ COUNTER
        .fetch_add(1, Ordering::Relaxed)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15))
    .rotate_left(17)
}

#[derive(Clone, Debug, PartialEq)]
pub struct SamplerConfig {
    pub temperature: f32,
    /// Keep the k most likely tokens; 0 keeps all.
    pub top_k: usize,
    /// Keep the smallest set whose probability reaches p; 1 keeps all.
    pub top_p: f32,
    /// Drop tokens less likely than min_p times the most likely; 0 keeps all.
    pub min_p: f32,
    /// Divide positive (multiply negative) logits of recent tokens; 1 is off.
    pub repeat_penalty: f32,
    pub presence_penalty: f32,
    pub frequency_penalty: f32,
    /// How many recent tokens the penalties look at.
    pub penalty_last_n: usize,
    /// Added to the logit of a token; -inf bans it.
    pub logit_bias: Vec<(u32, f32)>,
    pub seed: u64,
    /// Top-n-sigma: keep logits within n standard deviations of the top; <= 0 is off.
    pub top_n_sigma: f32,
    /// Locally typical sampling's mass; 1 is off.
    pub typical_p: f32,
    /// XTC: how often, and above which probability, the top choices are excluded; 0 is off.
    pub xtc_probability: f32,
    pub xtc_threshold: f32,
    /// Dynamic temperature: temperature ± range by entropy, to this exponent; 0 is off.
    pub dynatemp_range: f32,
    pub dynatemp_exponent: f32,
    /// Mirostat: 0 off, 1 or 2 (which replaces top-k, top-p, min-p, typical and XTC), with
    /// its target surprise tau (bits) and learning rate eta.
    pub mirostat: u8,
    pub mirostat_tau: f32,
    pub mirostat_eta: f32,
    /// DRY: penalty `multiplier * base^(length - allowed_length)` on tokens that extend a
    /// repeat within the last `dry_penalty_last_n` tokens (-1: all); multiplier 0 is off.
    pub dry_multiplier: f32,
    pub dry_base: f32,
    pub dry_allowed_length: usize,
    pub dry_penalty_last_n: i32,
    /// Strings that break DRY's sequences; empty: llama.cpp's `\n`, `:`, `"`, `*`.
    pub dry_sequence_breakers: Vec<String>,
    /// The chain's order; empty: llama.cpp's default (`order::DEFAULT_ORDER`).
    pub samplers: Vec<Stage>,
    /// DRY's breakers matched against the vocabulary (`with_vocab`); None: no breakers.
    pub dry_breakers: Option<Arc<DryBreakers>>,
}

/// The one default of every sampling setting, llama.cpp's (`common_params_sampling`): what
/// `toy generate` / `toy chat` flags and the server's request fields fall back to.
pub const DEFAULTS: SamplerConfig = SamplerConfig {
    temperature: 0.8,
    top_k: 40,
    top_p: 0.95,
    min_p: 0.05,
    repeat_penalty: 1.0,
    presence_penalty: 0.0,
    frequency_penalty: 0.0,
    penalty_last_n: 64,
    logit_bias: Vec::new(),
    seed: 0,
    top_n_sigma: -1.0,
    typical_p: 1.0,
    xtc_probability: 0.0,
    xtc_threshold: 0.1,
    dynatemp_range: 0.0,
    dynatemp_exponent: 1.0,
    mirostat: 0,
    mirostat_tau: 5.0,
    mirostat_eta: 0.1,
    dry_multiplier: 0.0,
    dry_base: 1.75,
    dry_allowed_length: 2,
    dry_penalty_last_n: -1,
    dry_sequence_breakers: Vec::new(),
    samplers: Vec::new(),
    dry_breakers: None,
};

impl Default for SamplerConfig {
    fn default() -> Self {
        DEFAULTS
    }
}

impl SamplerConfig {
    /// Argmax decoding.
    pub fn greedy() -> Self {
        Self {
            temperature: 0.0,
            ..Self::default()
        }
    }

    /// Matches DRY's sequence breakers against the vocabulary when DRY is on: every config
    /// made from a user's settings goes through this.
    pub fn with_vocab(mut self, tok: &crate::tokenizer::Tokenizer) -> Self {
        if self.dry().is_on() && self.dry_breakers.is_none() {
            let b = DryBreakers::new(tok, &self.dry_sequence_breakers);
            self.dry_breakers = Some(Arc::new(b));
        }
        self
    }

    /// The chain's stages in order.
    pub fn order(&self) -> &[Stage] {
        if self.samplers.is_empty() {
            &DEFAULT_ORDER
        } else {
            &self.samplers
        }
    }

    fn dry(&self) -> Dry {
        Dry {
            multiplier: self.dry_multiplier,
            base: self.dry_base,
            allowed_length: self.dry_allowed_length,
            last_n: self.dry_penalty_last_n,
        }
    }
}

pub struct Sampler {
    pub cfg: SamplerConfig,
    rng: StdRng,
    /// Tokens seen so far (prompt and output), newest last.
    history: Vec<u32>,
    cand: Vec<(u32, f32)>,
    /// Probabilities of `cand`, reused so a draw allocates nothing.
    probs: Vec<f64>,
    /// Mirostat's running surprise bound (bits), from 2 tau.
    mu: f32,
    /// DRY's sequence breakers as tokens (`with_vocab`); none until then.
    breakers: Arc<DryBreakers>,
    /// The order llama.cpp's candidate array would be in, where it is not sorted.
    phys: Phys,
}

/// The physical order of llama.cpp's candidate array, which its top-p sums the softmax's
/// normaliser in (f32, so the order shows in the cut): sorted, the vocabulary's order (before
/// any sorting stage), or a list (after typical, or a penalty on a sorted array).
#[derive(Clone, Debug, Default)]
enum Phys {
    #[default]
    Sorted,
    ById,
    List(Vec<u32>),
}

impl Sampler {
    pub fn new(cfg: SamplerConfig) -> Self {
        let rng = StdRng::seed_from_u64(cfg.seed);
        let cfg_tau = cfg.mirostat_tau;
        let cfg_breakers = cfg.dry_breakers.clone().unwrap_or_default();
        Self {
            cfg,
            rng,
            history: Vec::new(),
            cand: Vec::new(),
            probs: Vec::new(),
            mu: 2.0 * cfg_tau,
            breakers: cfg_breakers,
            phys: Phys::Sorted,
        }
    }

    /// Record a token (of the prompt or the output) for the penalties.
    pub fn accept(&mut self, id: u32) {
        self.history.push(id);
    }

    /// Forget the tokens seen and take `tokens` as the history penalties look at.
    pub fn set_history(&mut self, tokens: &[u32]) {
        self.history.clear();
        self.history.extend_from_slice(tokens);
    }

    /// Apply bias, penalties and DRY to `logits` in place (what greedy decoding sees).
    pub fn adjust(&self, logits: &mut [f32]) {
        self.bias(logits);
        for s in self.cfg.order() {
            match s {
                Stage::Penalties => self.penalties().for_each(|f| apply(logits, f)),
                Stage::Dry => self.dry().for_each(|f| apply(logits, f)),
                _ => {}
            }
        }
    }

    fn bias(&self, logits: &mut [f32]) {
        for &(id, b) in &self.cfg.logit_bias {
            if let Some(l) = logits.get_mut(id as usize) {
                *l += b;
            }
        }
    }

    /// The repetition / frequency / presence penalties, as changes to the logits of the
    /// tokens in the last `penalty_last_n`.
    fn penalties(&self) -> impl Iterator<Item = (u32, Change)> {
        let c = &self.cfg;
        let on =
            !(c.repeat_penalty == 1.0 && c.presence_penalty == 0.0 && c.frequency_penalty == 0.0);
        let recent = &self.history[self.history.len().saturating_sub(c.penalty_last_n)..];
        let mut counts: HashMap<u32, u32> = HashMap::new();
        if on {
            recent
                .iter()
                .for_each(|&id| *counts.entry(id).or_default() += 1);
        }
        let (rep, freq, pres) = (c.repeat_penalty, c.frequency_penalty, c.presence_penalty);
        counts.into_iter().map(move |(id, n)| {
            (
                id,
                Change::Penalty {
                    rep,
                    sub: n as f32 * freq + pres,
                },
            )
        })
    }

    fn dry(&self) -> impl Iterator<Item = (u32, Change)> {
        let p = self.cfg.dry().penalties(&self.history, &self.breakers);
        p.into_iter().map(|(id, d)| (id, Change::Sub(d)))
    }

    /// Choose the next token from raw logits (V). Does not record it; call `accept`.
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        self.sample_in_place(&mut logits.to_vec())
    }

    /// Whether `sample` is a plain argmax of the raw logits (greedy, no bias, no penalties),
    /// so a caller can skip copying them.
    pub fn is_plain_greedy(&self) -> bool {
        let c = &self.cfg;
        c.temperature <= 0.0
            && c.logit_bias.is_empty()
            && c.repeat_penalty == 1.0
            && c.presence_penalty == 0.0
            && c.frequency_penalty == 0.0
            && !c.dry().is_on()
    }

    /// `sample` on logits the caller no longer needs: bias and penalties are applied to
    /// them in place, so the server's per-token draw allocates no vocabulary-sized vector.
    pub fn sample_in_place(&mut self, l: &mut [f32]) -> u32 {
        if let Some(id) = self.candidates(l) {
            return id;
        }
        let r: f64 = self.rng.random();
        let mut cum = 0.0;
        let last = self.cand.len() - 1;
        let i = (self.probs.iter().position(|p| {
            cum += p;
            r < cum
        }))
        .unwrap_or(last);
        if self.cfg.mirostat != 0 {
            // steer mu by how surprising the drawn token was
            let surprise = -self.probs[i].log2() as f32;
            self.mu -= self.cfg.mirostat_eta * (surprise - self.cfg.mirostat_tau);
        }
        self.cand[i].0
    }

    /// The distribution `sample` draws from, as (token, probability) pairs, largest first:
    /// one token with probability 1 when greedy. For speculative decoding's acceptance test.
    pub fn distribution(&mut self, logits: &[f32]) -> Vec<(u32, f64)> {
        match self.candidates(&mut logits.to_vec()) {
            Some(id) => vec![(id, 1.0)],
            None => self
                .cand
                .iter()
                .map(|c| c.0)
                .zip(self.probs.iter().copied())
                .collect(),
        }
    }

    /// A uniform draw in [0, 1) from this sampler's generator.
    pub fn uniform(&mut self) -> f64 {
        self.rng.random()
    }

    /// Mirostat's candidates: every finite logit at the temperature, cut to mirostat 1.0's
    /// top-k or 2.0's surprise bound mu, renormalised (llama.cpp's chain: temperature, then
    /// mirostat; top-k, top-p, min-p, typical and XTC are not run).
    fn mirostat_candidates(&mut self, l: &[f32]) -> Option<u32> {
        self.cand.clear();
        let finite = l.iter().enumerate().filter(|(_, v)| v.is_finite());
        self.cand.extend(finite.map(|(i, v)| (i as u32, *v)));
        if self.cand.is_empty() {
            return Some(argmax(l));
        }
        self.cand.sort_unstable_by(rank);
        let t = self.cfg.temperature;
        softmax_of(&self.cand, t, &mut self.probs);
        let keep = match self.cfg.mirostat {
            1 => super::samplers::mirostat_v1_k(&self.probs, self.mu, l.len(), 100),
            _ => super::samplers::mirostat_v2_keep(&self.probs, self.mu),
        };
        self.cand.truncate(keep);
        softmax_of(&self.cand, t, &mut self.probs);
        None
    }

    /// Adjusts `l` and filters it to the candidates and their probabilities (`cand`,
    /// `probs`); returns the token itself where no draw is needed (greedy, nothing finite).
    fn candidates(&mut self, l: &mut [f32]) -> Option<u32> {
        if self.cfg.temperature <= 0.0 {
            self.adjust(l);
            return Some(argmax(l));
        }
        self.bias(l);
        if self.cfg.mirostat != 0 {
            return self.mirostat_candidates(l);
        }
        let order = std::mem::take(&mut self.cfg.samplers);
        let stages = if order.is_empty() {
            &DEFAULT_ORDER[..]
        } else {
            &order[..]
        };
        // the stages before the first cut run on the whole vector `l`, in place
        let mut first_cut = stages.len();
        for (i, s) in stages.iter().enumerate() {
            match s {
                Stage::Penalties => self.penalties().for_each(|f| apply(l, f)),
                Stage::Dry => self.dry().for_each(|f| apply(l, f)),
                Stage::TopNSigma => super::samplers::top_n_sigma(l, self.cfg.top_n_sigma),
                _ => {
                    first_cut = i;
                    break;
                }
            }
        }
        self.phys = Phys::Sorted;
        match stages.get(first_cut) {
            Some(Stage::TopK) if self.cfg.top_k > 0 => top_k(l, self.cfg.top_k, &mut self.cand),
            _ => {
                self.phys = Phys::ById;
                self.cand.clear();
                let finite = l.iter().enumerate().filter(|(_, v)| v.is_finite());
                self.cand.extend(finite.map(|(i, v)| (i as u32, *v)));
            }
        }
        self.cand.sort_unstable_by(rank);
        let mut t = 1.0;
        for (i, &s) in stages.iter().enumerate().skip(first_cut) {
            if self.cand.is_empty() {
                break;
            }
            t = self.stage(s, i + 1 == stages.len());
        }
        self.cfg.samplers = order;
        if self.cand.is_empty() {
            return Some(argmax(l));
        }
        softmax_of(&self.cand, t, &mut self.probs);
        None
    }

    /// One stage on the sorted candidates. Temperature scales the logits the later stages
    /// see; as the last stage it is returned for the softmax instead (1 otherwise).
    fn stage(&mut self, s: Stage, last: bool) -> f32 {
        let c = &self.cfg;
        match s {
            Stage::Penalties | Stage::Dry => {
                let changes: Vec<_> = match s {
                    Stage::Penalties => self.penalties().collect(),
                    _ => self.dry().collect(),
                };
                let at: HashMap<u32, Change> = changes.into_iter().collect();
                if let Phys::Sorted = self.phys {
                    self.phys = Phys::List(self.cand.iter().map(|x| x.0).collect());
                }
                for x in self.cand.iter_mut() {
                    if let Some(ch) = at.get(&x.0) {
                        x.1 = ch.apply(x.1);
                    }
                }
                self.cand.sort_unstable_by(rank);
            }
            Stage::TopNSigma => {
                let mut v: Vec<f32> = self.cand.iter().map(|x| x.1).collect();
                super::samplers::top_n_sigma(&mut v, c.top_n_sigma);
                let keep = v.iter().take_while(|x| x.is_finite()).count();
                self.cand.truncate(keep);
            }
            Stage::TopK if c.top_k > 0 => {
                self.cand.truncate(c.top_k);
                self.phys = Phys::Sorted;
            }
            Stage::TopK => {}
            Stage::Typical if c.typical_p < 1.0 => {
                super::samplers::typical(&mut self.cand, c.typical_p);
                self.phys = Phys::List(self.cand.iter().map(|x| x.0).collect());
                self.cand.sort_unstable_by(rank);
            }
            Stage::Typical => {}
            Stage::TopP if c.top_p < 1.0 => {
                let z = self.llama_order();
                let keep = super::samplers::top_p_keep(&self.cand, c.top_p, z.as_deref());
                self.cand.truncate(keep);
                self.phys = Phys::Sorted;
            }
            Stage::TopP => {}
            Stage::MinP if c.min_p > 0.0 => {
                let floor = self.cand[0].1 + c.min_p.ln();
                let keep = self.cand.iter().take_while(|x| x.1 >= floor).count().max(1);
                self.cand.truncate(keep);
            }
            Stage::MinP => {}
            Stage::Xtc if c.xtc_probability > 0.0 => {
                // a draw only where XTC is on: other settings keep their random streams
                let u: f64 = self.rng.random();
                let (prob, threshold) = (c.xtc_probability, c.xtc_threshold);
                if super::samplers::xtc(&mut self.cand, prob, threshold, u) {
                    self.phys = Phys::Sorted;
                }
            }
            Stage::Xtc => {}
            Stage::Temperature => {
                let t = super::samplers::dynamic_temperature(
                    &self.cand,
                    c.temperature,
                    c.dynatemp_range,
                    c.dynatemp_exponent,
                );
                if c.dynatemp_range > 0.0 {
                    self.phys = Phys::Sorted;
                }
                if t <= 0.0 {
                    // a dynamic range reaching 0: the top candidate alone
                    self.cand.truncate(1);
                    return 1.0;
                }
                if last {
                    return t;
                }
                self.cand.iter_mut().for_each(|x| x.1 /= t);
            }
        }
        1.0
    }
}

impl Sampler {
    /// The candidates in llama.cpp's physical order, where it is not the sorted one.
    fn llama_order(&self) -> Option<Vec<(u32, f32)>> {
        match &self.phys {
            Phys::Sorted => None,
            Phys::ById => {
                let mut v = self.cand.clone();
                v.sort_unstable_by_key(|x| x.0);
                Some(v)
            }
            Phys::List(ids) => {
                let at: HashMap<u32, f32> = self.cand.iter().copied().collect();
                Some(
                    ids.iter()
                        .filter_map(|id| at.get(id).map(|&l| (*id, l)))
                        .collect(),
                )
            }
        }
    }
}

/// A change to one token's logit.
#[derive(Clone, Copy, Debug)]
enum Change {
    /// Repetition penalty (divide a positive logit, multiply a negative one), then subtract.
    Penalty { rep: f32, sub: f32 },
    /// DRY: subtract.
    Sub(f32),
}

impl Change {
    fn apply(self, l: f32) -> f32 {
        match self {
            Change::Penalty { rep, sub } => (if l > 0.0 { l / rep } else { l * rep }) - sub,
            Change::Sub(d) => l - d,
        }
    }
}

fn apply(logits: &mut [f32], (id, ch): (u32, Change)) {
    if let Some(l) = logits.get_mut(id as usize) {
        *l = ch.apply(*l);
    }
}

/// The order candidates are kept and listed in: the larger logit first, then the lower id.
fn rank(a: &(u32, f32), b: &(u32, f32)) -> std::cmp::Ordering {
    b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
}

/// The `k` finite logits of `l` first in [`rank`] order, into `out` (unsorted), in one pass
/// that keeps at most 2k candidates: each time the buffer fills it is cut to the best k, and
/// a logit not above the k-th best so far is skipped (an equal one has a higher id, so it
/// ranks below). On a 262k vocabulary this is one read of the logits, not a 262k-long
/// selection.
fn top_k(l: &[f32], k: usize, out: &mut Vec<(u32, f32)>) {
    let cap = 2 * k.max(32);
    out.clear();
    out.reserve(cap);
    let mut floor = f32::NEG_INFINITY;
    let cut = |out: &mut Vec<(u32, f32)>| {
        if out.len() > k {
            out.select_nth_unstable_by(k - 1, rank);
            out.truncate(k);
        }
    };
    for (i, &v) in l.iter().enumerate() {
        if !v.is_finite() || (out.len() >= k && v <= floor && floor > f32::NEG_INFINITY) {
            continue;
        }
        out.push((i as u32, v));
        if out.len() == cap {
            cut(out);
            floor = out.iter().map(|c| c.1).fold(f32::INFINITY, f32::min);
        }
    }
    cut(out);
}

/// Index of the largest value; the lowest index wins ties.
pub fn argmax(x: &[f32]) -> u32 {
    let mut best = 0;
    for (i, v) in x.iter().enumerate() {
        if *v > x[best] {
            best = i;
        }
    }
    best as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_takes_argmax_and_bias_changes_it() {
        let mut s = Sampler::new(SamplerConfig::greedy());
        assert_eq!(s.sample(&[0.1, 2.0, 1.0]), 1);
        s.cfg.logit_bias = vec![(1, f32::NEG_INFINITY)];
        assert_eq!(s.sample(&[0.1, 2.0, 1.0]), 2);
    }

    #[test]
    fn penalties_push_down_repeated_tokens() {
        let mut s = Sampler::new(SamplerConfig {
            repeat_penalty: 2.0,
            ..SamplerConfig::greedy()
        });
        s.accept(1);
        assert_eq!(s.sample(&[0.0, 2.0, 1.5]), 2);
        let mut l = [1.0f32, -1.0];
        let mut p = Sampler::new(SamplerConfig {
            presence_penalty: 0.5,
            frequency_penalty: 0.25,
            ..SamplerConfig::greedy()
        });
        p.accept(0);
        p.accept(0);
        p.accept(1);
        p.adjust(&mut l);
        assert_eq!(l, [1.0 - 0.5 - 0.5, -1.0 - 0.25 - 0.5]);
    }

    #[test]
    fn same_seed_same_draws_and_top_k_one_is_greedy() {
        let logits: Vec<f32> = (0..50).map(|i| (i as f32 * 0.37).sin()).collect();
        let cfg = SamplerConfig {
            temperature: 1.5,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed: 7,
            ..Default::default()
        };
        let draws = |cfg: &SamplerConfig| {
            let mut s = Sampler::new(cfg.clone());
            (0..20).map(|_| s.sample(&logits)).collect::<Vec<_>>()
        };
        assert_eq!(draws(&cfg), draws(&cfg));
        let d = draws(&cfg);
        assert!(d.iter().any(|&x| x != d[0]), "high temperature should vary");
        let k1 = SamplerConfig {
            top_k: 1,
            ..cfg.clone()
        };
        assert!(draws(&k1).iter().all(|&x| x == argmax(&logits)));
    }

    #[test]
    fn sample_in_place_draws_as_sample_does() {
        let logits: Vec<f32> = (0..64).map(|i| (i as f32 * 0.61).cos() * 3.0).collect();
        let cfg = SamplerConfig {
            temperature: 1.0,
            top_k: 0,
            top_p: 0.9,
            presence_penalty: 0.5,
            logit_bias: vec![(3, 2.0)],
            seed: 11,
            ..Default::default()
        };
        let (mut a, mut b) = (Sampler::new(cfg.clone()), Sampler::new(cfg));
        for _ in 0..30 {
            let x = a.sample(&logits);
            let y = b.sample_in_place(&mut logits.clone());
            assert_eq!(x, y);
            a.accept(x);
            b.accept(y);
        }
        assert!(Sampler::new(SamplerConfig::greedy()).is_plain_greedy());
        let biased = SamplerConfig {
            logit_bias: vec![(0, 1.0)],
            ..SamplerConfig::greedy()
        };
        assert!(!Sampler::new(biased).is_plain_greedy());
    }

    #[test]
    fn top_p_and_min_p_cut_the_tail() {
        // probabilities ~ [0.64, 0.24, 0.09, 0.03]
        let logits = [3.0f32, 2.0, 1.0, 0.0];
        let mut s = Sampler::new(SamplerConfig {
            temperature: 1.0,
            top_k: 0,
            top_p: 0.5,
            min_p: 0.0,
            seed: 1,
            ..Default::default()
        });
        assert!((0..100).all(|_| s.sample(&logits) == 0));
        let mut m = Sampler::new(SamplerConfig {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.3,
            seed: 1,
            ..Default::default()
        });
        assert!((0..200).all(|_| m.sample(&logits) < 2));
    }

    /// Temperature divides the logits before the softmax: the kept distribution is
    /// softmax(l / T) at every T (a sampler that ignored it would give the same at all three).
    #[test]
    fn temperature_shapes_the_distribution() {
        let logits = [2.0f32, 1.0, 0.0, -1.5];
        for t in [0.5f32, 1.0, 2.0] {
            let mut s = Sampler::new(SamplerConfig {
                temperature: t,
                top_k: 0,
                top_p: 1.0,
                min_p: 0.0,
                ..SamplerConfig::default()
            });
            let got = s.distribution(&logits);
            let z: f64 = logits.iter().map(|&l| ((l / t) as f64).exp()).sum();
            assert_eq!(got.len(), logits.len());
            for (id, p) in got {
                let want = ((logits[id as usize] / t) as f64).exp() / z;
                assert!((p - want).abs() < 1e-6, "T={t}: p({id}) = {p}, want {want}");
            }
        }
        // the one default is llama.cpp's
        assert_eq!(SamplerConfig::default().temperature, 0.8);
        assert_eq!(DEFAULTS.top_p, 0.95);
    }

    /// The one-pass top-k keeps exactly the first k of a full sort (larger logit, then lower
    /// id), with ties, banned (-inf) and NaN logits, on small and 262k vocabularies.
    #[test]
    fn top_k_is_the_first_k_of_a_full_sort() {
        let mut state = 7u64;
        for (n, k) in [(10, 3), (50, 50), (1000, 40), (262_144, 40), (262_144, 1)] {
            let l: Vec<f32> = (0..n)
                .map(|i| {
                    state = state
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    match (state >> 60, i % 97) {
                        (0, _) => f32::NEG_INFINITY,
                        (1, 0) => f32::NAN,
                        // few distinct values: many ties
                        (s, _) => ((state >> 20) % 64) as f32 / 8.0 - s as f32,
                    }
                })
                .collect();
            let mut want: Vec<(u32, f32)> = (l.iter().enumerate())
                .filter(|(_, v)| v.is_finite())
                .map(|(i, v)| (i as u32, *v))
                .collect();
            want.sort_unstable_by(rank);
            want.truncate(k);
            let mut got = Vec::new();
            top_k(&l, k, &mut got);
            got.sort_unstable_by(rank);
            assert_eq!(got, want, "n={n} k={k}");
        }
    }

    fn open(cfg: SamplerConfig) -> Sampler {
        Sampler::new(SamplerConfig {
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            temperature: 1.0,
            ..cfg
        })
    }

    /// The newer samplers change what is drawn from as their definitions say (`samplers.rs`
    /// tests each alone): a sampler that ignored its setting would keep every token here.
    #[test]
    fn top_n_sigma_typical_and_dynamic_temperature_shape_the_distribution() {
        let support = |d: Vec<(u32, f64)>| {
            let mut ids: Vec<u32> = d.iter().map(|x| x.0).collect();
            ids.sort();
            ids
        };
        let l = [3.0f32, 2.0, 1.0, 0.0, -1.0];
        let mut s = open(SamplerConfig {
            top_n_sigma: 1.0,
            ..DEFAULTS
        });
        assert_eq!(support(s.distribution(&l)), vec![0, 1]);
        let l2 = std::f32::consts::LN_2;
        let t = [3.0 * l2, 2.0 * l2, l2, l2];
        let mut s = open(SamplerConfig {
            typical_p: 0.5,
            ..DEFAULTS
        });
        let d = s.distribution(&t);
        assert_eq!(support(d.clone()), vec![0, 1]);
        assert!((d.iter().find(|x| x.0 == 0).unwrap().1 - 2.0 / 3.0).abs() < 1e-9);
        let two = [1.0f32, 0.0];
        let mut s = open(SamplerConfig {
            dynatemp_range: 0.5,
            ..DEFAULTS
        });
        let tdyn =
            super::super::samplers::dynamic_temperature(&[(0, 1.0), (1, 0.0)], 1.0, 0.5, 1.0);
        let want = 1.0 / (1.0 + (-1.0 / tdyn as f64).exp());
        let p0 = s.distribution(&two).iter().find(|x| x.0 == 0).unwrap().1;
        assert!(
            (p0 - want).abs() < 1e-6 && (p0 - 0.731).abs() > 0.01,
            "{p0} vs {want}"
        );
    }

    /// XTC removes the top choices at its rate: token 0 (p 0.63, with token 1 also above the
    /// threshold) is drawn only in the draws where XTC does not fire.
    #[test]
    fn xtc_excludes_the_top_choices_at_its_rate() {
        let l: Vec<f32> = (0..6).map(|i| -(i as f32)).collect();
        let mut s = open(SamplerConfig {
            xtc_probability: 0.5,
            xtc_threshold: 0.2,
            seed: 11,
            ..DEFAULTS
        });
        let n = 4000;
        let zeros = (0..n).filter(|_| s.sample(&l) == 0).count() as f64 / n as f64;
        let p0 = 1.0 / (0..6).map(|i| (-(i as f64)).exp()).sum::<f64>();
        assert!((zeros - 0.5 * p0).abs() < 0.03, "{zeros} vs {}", 0.5 * p0);
    }

    /// Mirostat 1.0 and 2.0 hold the surprise of the drawn tokens near tau (within 10%
    /// averaged over 500 tokens), on Zipf-shaped logits over 1000 tokens that change each
    /// step; a sampler ignoring tau would drift to the distribution's own entropy.
    #[test]
    fn mirostat_holds_the_surprise_near_tau() {
        for (version, tau) in [(2u8, 5.0f32), (2, 3.0), (1, 5.0), (1, 3.0)] {
            let mut s = open(SamplerConfig {
                mirostat: version,
                mirostat_tau: tau,
                seed: 3,
                ..DEFAULTS
            });
            let mut noise = 1u64;
            let mut total = 0f64;
            let steps = 500;
            for _ in 0..steps {
                let l: Vec<f32> = (0..1000)
                    .map(|i| {
                        noise = noise
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        -1.1 * ((i + 1) as f32).ln()
                            + ((noise >> 40) as f32 / (1u64 << 24) as f32) * 0.5
                    })
                    .collect();
                let d = s.distribution(&l);
                let id = s.sample(&l);
                let p = d.iter().find(|x| x.0 == id).map_or(1.0, |x| x.1);
                total += -p.log2();
            }
            let mean = total / steps as f64;
            assert!(
                (mean - tau as f64).abs() <= 0.1 * tau as f64,
                "mirostat {version}: mean surprise {mean} for tau {tau}"
            );
        }
    }
}
