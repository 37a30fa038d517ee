//! The endpoints besides generation, through a real HTTP client on the real SmolLM2 model:
//! embeddings, tokenize / detokenize, the model list, health, metrics, the page and the
//! runs API.

mod common;

use common::*;
use serde_json::json;

#[tokio::test]
async fn embeddings_are_normalised_in_float_and_base64() {
    let s = shared();
    let (st, f) = post(
        s,
        "/v1/embeddings",
        &json!({"input": ["hello world", "a cat"]}),
    )
    .await;
    assert_eq!(st, 200, "{f}");
    assert_eq!(f["object"], "list");
    let data = f["data"].as_array().unwrap();
    assert_eq!(data.len(), 2);
    let v0: Vec<f64> = data[0]["embedding"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    assert_eq!(v0.len(), 576, "SmolLM2-135M width");
    let norm: f64 = v0.iter().map(|x| x * x).sum::<f64>().sqrt();
    assert!((norm - 1.0).abs() < 1e-4, "norm {norm}");
    let v1: Vec<f64> = data[1]["embedding"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    assert_ne!(v0, v1);
    assert!(f["usage"]["prompt_tokens"].as_u64().unwrap() >= 4);
    let (_, b) = post(
        s,
        "/v1/embeddings",
        &json!({"input": "hello world", "encoding_format": "base64"}),
    )
    .await;
    let b64 = b["data"][0]["embedding"].as_str().unwrap();
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .unwrap();
    let back: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let v0_f32: Vec<f32> = v0.iter().map(|&x| x as f32).collect();
    assert_eq!(
        back, v0_f32,
        "base64 holds the same little-endian f32 values"
    );
    let (st, e) = post(
        s,
        "/v1/embeddings",
        &json!({"input": "x", "encoding_format": "hex"}),
    )
    .await;
    assert_eq!(
        (st, e["error"]["param"].as_str()),
        (400, Some("encoding_format"))
    );
}

#[tokio::test]
async fn tokenize_and_detokenize_round_trip() {
    let s = shared();
    let (st, t) = post(s, "/tokenize", &json!({"content": "Hello, world! 🦀"})).await;
    assert_eq!(st, 200, "{t}");
    let ids = t["tokens"].clone();
    assert!(ids.as_array().unwrap().len() >= 4);
    let (_, d) = post(s, "/detokenize", &json!({"tokens": ids})).await;
    assert_eq!(d["content"], "Hello, world! 🦀");
    let (_, p) = post(
        s,
        "/tokenize",
        &json!({"content": "Hello", "with_pieces": true}),
    )
    .await;
    assert_eq!(p["tokens"][0]["piece"], "Hello");
    let (st, e) = post(s, "/detokenize", &json!({"tokens": [99999999]})).await;
    assert_eq!((st, e["error"]["param"].as_str()), (400, Some("tokens")));
}

#[tokio::test]
async fn models_health_metrics_page_and_runs() {
    let s = shared();
    let (st, m) = get(s, "/v1/models").await;
    assert_eq!(st, 200);
    assert_eq!(m["object"], "list");
    let first = &m["data"][0];
    assert_eq!(first["id"], "SmolLM2-135M-Instruct.Q4_1");
    assert_eq!(first["object"], "model");
    assert_eq!(first["owned_by"], "toy");
    assert!(first["loaded"].is_boolean());
    let (st, one) = get(s, "/v1/models/SmolLM2-135M-Instruct.Q4_1").await;
    assert_eq!((st, &one["id"]), (200, &first["id"]));
    let (st, e) = get(s, "/v1/models/nope").await;
    assert_eq!(
        (st, e["error"]["code"].as_str()),
        (404, Some("model_not_found"))
    );

    // one generation, so every counter has something
    let (st, _) = post(s, "/v1/chat/completions", &chat("Hi", 2)).await;
    assert_eq!(st, 200);
    let (st, h) = get(s, "/health").await;
    assert_eq!((st, h["status"].as_str()), (200, Some("ok")));
    let (st, text) = get_text(s, "/metrics").await;
    assert_eq!(st, 200);
    for name in [
        "toy_requests_total{route=\"/v1/chat/completions\",status=\"200\"}",
        "toy_prompt_tokens_total",
        "toy_completion_tokens_total",
        "toy_queue_depth",
        "toy_tokens_per_second",
        "toy_time_to_first_token_seconds_bucket{le=\"+Inf\"}",
        "toy_time_to_first_token_seconds_count",
    ] {
        assert!(text.contains(name), "{name} missing from:\n{text}");
    }
    assert!(metric(s, "toy_completion_tokens_total").await >= 1.0);

    let (st, page) = get_text(s, "/").await;
    assert_eq!(st, 200);
    assert!(page.to_lowercase().contains("<html"), "the page");

    let (st, runs) = get(s, "/api/runs").await;
    assert_eq!(st, 200, "{runs}");
    let list = runs["runs"].as_array().unwrap();
    let serve = list
        .iter()
        .find(|r| r["kind"] == "serve")
        .expect("this server's run is listed");
    let id = serve["id"].as_str().unwrap();
    let (st, ev) = get(s, &format!("/api/runs/{id}/events")).await;
    assert_eq!(st, 200, "{ev}");
    let events = ev["events"].as_array().unwrap();
    assert_eq!(events[0]["type"], "serve_start");
    let req = events
        .iter()
        .find(|e| {
            e["type"] == "request" && e["route"] == "/v1/chat/completions" && e["status"] == 200
        })
        .expect("a request line");
    for key in [
        "model",
        "prompt_tokens",
        "completion_tokens",
        "cached_tokens",
        "total_ms",
        "stream",
    ] {
        assert!(req.get(key).is_some(), "{key} in {req}");
    }
    assert!(
        req.get("prompt").is_none(),
        "no prompt text without --log-prompts"
    );
    let next = ev["next"].as_u64().unwrap();
    let (_, later) = get(s, &format!("/api/runs/{id}/events?from={next}")).await;
    assert!(later["next"].as_u64().unwrap() >= next);
    let (st, e) = get(s, "/api/runs/..%2F..%2Fetc/events").await;
    assert_eq!(st, 400, "{e}");
    let (st, _) = get(s, "/api/runs/no-such-run/events").await;
    assert_eq!(st, 404);
}

#[tokio::test]
async fn events_next_never_passes_a_half_written_line() {
    let s = shared();
    let runs_dir = s.telemetry_dir.as_ref().unwrap().parent().unwrap();
    let run = runs_dir.join("train-half-written");
    std::fs::create_dir_all(&run).unwrap();
    let whole = "{\"type\":\"step\",\"step\":1,\"loss\":2.5}\n";
    std::fs::write(run.join("events.jsonl"), format!("{whole}{{\"type\":\"st")).unwrap();
    let path = "/api/runs/train-half-written/events";
    let (st, ev) = get(s, path).await;
    assert_eq!(st, 200, "{ev}");
    assert_eq!(ev["events"].as_array().unwrap().len(), 1);
    assert_eq!(ev["next"], whole.len());
    // a client past the end (a stale offset) is sent back to the last complete line
    for from in [whole.len() + 3, 1_000_000] {
        let (st, ev) = get(s, &format!("{path}?from={from}")).await;
        assert_eq!(st, 200, "{ev}");
        assert_eq!(ev["events"], json!([]), "from {from}");
        assert_eq!(ev["next"], whole.len(), "from {from}");
    }
}

#[tokio::test]
async fn runs_api_refuses_a_dir_outside_the_runs_dir() {
    let s = shared();
    // an events.jsonl elsewhere on disk, which `?dir=` once served
    let elsewhere = temp_dir("elsewhere");
    std::fs::create_dir_all(elsewhere.join("secret")).unwrap();
    std::fs::write(
        elsewhere.join("secret/events.jsonl"),
        "{\"type\":\"step\",\"step\":7,\"loss\":1.0}\n",
    )
    .unwrap();
    let dir = elsewhere.display().to_string();
    for path in [
        format!("/api/runs?dir={dir}"),
        format!("/api/runs/secret/events?dir={dir}"),
        format!("/api/runs/secret/events?from=0&dir={dir}"),
    ] {
        let (st, e) = get(s, &path).await;
        assert_eq!(st, 400, "{path}: {e}");
        assert_eq!(e["error"]["param"], "dir", "{path}: {e}");
        assert!(e.get("events").is_none() && e.get("runs").is_none(), "{e}");
    }
    // without `dir` the run is looked up in --runs-dir only, where it is not
    let (st, _) = get(s, "/api/runs/secret/events").await;
    assert_eq!(st, 404);
    let (_, runs) = get(s, "/api/runs").await;
    assert!(
        runs["runs"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["id"] != "secret"),
        "{runs}"
    );
}

/// Regression (issue 10): the token counters were added after the reply had gone out, so a
/// scrape right after a finished request could miss it. Each reply here is followed at once
/// by a scrape that must already hold every token of every reply so far.
#[tokio::test]
async fn a_scrape_after_a_reply_always_includes_its_tokens() {
    let s = start(config());
    let (mut prompt, mut completion) = (0.0, 0.0);
    for i in 0..6 {
        let mut body = chat(&format!("Count to {i}."), 3 + i);
        let usage = if i % 2 == 0 {
            let (st, v) = post(&s, "/v1/chat/completions", &body).await;
            assert_eq!(st, 200, "{v}");
            v["usage"].clone()
        } else {
            body["stream"] = json!(true);
            body["stream_options"] = json!({"include_usage": true});
            let (chunks, done) = stream(&s, "/v1/chat/completions", &body).await;
            assert!(done, "the stream ended with [DONE]");
            chunks.last().expect("a usage chunk")["usage"].clone()
        };
        prompt += usage["prompt_tokens"].as_f64().unwrap();
        completion += usage["completion_tokens"].as_f64().unwrap();
        assert_eq!(
            metric(&s, "toy_completion_tokens_total").await,
            completion,
            "reply {i}"
        );
        assert_eq!(
            metric(&s, "toy_prompt_tokens_total").await,
            prompt,
            "reply {i}"
        );
        let ttft = metric(&s, "toy_time_to_first_token_seconds_count").await;
        assert_eq!(ttft, (i + 1) as f64, "reply {i}");
    }
}
