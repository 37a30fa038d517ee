//! The engine through the server: batched greedy output equal to lone output, prefix
//! reuse across chat turns, a disconnect freeing its slot, the bounded queue (429), several
//! models loaded on first use and unloaded when idle, and the telemetry file.

mod common;

use common::*;
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use toy_serve::Clock;

const PROMPTS: [&str; 4] = [
    "What is the capital of France?",
    "Write a haiku about rain.",
    "List three fruits.",
    "Explain gravity in one sentence.",
];

fn text(v: &Value) -> String {
    v["choices"][0]["message"]["content"]
        .as_str()
        .expect("content")
        .to_string()
}

/// A long greedy completion that never ends by itself (end-of-text tokens banned).
fn endless(max_tokens: usize) -> Value {
    json!({"prompt": "Once upon a time", "max_tokens": max_tokens, "temperature": 0,
        "logit_bias": {"0": -100, "1": -100, "2": -100}, "stream": true})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_greedy_requests_equal_lone_requests() {
    let mut cfg = config();
    cfg.parallel = 4;
    let s = start(cfg);
    let mut lone = Vec::new();
    for p in PROMPTS {
        let (st, v) = post(&s, "/v1/chat/completions", &chat(p, 24)).await;
        assert_eq!(st, 200, "{v}");
        lone.push(text(&v));
    }
    // every prompt twice at once: 8 sequences on 4 slots, some waiting, some streamed
    let bodies = (0..8).map(|i| chat(PROMPTS[i % 4], 24)).collect();
    let together = concurrent_texts(&s, bodies, |i| i % 3 == 0).await;
    for (i, t) in together.iter().enumerate() {
        if exact_kernels() {
            assert_eq!(
                t,
                &lone[i % 4],
                "request {i} under batching differs from alone"
            );
        } else {
            // f32 fallback kernels round differently per batch size: near-ties may flip
            assert!(!t.is_empty(), "request {i} gave no text");
        }
    }
    assert!(metric(&s, "toy_cached_prompt_tokens_total").await > 0.0);
}

#[tokio::test]
async fn later_chat_turns_reuse_the_cached_prefix_and_answer_as_a_cold_server() {
    let mut cfg = config();
    cfg.parallel = 2;
    let s = start(cfg);
    let turns = [
        "Give me a name for a cat.",
        "And one for a dog?",
        "Now a name for a horse, and say why you chose it.",
    ];
    let mut messages: Vec<Value> = Vec::new();
    let mut last_prompt = 0;
    for (k, turn) in turns.iter().enumerate() {
        messages.push(json!({"role": "user", "content": turn}));
        let body = json!({"messages": messages, "max_tokens": 24, "temperature": 0});
        let (st, v) = post(&s, "/v1/chat/completions", &body).await;
        assert_eq!(st, 200, "{v}");
        let prompt = v["usage"]["prompt_tokens"].as_u64().unwrap();
        let cached = v["usage"]["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap();
        if k > 0 {
            // whole 64-token chunks of the last turn's prompt at least
            assert!(
                cached >= last_prompt / 64 * 64 && cached > 0 && cached < prompt,
                "turn {k}: cached {cached} of {prompt}, last turn's prompt {last_prompt}"
            );
            // a cold server computes the same answer
            let fresh = start(config());
            let (_, cold) = post(&fresh, "/v1/chat/completions", &body).await;
            assert_eq!(cold["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
            if exact_kernels() {
                assert_eq!(text(&cold), text(&v), "turn {k}");
            }
        }
        last_prompt = prompt;
        messages.push(json!({"role": "assistant", "content": text(&v)}));
    }
    assert!(
        last_prompt > 64,
        "the chat grew past one chunk: {last_prompt}"
    );
}

#[tokio::test]
async fn a_disconnected_stream_frees_its_slot() {
    let mut cfg = config();
    cfg.parallel = 1;
    let s = start(cfg);
    let mut r = client()
        .post(url(&s, "/v1/completions"))
        .body(endless(1000).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let mut got = 0;
    while got < 200 {
        got += r.chunk().await.unwrap().expect("stream goes on").len();
    }
    drop(r);
    // with one slot, the next request runs only once the abandoned one is gone; it went
    // as cancelled, not by running to its 1000 tokens (however long the machine takes)
    for _ in 0..3 {
        let (st, v) = post(&s, "/v1/chat/completions", &chat("Hi", 4)).await;
        assert_eq!(st, 200, "{v}");
    }
    assert_eq!(metric(&s, "toy_cancelled_sequences_total").await, 1.0);
    assert!(metric(&s, "toy_completion_tokens_total").await < 1000.0);
    // its telemetry line says the client went away
    let dir = s.telemetry_dir.clone().unwrap();
    let log = std::fs::read_to_string(dir.join("events.jsonl")).unwrap();
    assert!(log.lines().any(|l| l.contains("\"status\":499")), "{log}");
}

#[tokio::test]
async fn a_cancelled_stream_is_logged_and_counted_as_499_with_its_tokens() {
    let mut cfg = config();
    cfg.parallel = 1;
    let s = start(cfg);
    // a prompt past one 64-token chunk, run once so the cancelled request reuses its cache
    let prompt = "Once upon a time there was a little robot. ".repeat(12);
    let mut body = endless(1000);
    body["prompt"] = json!(prompt);
    let (st, warm) = post(
        &s,
        "/v1/completions",
        &json!({"prompt": prompt, "max_tokens": 1}),
    )
    .await;
    assert_eq!(st, 200, "{warm}");
    let prompt_tokens = warm["usage"]["prompt_tokens"].as_u64().unwrap();
    let mut r = client()
        .post(url(&s, "/v1/completions"))
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let mut seen = 0;
    while seen < 5 {
        let chunk = r.chunk().await.unwrap().expect("stream goes on");
        seen += String::from_utf8_lossy(&chunk).matches("\"text\"").count();
    }
    drop(r);
    let events = s.telemetry_dir.clone().unwrap().join("events.jsonl");
    let t = Instant::now();
    let line = loop {
        let log = std::fs::read_to_string(&events).unwrap();
        let found = log
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|v| v["status"] == 499);
        if let Some(line) = found {
            break line;
        }
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "no 499 line:\n{log}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(line["prompt_tokens"], prompt_tokens, "{line}");
    assert!(
        line["completion_tokens"].as_u64().unwrap() >= seen as u64,
        "{line}"
    );
    assert!(line["cached_tokens"].as_u64().unwrap() >= 64, "{line}");
    assert!(line["ttft_ms"].as_f64().unwrap() > 0.0, "{line}");
    let route = "toy_requests_total{route=\"/v1/completions\"";
    assert_eq!(metric(&s, &format!("{route},status=\"499\"}}")).await, 1.0);
    // the warm-up only: the stream's 200 headers did not count it as answered
    assert_eq!(metric(&s, &format!("{route},status=\"200\"}}")).await, 1.0);
}

#[tokio::test]
async fn a_full_queue_answers_429_with_retry_after_and_keeps_serving() {
    let mut cfg = config();
    cfg.parallel = 1;
    cfg.queue = 1;
    let s = std::sync::Arc::new(start(cfg));
    let mut busy = client()
        .post(url(&s, "/v1/completions"))
        .body(endless(1000).to_string())
        .send()
        .await
        .unwrap();
    busy.chunk().await.unwrap().expect("first chunk");
    let s2 = s.clone();
    let waiting =
        tokio::spawn(async move { post(&s2, "/v1/chat/completions", &chat("Hi", 2)).await });
    let t = Instant::now();
    while metric(&s, "toy_queue_depth").await < 1.0 {
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "the second request never queued"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (st, v) = post(&s, "/v1/chat/completions", &chat("Hi", 2)).await;
    assert_eq!(st, 429, "{v}");
    assert_eq!(v["error"]["code"], "queue_full");
    assert_eq!(v["error"]["type"], "rate_limit_error");
    // a 429 says when to come back
    let r = client()
        .post(url(&s, "/v1/completions"))
        .body(json!({"prompt": "Hi", "max_tokens": 2}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 429);
    let retry = r
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    assert_eq!(retry.as_deref(), Some("1"), "Retry-After of a 429");
    drop(busy);
    let (st, v) = waiting.await.unwrap();
    assert_eq!(
        st, 200,
        "the queued request is served once the slot frees: {v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_load_on_first_use_and_unload_when_idle() {
    let dir = temp_dir("models");
    for name in ["alpha", "beta"] {
        let to = dir.join(format!("{name}.gguf"));
        if std::fs::hard_link(model_path(), &to).is_err() {
            std::os::unix::fs::symlink(std::fs::canonicalize(model_path()).unwrap(), &to).unwrap();
        }
    }
    std::fs::write(dir.join("notes.txt"), "not a model").unwrap();
    let mut cfg = config();
    cfg.models = Vec::new();
    cfg.models_dir = Some(dir);
    // the idle timer reads a clock only this test moves: the models stay loaded however
    // long the machine takes between two requests, and go once the clock passes the limit
    let clock = Clock::manual();
    cfg.clock = clock.clone();
    cfg.keep_alive = Some(Duration::from_secs(60));
    let s = start(cfg);
    let (_, m) = get(&s, "/v1/models").await;
    let ids: Vec<&str> = m["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec!["alpha", "beta"]);
    assert!(m["data"]
        .as_array()
        .unwrap()
        .iter()
        .all(|x| x["loaded"] == false));
    // with two models, 'model' is required
    let (st, v) = post(&s, "/v1/chat/completions", &chat("Hi", 2)).await;
    assert_eq!((st, v["error"]["param"].as_str()), (400, Some("model")));

    // /health says 503 while alpha loads
    let s = &s;
    // watch /health until the request that loads alpha has its answer (it cannot have one
    // before the load ends), however slow the machine is
    let answered = std::sync::atomic::AtomicBool::new(false);
    let answered = &answered;
    let watch = async move {
        let mut codes = Vec::new();
        while !answered.load(std::sync::atomic::Ordering::SeqCst) {
            let (st, _) = get_text(s, "/health").await;
            codes.push(st);
        }
        codes
    };
    let mut body = chat("Hi", 2);
    body["model"] = json!("alpha");
    let ask = async move {
        let r = post(s, "/v1/chat/completions", &body).await;
        answered.store(true, std::sync::atomic::Ordering::SeqCst);
        r
    };
    let (codes, (st, v)) = tokio::join!(watch, ask);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["model"], "alpha");
    assert!(codes.contains(&503), "no 503 seen while loading: {codes:?}");
    let (_, a) = get(s, "/v1/models/alpha").await;
    let (_, b) = get(s, "/v1/models/beta").await;
    assert_eq!(
        (a["loaded"].clone(), b["loaded"].clone()),
        (json!(true), json!(false))
    );
    let mut body = chat("Hi", 2);
    body["model"] = json!("beta");
    let (st, v) = post(s, "/v1/chat/completions", &body).await;
    assert_eq!((st, v["model"].as_str()), (200, Some("beta")));
    // idle past --keep-alive: both go (the engine sweeps about once a second)
    assert!(clock.advance(Duration::from_secs(61)));
    let t = Instant::now();
    loop {
        let (_, m) = get(s, "/v1/models").await;
        if m["data"]
            .as_array()
            .unwrap()
            .iter()
            .all(|x| x["loaded"] == false)
        {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "models still loaded: {m}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // and come back on the next request
    let (st, _) = post(s, "/v1/chat/completions", &body).await;
    assert_eq!(st, 200);
}

#[tokio::test]
async fn log_prompts_puts_the_text_in_the_telemetry() {
    let mut cfg = config();
    cfg.log_prompts = true;
    let s = start(cfg);
    let (st, _) = post(
        &s,
        "/v1/chat/completions",
        &chat("The secret word is pumpkin.", 2),
    )
    .await;
    assert_eq!(st, 200);
    let dir = s.telemetry_dir.clone().unwrap();
    assert!(dir
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .starts_with("serve-"));
    let log = std::fs::read_to_string(dir.join("events.jsonl")).unwrap();
    let line: Value = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["type"] == "request")
        .expect("a request line");
    assert!(line["prompt"].to_string().contains("pumpkin"), "{line}");
    assert!(line["ttft_ms"].as_f64().unwrap() > 0.0);
    assert_eq!(line["status"], 200);
}
