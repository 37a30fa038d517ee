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
        ("dry_multiplier", json!(0.8)),
        ("dry_base", json!(1.75)),
        ("dry_allowed_length", json!(2)),
        ("dry_penalty_last_n", json!(-1)),
        ("dry_sequence_breakers", json!(["\n", ":", "\"", "*"])),
        (
            "samplers",
            json!([
                "penalties",
                "dry",
                "top_k",
                "typ_p",
                "top_p",
                "min_p",
                "xtc",
                "temperature"
            ]),
        ),
        ("grammar", json!("")),
    ] {
        body[k] = v;
    }
    let (st, v) = post(s, "/v1/chat/completions", &body).await;
    assert_eq!(st, 200, "{v}");
    for (k, bad) in [
        ("typical_p", json!(2.0)),
        ("xtc_probability", json!(-1)),
        ("dynatemp_range", json!("x")),
        ("mirostat", json!(3)),
        ("dry_allowed_length", json!(-1)),
        ("dry_penalty_last_n", json!(-2)),
        ("dry_sequence_breakers", json!([])),
        ("dry_sequence_breakers", json!("\n")),
        ("samplers", json!(["top_k", "bogus"])),
        ("samplers", json!("kq")),
        ("samplers", json!(5)),
    ] {
        let mut b = chat("Say hi.", 4);
        b[k] = bad;
        let (st, v) = post(s, "/v1/chat/completions", &b).await;
        assert_eq!(st, 400, "{k}: {v}");
        assert_eq!(v["error"]["param"], k, "{v}");
    }
    // the order as letters, and an order without temperature
    let mut b = chat("Say hi.", 4);
    b["samplers"] = json!("kpm");
    let (st, v) = post(s, "/v1/chat/completions", &b).await;
    assert_eq!(st, 200, "{v}");
}

/// The body SillyTavern 1.12.6 builds for its llama.cpp text-completion type with its default
/// settings (`getTextGenGenerationData`, run on its source; fixtures/sillytavern-llamacpp.json):
/// dozens of fields for other back ends, `dry_sequence_breakers` as a JSON string, `samplers`
/// naming `tfs_z`, `logit_bias` as an empty list of pairs, `seed` -1, `grammar` "". Accepted,
/// streamed, and the same body without `stream` answers in one piece.
#[tokio::test]
async fn a_sillytavern_llama_cpp_body_is_accepted() {
    let s = shared();
    let body: serde_json::Value =
        serde_json::from_str(include_str!("fixtures/sillytavern-llamacpp.json")).unwrap();
    let r = client()
        .post(url(s, "/v1/completions"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("sent");
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    assert!(
        text.contains("data: ") && text.trim_end().ends_with("data: [DONE]"),
        "{text}"
    );
    let mut plain = body.clone();
    plain["stream"] = json!(false);
    let (st, v) = post(s, "/v1/completions", &plain).await;
    assert_eq!(st, 200, "{v}");
    assert!(v["choices"][0]["text"].is_string(), "{v}");
    // the pairs form of logit_bias bans a token by text, with false
    let mut banned = plain.clone();
    banned["temperature"] = json!(0);
    let (_, free) = post(s, "/v1/completions", &banned).await;
    let first = free["choices"][0]["text"].as_str().unwrap().to_string();
    let word = first.split_whitespace().next().unwrap_or("").to_string();
    assert!(!word.is_empty(), "{free}");
    banned["logit_bias"] = json!([[format!(" {word}"), false], [word.clone(), false]]);
    let (st, v) = post(s, "/v1/completions", &banned).await;
    assert_eq!(st, 200, "{v}");
    let again = v["choices"][0]["text"].as_str().unwrap();
    assert!(
        !again.trim_start().starts_with(&word),
        "{word:?} banned, got {again:?}"
    );
}
