//! What the server tests share: the real model, servers on free loopback ports (in this
//! process, each on its own thread and runtime), and a small HTTP client on reqwest.
#![allow(dead_code)]

use serde_json::Value;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::Duration;
use toy_serve::{ServeConfig, Server};

/// SmolLM2-135M-Instruct Q4_1 (`TOY_MODEL` overrides). A missing file fails the test with
/// the command that fetches it: these tests never skip.
pub fn model_path() -> PathBuf {
    let path = std::env::var_os("TOY_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../../models/SmolLM2-135M-Instruct.Q4_1.gguf")
        });
    assert!(
        path.exists(),
        "model not found at {}: run scripts/fetch-model.sh (or set TOY_MODEL)",
        path.display()
    );
    path
}

/// llama.cpp's reference outputs on SmolLM2 (`TOY_GOLDEN` overrides the folder).
pub fn golden() -> Value {
    let dir = std::env::var_os("TOY_GOLDEN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/golden")
        });
    let p = dir.join("smollm2-135m-q4_1.llama.cpp.json");
    let text = std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("reading golden file {} (set TOY_GOLDEN): {e}", p.display()));
    serde_json::from_str(&text).expect("golden file is JSON")
}

/// A fresh empty directory under the system temp dir.
pub fn temp_dir(tag: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "toy-serve-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("creating a temp dir");
    dir
}

/// The settings tests start from: the real model, a free port, two model threads, a
/// temporary runs directory, models kept loaded.
pub fn config() -> ServeConfig {
    ServeConfig {
        models: vec![model_path()],
        port: 0,
        parallel: 4,
        ctx: 1024,
        keep_alive: None,
        runs_dir: temp_dir("runs"),
        threads: Some(2),
        ..ServeConfig::default()
    }
}

pub fn start(cfg: ServeConfig) -> Server {
    toy_serve::start(cfg).expect("server starts")
}

/// One server for the tests of a file that do not care which server they get.
pub fn shared() -> &'static Server {
    static S: OnceLock<Server> = OnceLock::new();
    S.get_or_init(|| start(config()))
}

pub fn url(s: &Server, path: &str) -> String {
    format!("http://{}{path}", s.addr)
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .expect("http client")
}

/// Status and JSON body (the body must be JSON, errors included).
pub async fn post(s: &Server, path: &str, body: &Value) -> (u16, Value) {
    post_raw(s, path, &body.to_string()).await
}

/// As `post`, with the request body as given (malformed JSON included).
pub async fn post_raw(s: &Server, path: &str, body: &str) -> (u16, Value) {
    let r = client()
        .post(url(s, path))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("request sent");
    json_of(path, r).await
}

pub async fn get(s: &Server, path: &str) -> (u16, Value) {
    let r = client()
        .get(url(s, path))
        .send()
        .await
        .expect("request sent");
    json_of(path, r).await
}

/// Status and body of `r`, which must be JSON (errors included).
async fn json_of(path: &str, r: reqwest::Response) -> (u16, Value) {
    let status = r.status().as_u16();
    let text = r.text().await.expect("body read");
    let v = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{path} answered {status} with non-JSON ({e}): {text}"));
    (status, v)
}

pub async fn get_text(s: &Server, path: &str) -> (u16, String) {
    let r = client()
        .get(url(s, path))
        .send()
        .await
        .expect("request sent");
    let status = r.status().as_u16();
    (status, r.text().await.expect("body read"))
}

/// A streamed response, read to the end: the JSON of each `data:` event, and whether the
/// stream ended with `data: [DONE]`.
pub async fn stream(s: &Server, path: &str, body: &Value) -> (Vec<Value>, bool) {
    let mut r = client()
        .post(url(s, path))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("request sent");
    assert_eq!(r.status().as_u16(), 200, "stream status");
    let ct = r.headers()["content-type"]
        .to_str()
        .unwrap_or("")
        .to_string();
    assert!(ct.starts_with("text/event-stream"), "content-type {ct}");
    let mut raw = Vec::new();
    while let Some(chunk) = r.chunk().await.expect("stream chunk") {
        raw.extend_from_slice(&chunk);
    }
    let text = String::from_utf8(raw).expect("UTF-8 stream");
    let mut events = Vec::new();
    let mut done = false;
    for block in text.split("\n\n").filter(|b| !b.trim().is_empty()) {
        let data = block
            .strip_prefix("data: ")
            .unwrap_or_else(|| panic!("not an SSE data line: {block:?}"));
        assert!(!done, "data after [DONE]");
        if data == "[DONE]" {
            done = true;
        } else {
            events.push(serde_json::from_str(data).expect("chunk is JSON"));
        }
    }
    (events, done)
}

/// A number from the Prometheus text of `/metrics`.
pub async fn metric(s: &Server, line_prefix: &str) -> f64 {
    let (_, text) = get_text(s, "/metrics").await;
    text.lines()
        .find(|l| l.starts_with(line_prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no metric {line_prefix} in:\n{text}"))
}

/// Whether this CPU runs the integer kernels whose sums do not depend on how tokens are
/// batched (the interleaved-row tiles of VNNI or AVX2; or AVX2 row dots, which batches under
/// 64 tokens of the other legacy types take): only there are batched and lone outputs promised to be bit-identical (as
/// `Model::forward_multi` documents). The tests' prompts stay under 64 tokens.
pub fn exact_kernels() -> bool {
    tinynn::kernels::qdot::has_fast_q4_1()
}

/// A greedy chat request of one user message.
pub fn chat(content: &str, max_tokens: usize) -> Value {
    serde_json::json!({
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "temperature": 0,
    })
}

/// The text of each chat request's first choice, all sent at once; request i streams when
/// `stream(i)` (its deltas joined).
pub async fn concurrent_texts(
    s: &Server,
    bodies: Vec<Value>,
    stream_if: impl Fn(usize) -> bool,
) -> Vec<String> {
    let runs = bodies.into_iter().enumerate().map(|(i, mut body)| {
        let streamed = stream_if(i);
        async move {
            if streamed {
                body["stream"] = serde_json::json!(true);
                let (chunks, done) = stream(s, "/v1/chat/completions", &body).await;
                assert!(done, "request {i}: the stream ended with [DONE]");
                chunks
                    .iter()
                    .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
                    .collect::<String>()
            } else {
                let (st, v) = post(s, "/v1/chat/completions", &body).await;
                assert_eq!(st, 200, "request {i}: {v}");
                v["choices"][0]["message"]["content"]
                    .as_str()
                    .expect("content")
                    .to_string()
            }
        }
    });
    futures_util::future::join_all(runs).await
}
