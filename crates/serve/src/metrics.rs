//! Counters for `GET /metrics`, in the Prometheus text exposition format (version 0.0.4):
//! requests by route and status, prompt / completion / cached tokens, queue depth, busy
//! slots, decode tokens per second over the last 10 s, and a time-to-first-token histogram.

use crate::engine::{FinishReason, SeqDone};
use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Upper bounds of the time-to-first-token buckets, seconds.
const TTFT_BUCKETS: [f64; 10] = [0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];
const RATE_WINDOW: Duration = Duration::from_secs(10);

/// Marks a response whose request is counted by its own log when it ends (a stream ends
/// long after its headers went out, possibly with the client gone): the `count_requests`
/// layer does not count it again.
#[derive(Clone, Copy, Debug)]
pub struct CountedByLog;

#[derive(Default)]
pub struct Metrics {
    requests: Mutex<BTreeMap<(String, u16), u64>>,
    pub prompt_tokens: AtomicU64,
    pub completion_tokens: AtomicU64,
    pub cached_tokens: AtomicU64,
    pub cancelled: AtomicU64,
    /// Sequences waiting for a slot.
    pub queue_depth: AtomicUsize,
    /// Slots running a sequence.
    pub active_slots: AtomicUsize,
    /// (when, tokens decoded) of recent engine steps.
    decoded: Mutex<VecDeque<(Instant, usize)>>,
    /// Counts per bucket (last: +Inf), sum in seconds, count.
    ttft: Mutex<([u64; 11], f64, u64)>,
    /// Speculative decoding: drafted tokens verified, and those kept.
    pub spec_drafted: AtomicU64,
    pub spec_accepted: AtomicU64,
}

impl Metrics {
    pub fn request(&self, route: &str, status: u16) {
        if let Ok(mut m) = self.requests.lock() {
            *m.entry((route.to_string(), status)).or_default() += 1;
        }
    }

    /// How many requests have been answered with `status` (any route).
    pub fn requests_with(&self, status: u16) -> u64 {
        self.requests
            .lock()
            .map(|m| {
                m.iter()
                    .filter(|(k, _)| k.1 == status)
                    .map(|(_, v)| v)
                    .sum()
            })
            .unwrap_or(0)
    }

    pub fn seq_done(&self, d: &SeqDone) {
        self.prompt_tokens
            .fetch_add(d.prompt_tokens as u64, Ordering::Relaxed);
        self.completion_tokens
            .fetch_add(d.completion_tokens as u64, Ordering::Relaxed);
        self.cached_tokens
            .fetch_add(d.cached_tokens as u64, Ordering::Relaxed);
        if d.finish == FinishReason::Cancelled {
            self.cancelled.fetch_add(1, Ordering::Relaxed);
        }
        if let (Some(ms), Ok(mut h)) = (d.ttft_ms, self.ttft.lock()) {
            let s = ms / 1e3;
            let b = TTFT_BUCKETS.iter().position(|&u| s <= u).unwrap_or(10);
            h.0[b] += 1;
            h.1 += s;
            h.2 += 1;
        }
    }

    pub fn record_spec(&self, drafted: usize, accepted: usize) {
        self.spec_drafted
            .fetch_add(drafted as u64, Ordering::Relaxed);
        self.spec_accepted
            .fetch_add(accepted as u64, Ordering::Relaxed);
    }

    pub fn record_decode(&self, n: usize) {
        if let Ok(mut q) = self.decoded.lock() {
            let now = Instant::now();
            q.push_back((now, n));
            while q
                .front()
                .is_some_and(|(t, _)| now.duration_since(*t) > RATE_WINDOW)
            {
                q.pop_front();
            }
        }
    }

    /// Tokens decoded per second over the last 10 s.
    pub fn tokens_per_second(&self) -> f64 {
        let Ok(q) = self.decoded.lock() else {
            return 0.0;
        };
        let now = Instant::now();
        let n: usize = q
            .iter()
            .filter(|(t, _)| now.duration_since(*t) <= RATE_WINDOW)
            .map(|x| x.1)
            .sum();
        n as f64 / RATE_WINDOW.as_secs_f64()
    }

    /// The Prometheus text; `models` is (id, loaded) per served model.
    pub fn render(&self, models: &[(String, bool)]) -> String {
        let mut out = String::from(
            "# HELP toy_requests_total HTTP requests answered, by route and status.\n\
             # TYPE toy_requests_total counter\n",
        );
        if let Ok(m) = self.requests.lock() {
            for ((route, status), n) in m.iter() {
                let _ = writeln!(
                    out,
                    "toy_requests_total{{route=\"{route}\",status=\"{status}\"}} {n}"
                );
            }
        }
        let counters = [
            (
                "toy_prompt_tokens_total",
                "Prompt tokens of finished sequences.",
                &self.prompt_tokens,
            ),
            (
                "toy_completion_tokens_total",
                "Generated tokens of finished sequences.",
                &self.completion_tokens,
            ),
            (
                "toy_cached_prompt_tokens_total",
                "Prompt tokens reused from a slot's KV cache.",
                &self.cached_tokens,
            ),
            (
                "toy_cancelled_sequences_total",
                "Sequences ended because the client went away.",
                &self.cancelled,
            ),
            (
                "toy_spec_drafted_tokens_total",
                "Drafted tokens the target verified (speculative decoding).",
                &self.spec_drafted,
            ),
            (
                "toy_spec_accepted_tokens_total",
                "Drafted tokens the target kept (speculative decoding).",
                &self.spec_accepted,
            ),
        ];
        for (name, help, v) in counters {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                v.load(Ordering::Relaxed)
            );
        }
        let gauges = [
            (
                "toy_queue_depth",
                "Sequences waiting for a slot.",
                self.queue_depth.load(Ordering::Relaxed) as f64,
            ),
            (
                "toy_active_slots",
                "Slots running a sequence.",
                self.active_slots.load(Ordering::Relaxed) as f64,
            ),
            (
                "toy_tokens_per_second",
                "Tokens decoded per second over the last 10 s.",
                self.tokens_per_second(),
            ),
        ];
        for (name, help, v) in gauges {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
        }
        let _ = writeln!(
            out,
            "# HELP toy_model_loaded Whether a model is in memory.\n# TYPE toy_model_loaded gauge"
        );
        for (id, loaded) in models {
            let _ = writeln!(
                out,
                "toy_model_loaded{{model=\"{id}\"}} {}",
                u8::from(*loaded)
            );
        }
        let name = "toy_time_to_first_token_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} From arrival to the first generated token.\n# TYPE {name} histogram"
        );
        if let Ok(h) = self.ttft.lock() {
            let mut cum = 0;
            for (i, &n) in h.0.iter().enumerate() {
                cum += n;
                let le = TTFT_BUCKETS
                    .get(i)
                    .map_or("+Inf".to_string(), |u| u.to_string());
                let _ = writeln!(out, "{name}_bucket{{le=\"{le}\"}} {cum}");
            }
            let _ = writeln!(out, "{name}_sum {}\n{name}_count {}", h.1, h.2);
        }
        out
    }
}
