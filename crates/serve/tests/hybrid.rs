//! The server on a hybrid model (Qwen3.5's `qwen35`: Gated DeltaNet layers beside gated
//! attention), a tiny random one built in memory with SmolLM2's tokenizer and chat template
//! (`toy/tests/common/hybrid.rs`): concurrent greedy streams equal lone ones (each sequence
//! keeps its recurrent state in its slot), and a later chat turn resumes from the cached
//! prefix (the slot's state, or a recurrent snapshot), answering as a cold server does.

mod common;
#[path = "../../toy/tests/common/hybrid.rs"]
mod hybrid;
#[path = "../../toy/tests/common/synthetic.rs"]
mod synthetic;

use common::*;
use serde_json::{json, Value};
use std::path::PathBuf;
use tinynn::quant::GgmlType;
use toy::gguf::GgufFile;

/// The hybrid model file (written once per test process).
fn hybrid_model() -> PathBuf {
    static P: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    P.get_or_init(|| {
        let smol = GgufFile::open(&model_path()).expect("SmolLM2 opens");
        let mut spec = hybrid::tiny();
        spec.vocab = 49152;
        spec.ctx = 2048;
        let bytes = hybrid::chat_gguf(&spec, &smol, GgmlType::Q8_0);
        let path = temp_dir("hybrid").join("tiny-hybrid.gguf");
        std::fs::write(&path, bytes).expect("writing the hybrid model");
        path
    })
    .clone()
}

fn hybrid_config(parallel: usize) -> toy_serve::ServeConfig {
    let mut cfg = config();
    cfg.models = vec![hybrid_model()];
    cfg.parallel = parallel;
    cfg
}

fn text(v: &Value) -> String {
    v["choices"][0]["message"]["content"]
        .as_str()
        .expect("content")
        .to_string()
}

const PROMPTS: [&str; 8] = [
    "What is the capital of France?",
    "Write a haiku about rain.",
    "List three fruits.",
    "Explain gravity in one sentence.",
    "Name a prime number.",
    "Say hello in Spanish.",
    "What colour is the sky?",
    "Count to five.",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_concurrent_hybrid_streams_equal_each_one_alone() {
    let s = start(hybrid_config(8));
    let mut lone = Vec::new();
    for p in PROMPTS {
        let (st, v) = post(&s, "/v1/chat/completions", &chat(p, 24)).await;
        assert_eq!(st, 200, "{v}");
        lone.push(text(&v));
    }
    assert!(
        lone.iter().any(|t| !t.is_empty()),
        "the model says something"
    );
    let bodies = PROMPTS.iter().map(|p| chat(p, 24)).collect();
    let together = concurrent_texts(&s, bodies, |i| i % 2 == 0).await;
    for (i, t) in together.iter().enumerate() {
        if exact_kernels() {
            assert_eq!(t, &lone[i], "request {i} under batching differs from alone");
        }
    }
}

#[tokio::test]
async fn a_second_hybrid_chat_turn_reuses_the_cached_prefix_and_answers_as_a_cold_server() {
    let s = start(hybrid_config(2));
    // a first turn past one 64-token chunk, so its prefill leaves a snapshot at 64
    let system = "You are a helpful assistant who answers briefly and clearly. ".repeat(6);
    let mut messages = vec![
        json!({"role": "system", "content": system}),
        json!({"role": "user", "content": "Give me a name for a cat."}),
    ];
    let body = json!({"messages": messages, "max_tokens": 8, "temperature": 0});
    let (st, first) = post(&s, "/v1/chat/completions", &body).await;
    assert_eq!(st, 200, "{first}");
    let p1 = first["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(p1 > 64, "first prompt {p1} tokens");
    messages.push(json!({"role": "assistant", "content": text(&first)}));
    messages.push(json!({"role": "user", "content": "And one for a dog?"}));
    let body = json!({"messages": messages, "max_tokens": 8, "temperature": 0});
    let (st, second) = post(&s, "/v1/chat/completions", &body).await;
    assert_eq!(st, 200, "{second}");
    let cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap();
    // the whole last turn when the slot still holds its state, else a snapshot's position
    assert!(
        cached >= 64 && cached < second["usage"]["prompt_tokens"].as_u64().unwrap(),
        "cached {cached}"
    );
    let cold = start(hybrid_config(1));
    let (_, again) = post(&cold, "/v1/chat/completions", &body).await;
    assert_eq!(again["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    if exact_kernels() {
        assert_eq!(text(&again), text(&second), "resumed == cold");
    }
}

/// Speculation on a hybrid in the server: refused drafts send the slot's recurrent layers back
/// to the mark taken before the verify pass, so greedy replies stay the plain server's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn speculation_on_a_hybrid_keeps_the_plain_replies() {
    let plain = start(hybrid_config(2));
    // The random model's replies need not repeat a token, and prompt lookup drafts only after
    // a repeat: the first request nudges " red" (id 2382, which its prompt holds), so lookup
    // drafts what followed earlier " red"s and the target refuses some of it.
    let bodies = [
        {
            let mut b = chat("Repeat: red green blue red green blue red green blue", 40);
            b["logit_bias"] = serde_json::json!({"2382": 8});
            b
        },
        chat(PROMPTS[0], 40),
    ];
    let mut want = Vec::new();
    for b in &bodies {
        let (st, v) = post(&plain, "/v1/chat/completions", b).await;
        assert_eq!(st, 200, "{v}");
        want.push(text(&v));
    }
    drop(plain);
    for spec in [
        toy_serve::SpecConfig {
            ngram: true,
            ..Default::default()
        },
        toy_serve::SpecConfig {
            draft: Some(hybrid_model()),
            max: 4,
            ..Default::default()
        },
    ] {
        let mut cfg = hybrid_config(2);
        cfg.spec = spec.clone();
        let s = start(cfg);
        for (b, w) in bodies.iter().zip(&want) {
            let (st, v) = post(&s, "/v1/chat/completions", b).await;
            assert_eq!(st, 200, "{v}");
            if exact_kernels() {
                assert_eq!(&text(&v), w, "{spec:?} changed the reply to {b}");
            }
        }
        let drafted = metric(&s, "toy_spec_drafted_tokens_total").await;
        let accepted = metric(&s, "toy_spec_accepted_tokens_total").await;
        eprintln!("{spec:?}: drafted {drafted}, accepted {accepted}");
        assert!(drafted > 0.0, "{spec:?}");
    }
}
