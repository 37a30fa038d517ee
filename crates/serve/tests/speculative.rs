//! Speculative decoding inside the server's continuous batching: greedy replies equal the
//! plain server's (prompt lookup and a draft model, requests alone and batched together,
//! with constrained requests among them), and `/metrics` counts drafted and kept tokens.

mod common;

use common::*;
use serde_json::{json, Value};
use toy_serve::SpecConfig;

const PROMPTS: [&str; 3] = [
    "Repeat exactly: the quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog.",
    "List the numbers from one to twenty in words.",
    "Write a haiku about rain.",
];

fn text(v: &Value) -> String {
    v["choices"][0]["message"]["content"]
        .as_str()
        .expect("content")
        .to_string()
}

async fn replies(s: &toy_serve::Server) -> Vec<String> {
    let mut out = Vec::new();
    for p in PROMPTS {
        let (st, v) = post(s, "/v1/chat/completions", &chat(p, 48)).await;
        assert_eq!(st, 200, "{v}");
        out.push(text(&v));
    }
    // all at once, one of them constrained
    let mut schema = chat(PROMPTS[1], 48);
    schema["response_format"] = json!({"type": "json_object"});
    let bodies: Vec<Value> = PROMPTS.iter().map(|p| chat(p, 48)).collect();
    let reqs = bodies.iter().map(|b| post(s, "/v1/chat/completions", b));
    let (batched, constrained) = tokio::join!(
        futures_util::future::join_all(reqs),
        post(s, "/v1/chat/completions", &schema)
    );
    for (st, v) in batched {
        assert_eq!(st, 200, "{v}");
        out.push(text(&v));
    }
    out.push(text(&constrained.1));
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn greedy_replies_are_the_plain_servers_and_metrics_count_drafts() {
    let plain = start(config());
    let want = replies(&plain).await;
    drop(plain);
    for spec in [
        SpecConfig {
            ngram: true,
            ..SpecConfig::default()
        },
        SpecConfig {
            draft: Some(model_path()),
            max: 6,
            ..SpecConfig::default()
        },
    ] {
        let mut cfg = config();
        cfg.spec = spec.clone();
        let s = start(cfg);
        let got = replies(&s).await;
        let drafted = metric(&s, "toy_spec_drafted_tokens_total").await;
        let accepted = metric(&s, "toy_spec_accepted_tokens_total").await;
        assert!(drafted > 0.0, "{spec:?}: nothing drafted");
        assert!(
            accepted > 0.0 && accepted <= drafted,
            "{spec:?}: {accepted}/{drafted}"
        );
        if exact_kernels() {
            assert_eq!(got, want, "{spec:?} changed greedy replies");
            if spec.draft.is_some() {
                // the draft is the target (its Q8_0 head held in Q4_0): it drafts the target's
                // choices but for a few, and for the tokens the constrained request's grammar
                // forbids (the draft runs unconstrained)
                assert!(accepted >= 0.9 * drafted, "{accepted}/{drafted}");
            }
        } else {
            // batched and lone sums may round apart without the integer kernels: the
            // requests alone must still match
            assert_eq!(got[..3], want[..3], "{spec:?} changed greedy replies");
        }
    }
}
