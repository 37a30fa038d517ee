//! DRY ("Don't Repeat Yourself", p-e-w, text-generation-webui PR 5677), as llama.cpp 0c1e570
//! runs it (`llama_sampler_dry_apply`, ported from koboldcpp PR 982): a token that would
//! extend a sequence already seen in the last `dry_penalty_last_n` tokens, longer than
//! `dry_allowed_length`, loses `multiplier * base^(length - allowed)` from its logit. Sequence
//! breakers (strings; "\n", ":", "\"", "*" by default) cut the sequences looked at: a
//! breaker's head token with its tail tokens (`get_overlapping_token_sequences`) stops the
//! backward scan, and a single-token breaker is never penalised.

use crate::tokenizer::Tokenizer;
use std::collections::HashMap;

/// llama.cpp's default sequence breakers (`common_params_sampling::dry_sequence_breakers`).
pub const DEFAULT_BREAKERS: [&str; 4] = ["\n", ":", "\"", "*"];

/// The breakers as token sequences: each head token with the tails (possibly empty) that
/// complete a breaker after it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DryBreakers(HashMap<u32, Vec<Vec<u32>>>);

impl DryBreakers {
    /// Every token whose text contains a breaker (empty tail), or ends with a breaker's head
    /// (tail: the rest tokenized, at most 20 tokens); breakers cut to 40 bytes.
    pub fn new(tok: &Tokenizer, breakers: &[String]) -> Self {
        let list: Vec<&str> = if breakers.is_empty() {
            DEFAULT_BREAKERS.to_vec()
        } else {
            breakers.iter().map(String::as_str).collect()
        };
        let mut map: HashMap<u32, Vec<Vec<u32>>> = HashMap::new();
        for b in list.iter().filter(|b| !b.is_empty()) {
            let b = &b.as_bytes()[..b.len().min(40)];
            for id in 0..tok.vocab_size() as u32 {
                for tail in overlaps(tok.token_bytes_ref(id), b, tok) {
                    let tails = map.entry(id).or_default();
                    if !tails.contains(&tail) {
                        tails.push(tail);
                    }
                }
            }
        }
        Self(map)
    }

    /// Breakers given as token sequences directly (head first), for tests.
    pub fn from_tokens(seqs: &[Vec<u32>]) -> Self {
        let mut map: HashMap<u32, Vec<Vec<u32>>> = HashMap::new();
        for s in seqs.iter().filter(|s| !s.is_empty()) {
            map.entry(s[0]).or_default().push(s[1..].to_vec());
        }
        Self(map)
    }
}

/// The tails after `word` that complete breaker `b`: one empty tail when `word` contains
/// it, else the tokenization of what follows each place where `word` ends with a prefix of it.
fn overlaps(word: &[u8], b: &[u8], tok: &Tokenizer) -> Vec<Vec<u32>> {
    if word.windows(b.len()).any(|w| w == b) {
        return vec![Vec::new()];
    }
    let mut tails = Vec::new();
    for pos in (0..word.len()).filter(|&p| word[p] == b[0]) {
        let n = (word.len() - pos).min(b.len());
        if word[pos..pos + n] == b[..n] {
            let rest = String::from_utf8_lossy(&b[n..]);
            let mut t = tok.encode(&rest, false).unwrap_or_default();
            t.truncate(20);
            if !tails.contains(&t) {
                tails.push(t);
            }
        }
    }
    tails
}

/// DRY's settings, as in `SamplerConfig`.
#[derive(Clone, Copy, Debug)]
pub struct Dry {
    pub multiplier: f32,
    pub base: f32,
    pub allowed_length: usize,
    /// How many recent tokens to scan; -1 all of them, 0 off.
    pub last_n: i32,
}

impl Dry {
    pub fn is_on(&self) -> bool {
        self.multiplier != 0.0 && self.base >= 1.0 && self.last_n != 0
    }

