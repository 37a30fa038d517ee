//! The draft length of speculative decoding chosen online from what rounds cost on this
//! machine (in the spirit of Mamou et al. 2024, "Dynamic Speculation Lookahead"), with the
//! cost model of Leviathan et al. 2023 (§3.4): with a per-token acceptance rate α, a round of
//! k drafted tokens yields (1 - α^(k+1)) / (1 - α) tokens on average and costs
//! k * c_draft + c_verify(k + 1), where a target pass over n tokens costs a + b * n. The length
//! with the most tokens per millisecond wins; 0 is a plain decode step. Where a target batch
//! costs nearly n decode steps (a compute-bound CPU) or the draft is dear, that is short or
//! plain, so speculation does not cost more than it gains; where a batch is cheap it is long.
//! The choice changes only speed: what is emitted is the verify step's, whatever k is.

/// An exponential moving average that starts at its first sample.
#[derive(Clone, Copy, Debug, Default)]
struct Ema(Option<f64>);

impl Ema {
    const W: f64 = 0.25;

    fn add(&mut self, x: f64) {
        self.0 = Some(self.0.map_or(x, |m| m + Self::W * (x - m)));
    }
}

/// Rounds of the longest drafts first (to learn α, the draft's cost and a batch's), then a
/// plain step (a single token's cost), before the model decides.
const WARM_UP: u64 = 3;
/// While plain decoding wins, a short draft now and then refreshes the estimates: first after
/// this many steps, then twice as long after each probe that changed nothing (a draft
/// model's probe costs its catch-up over the steps it missed).
const FIRST_PROBE: u64 = 8;

/// Chooses each round's draft length from the costs seen so far.
#[derive(Debug)]
pub struct DraftTuner {
    k_max: usize,
    /// Kept drafted tokens per drafted token.
    alpha: Ema,
    /// Milliseconds per drafted token, from rounds that follow a drafting round (a draft
    /// model's first round, or its first after plain steps, also catches up on the prompt or
    /// on the steps it missed).
    draft_ms: Ema,
    /// Whether the last round drafted.
    drafted_last: bool,
    /// A target pass over one token, and each further token of a batch.
    one_ms: Ema,
    per_token_ms: Ema,
    rounds: u64,
    /// The round of the next probe while plain decoding wins, and the gap after it.
    probe_at: u64,
    probe_gap: u64,
}

impl DraftTuner {
    pub fn new(k_max: usize) -> Self {
        Self {
            k_max,
            alpha: Ema::default(),
            draft_ms: Ema::default(),
            drafted_last: false,
            one_ms: Ema::default(),
            per_token_ms: Ema::default(),
            rounds: 0,
            probe_at: WARM_UP + FIRST_PROBE,
            probe_gap: FIRST_PROBE,
        }
    }

    /// Expected tokens per millisecond of a round drafting k tokens, once costs are known.
    fn rate(&self, k: usize) -> Option<f64> {
        let (a, b) = (self.one_ms.0?, self.per_token_ms.0.unwrap_or(0.0));
        let alpha = self.alpha.0.unwrap_or(0.0).clamp(0.0, 0.999);
        let tokens = (1.0 - alpha.powi(k as i32 + 1)) / (1.0 - alpha);
        let cost = k as f64 * self.draft_ms.0.unwrap_or(0.0) + a + b * k as f64;
        Some(tokens / cost.max(1e-6))
    }

    /// The draft length for the next round (0: a plain decode step).
    pub fn next_k(&mut self) -> usize {
        if self.rounds < WARM_UP {
            return self.k_max;
        }
        match self.best_k() {
            0 if self.rounds >= self.probe_at => {
                self.probe_gap *= 2;
                self.probe_at = self.rounds + self.probe_gap;
                self.k_max.min(2)
            }
            0 => 0,
            k => {
                self.probe_gap = FIRST_PROBE;
                self.probe_at = self.rounds + FIRST_PROBE;
                k
            }
        }
    }

    /// The draft length with the most expected tokens per millisecond (0 until a single
    /// token's cost is known).
    pub fn best_k(&self) -> usize {
        if self.one_ms.0.is_none() {
            return 0;
        }
        (0..=self.k_max)
            .max_by(|&i, &j| {
                self.rate(i)
                    .partial_cmp(&self.rate(j))
                    .expect("finite rates")
            })
            .unwrap_or(0)
    }

    /// What a round cost: `drafted` tokens proposed in `draft_ms`, `kept` of them accepted,
    /// and a target pass over `batch` tokens (next and the drafts) in `verify_ms`.
    pub fn record(
        &mut self,
        drafted: usize,
        kept: usize,
        draft_ms: f64,
        batch: usize,
        verify_ms: f64,
    ) {
        self.rounds += 1;
        if drafted > 0 {
            self.alpha.add(kept as f64 / drafted as f64);
            if self.drafted_last {
                self.draft_ms.add(draft_ms / drafted as f64);
            }
        }
        self.drafted_last = drafted > 0;
        match (batch, self.one_ms.0) {
            (1, _) => self.one_ms.add(verify_ms),
            (n, Some(a)) => self
                .per_token_ms
                .add(((verify_ms - a) / (n - 1) as f64).max(0.0)),
            // before a single token's cost is known, a batch's cost stands for its first token
            (n, None) => self.per_token_ms.add(verify_ms / n as f64),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::DraftTuner;

    /// Feed a tuner rounds of a machine with these costs and acceptance until it settles.
    fn settle(k_max: usize, draft: f64, one: f64, per_token: f64, alpha: f64) -> usize {
        let mut t = DraftTuner::new(k_max);
        for _ in 0..40 {
            let k = t.next_k();
            let kept = (k as f64 * alpha).round() as usize;
            t.record(k, kept, draft * k as f64, k + 1, one + per_token * k as f64);
        }
        t.best_k()
    }

    #[test]
    fn cheap_batches_and_drafts_draft_long_and_dear_ones_do_not() {
        // a memory-bound target (a batch costs little more than a token), a cheap draft
        assert_eq!(settle(8, 2.0, 60.0, 3.0, 0.95), 8);
        // a compute-bound target (each batch token costs most of a step), a dear draft
        assert_eq!(settle(8, 40.0, 70.0, 60.0, 0.9), 0);
        // a prompt-lookup drafter (free) with a mid-priced batch: a few tokens, not all 16
        let k = settle(16, 0.0, 70.0, 20.0, 0.85);
        assert!((2..16).contains(&k), "{k}");
    }

    #[test]
    fn plain_decoding_still_probes_now_and_then() {
        let mut t = DraftTuner::new(8);
        let mut drafted_rounds = 0;
        for _ in 0..64 {
            let k = t.next_k();
            drafted_rounds += (k > 0) as usize;
            t.record(k, k / 2, 40.0 * k as f64, k + 1, 70.0 + 60.0 * k as f64);
        }
        // the warm-up, then probes after 8, 16 and 32 plain steps
        assert!((4..=7).contains(&drafted_rounds), "{drafted_rounds}");
    }
}
