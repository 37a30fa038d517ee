//! What browser front ends and clients written for llama-server need: CORS (a preflight
//! answered before the API key check, `Access-Control-Allow-Origin` on replies to allowed
//! origins), `system_fingerprint` on every streamed chunk, and, with one model served, any
//! requested model name answered by it under its own name (`--alias`, `--exact-model`).

mod common;

use common::*;
use serde_json::json;
use toy_serve::ServeConfig;

const PAGE: &str = "http://localhost:8931";

fn with_key(cors: &str) -> ServeConfig {
    ServeConfig {
        api_key: Some("sekrit".into()),
        cors_origins: cors.into(),
        ..config()
    }
}

async fn preflight(s: &toy_serve::Server, origin: &str) -> reqwest::Response {
    client()
        .request(reqwest::Method::OPTIONS, url(s, "/v1/chat/completions"))
        .header("origin", origin)
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "authorization, content-type",
        )
        .send()
        .await
        .expect("preflight sent")
}

fn header<'a>(r: &'a reqwest::Response, name: &str) -> Option<&'a str> {
    r.headers().get(name).and_then(|v| v.to_str().ok())
}

#[tokio::test]
async fn a_preflight_is_answered_before_the_key_check_and_replies_carry_the_origin() {
    let s = start(with_key("*"));
    let r = preflight(&s, PAGE).await;
    assert_eq!(r.status(), 204);
    assert_eq!(header(&r, "access-control-allow-origin"), Some(PAGE));
    assert_eq!(header(&r, "access-control-allow-credentials"), Some("true"));
    assert!(header(&r, "access-control-allow-methods").is_some_and(|m| m.contains("POST")));
    // "*" does not cover Authorization: the asked headers come back by name
    let allowed = header(&r, "access-control-allow-headers").unwrap_or_default();
    assert!(allowed.contains("authorization"), "{allowed}");
    // the request itself, with the key: a reply the page may read
    let r = client()
        .post(url(&s, "/v1/chat/completions"))
        .header("origin", PAGE)
        .header("authorization", "Bearer sekrit")
        .header("content-type", "application/json")
        .body(chat("Hi", 2).to_string())
        .send()
        .await
        .expect("sent");
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "access-control-allow-origin"), Some(PAGE));
    // without it: 401, which the page can read too
    let r = client()
        .post(url(&s, "/v1/chat/completions"))
        .header("origin", PAGE)
        .header("content-type", "application/json")
        .body(chat("Hi", 2).to_string())
        .send()
        .await
        .expect("sent");
    assert_eq!(r.status(), 401);
    assert_eq!(header(&r, "access-control-allow-origin"), Some(PAGE));
}

#[tokio::test]
async fn only_the_listed_origins_get_cors_headers() {
    let s = start(with_key("http://app.example, localhost-not-this"));
    let ok = preflight(&s, "http://app.example").await;
    assert_eq!(
        header(&ok, "access-control-allow-origin"),
        Some("http://app.example")
    );
    let other = preflight(&s, "http://evil.example").await;
    assert_eq!(header(&other, "access-control-allow-origin"), None);
    let s = start(with_key("localhost"));
    let local = preflight(&s, "http://127.0.0.1:5173").await;
    assert_eq!(
        header(&local, "access-control-allow-origin"),
        Some("http://127.0.0.1:5173")
    );
    assert_eq!(
        header(
            &preflight(&s, "http://app.example").await,
            "access-control-allow-origin"
        ),
        None
    );
    let s = start(with_key("none"));
    assert_eq!(
        header(&preflight(&s, PAGE).await, "access-control-allow-origin"),
        None
    );
}

#[tokio::test]
async fn every_streamed_chunk_carries_the_system_fingerprint() {
    let s = shared();
    let mut body = chat("Count to three.", 6);
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let (chunks, done) = stream(s, "/v1/chat/completions", &body).await;
    assert!(done && chunks.len() > 2);
    for c in &chunks {
        assert!(
            c["system_fingerprint"]
                .as_str()
                .is_some_and(|f| f.starts_with("toy-")),
            "{c}"
        );
    }
    let (_, whole) = post(s, "/v1/chat/completions", &chat("Hi", 2)).await;
    assert_eq!(whole["system_fingerprint"], chunks[0]["system_fingerprint"]);
}

#[tokio::test]
async fn a_client_asking_for_another_model_gets_the_one_served() {
    let s = shared();
    let mut body = chat("Say hi.", 4);
    body["model"] = json!("gpt-3.5-turbo");
    let (st, v) = post(s, "/v1/chat/completions", &body).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["model"], "SmolLM2-135M-Instruct.Q4_1");
    // with exact names only the served name and its aliases are taken
    let s = start(ServeConfig {
        exact_model: true,
        aliases: vec!["smol".into()],
        ..config()
    });
    let (st, _) = post(&s, "/v1/chat/completions", &body).await;
    assert_eq!(st, 404);
    body["model"] = json!("smol");
    let (st, v) = post(&s, "/v1/chat/completions", &body).await;
    assert_eq!(
        (st, &v["model"]),
        (200, &json!("SmolLM2-135M-Instruct.Q4_1"))
    );
}

#[tokio::test]
async fn llama_server_sampling_fields_are_taken_and_checked() {
    let s = shared();
    let mut body = chat("Say hi.", 4);
    for (k, v) in [
        ("top_n_sigma", json!(1.5)),
        ("typical_p", json!(0.9)),
        ("xtc_probability", json!(0.5)),
        ("xtc_threshold", json!(0.1)),
        ("dynatemp_range", json!(0.3)),
        ("dynatemp_exponent", json!(1.2)),
        ("mirostat", json!(2)),
        ("mirostat_tau", json!(4.0)),
        ("mirostat_eta", json!(0.2)),
    ] {
        body[k] = v;
    }
    let (st, v) = post(s, "/v1/chat/completions", &body).await;
    assert_eq!(st, 200, "{v}");
    for (k, bad) in [
        ("typical_p", json!(2.0)),
        ("xtc_probability", json!(-1)),
        ("dynatemp_range", json!("x")),
    ] {
        let mut b = chat("Say hi.", 4);
        b[k] = bad;
        let (st, v) = post(s, "/v1/chat/completions", &b).await;
        assert_eq!(st, 400, "{k}: {v}");
        assert_eq!(v["error"]["param"], k, "{v}");
    }
}
