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
#[path = "sampler_tests.rs"]
mod tests;