    /// The (token, amount) pairs to subtract from the logits after `history` (oldest first).
    pub fn penalties(&self, history: &[u32], breakers: &DryBreakers) -> Vec<(u32, f32)> {
        if !self.is_on() {
            return Vec::new();
        }
        let n = match self.last_n {
            -1 => history.len(),
            k => history.len().min(k.max(0) as usize),
        };
        let allowed = self.allowed_length;
        if n <= allowed {
            return Vec::new();
        }
        let rat = |i: usize| history[history.len() - 1 - i]; // i-th newest
        let rep_limit = rep_limit(n, &rat, breakers);
        if rep_limit < allowed {
            return Vec::new();
        }
        let counts = repeat_counts(n, rep_limit, &rat);
        // the longest repeat each next token would extend
        let mut longest: HashMap<u32, usize> = HashMap::new();
        for (i, &len) in counts.iter().enumerate().take(n - 1) {
            if len >= allowed {
                let e = longest.entry(rat(n - 2 - i)).or_insert(len);
                *e = (*e).max(len);
            }
        }
        let max_exp = if self.base > 1.000_001 {
            (88.722_84_f32 / self.base.ln()) as i64
        } else {
            0
        };
        let single = |id: &u32| {
            breakers
                .0
                .get(id)
                .is_some_and(|t| t.iter().any(Vec::is_empty))
        };
        let mut out: Vec<(u32, f32)> = longest
            .into_iter()
            .filter(|(id, _)| !single(id))
            .map(|(id, len)| {
                let mut e = len as i64 - allowed as i64;
                if max_exp > 0 && e > max_exp {
                    e = max_exp;
                }
                (id, self.multiplier * self.base.powi(e as i32))
            })
            .collect();
        out.sort_unstable_by_key(|p| p.0);
        out
    }
}

/// Step 1: how far back a repeat may reach: up to the newest complete breaker, or all `n`.
fn rep_limit(n: usize, rat: &impl Fn(usize) -> u32, breakers: &DryBreakers) -> usize {
    for i in 0..n {
        let Some(tails) = breakers.0.get(&rat(i)) else {
            continue;
        };
        let longest = tails
            .iter()
            .filter(|t| t.len() <= i && (0..t.len()).all(|o| t[o] == rat(i - o - 1)))
            .map(Vec::len)
            .max();
        if let Some(m) = longest {
            return i - m;
        }
    }
    n
}

/// Step 2: for each position (oldest first), the length of the suffix of the last `n`
/// tokens that also ends there (reverse Z-algorithm), capped at `limit`.
fn repeat_counts(n: usize, limit: usize, rat: &impl Fn(usize) -> u32) -> Vec<usize> {
    let mut count = vec![0usize; n];
    let last = n - 1;
    let (mut lt, mut rt) = (0usize, 0usize);
    for k in 1..n {
        if k > rt {
            let mut m = 0;
            while m + k < n && rat(m) == rat(m + k) {
                m += 1;
            }
            count[last - k] = m.min(limit);
            if m > 0 {
                lt = k;
                rt = k + m - 1;
            }
        } else {
            let p = k - lt;
            let right = rt - k + 1;
            if count[last - p] < right {
                count[last - k] = count[last - p].min(limit);
            } else {
                let mut i = rt + 1;
                while i < n && rat(i) == rat(i - k) {
                    i += 1;
                }
                count[last - k] = (i - k).min(limit);
                lt = k;
                rt = i - 1;
            }
        }
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dry() -> Dry {
        Dry {
            multiplier: 1.0,
            base: 2.0,
            allowed_length: 2,
            last_n: -1,
        }
    }

    #[test]
    fn the_token_that_would_extend_a_repeat_is_penalised_by_its_length() {
        // a b c d a b c: d would make "a b c d" again (repeat of 3, allowed 2 -> 2^1)
        let h = [1, 2, 3, 4, 1, 2, 3];
        let p = dry().penalties(&h, &DryBreakers::default());
        assert_eq!(p, vec![(4, 2.0)]);
        // allowed 3: the same repeat earns 2^0
        let p = Dry {
            allowed_length: 3,
            ..dry()
        }
        .penalties(&h, &DryBreakers::default());
        assert_eq!(p, vec![(4, 1.0)]);
    }

    #[test]
    fn a_breaker_stops_the_scan_and_is_never_penalised() {
        let h = [1, 2, 3, 9, 1, 2, 3];
        assert_eq!(dry().penalties(&h, &DryBreakers::default()), vec![(9, 2.0)]);
        // 9 as a single-token breaker: never penalised
        let b = DryBreakers::from_tokens(&[vec![9]]);
        assert_eq!(dry().penalties(&h, &b), vec![]);
        // a breaker inside the repeated run limits its length to what follows it
        let h = [1, 2, 3, 4, 7, 1, 2, 3];
        let b = DryBreakers::from_tokens(&[vec![2]]);
        assert_eq!(dry().penalties(&h, &b), vec![]);
    }

    #[test]
    fn off_and_short_histories_do_nothing() {
        let h = [1, 2, 1, 2, 1, 2];
        let off = Dry {
            multiplier: 0.0,
            ..dry()
        };
        assert!(off.penalties(&h, &DryBreakers::default()).is_empty());
        let short = Dry { last_n: 2, ..dry() };
        assert!(short.penalties(&h, &DryBreakers::default()).is_empty());
        assert!(!dry().penalties(&h, &DryBreakers::default()).is_empty());
    }
}
