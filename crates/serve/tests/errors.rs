//! Every error `toy serve` answers, each in OpenAI's shape with the right status, and the
//! server still serving afterwards.

mod common;

use common::*;
use serde_json::{json, Value};

/// The error object of a response, checked for the full shape.
fn error(v: &Value) -> &Value {
    let e = &v["error"];
    for key in ["message", "type", "param", "code"] {
        assert!(e.get(key).is_some(), "error lacks '{key}': {v}");
    }
    assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()));
    e
}

#[tokio::test]
async fn malformed_bodies_are_400_in_the_openai_shape() {
    let s = shared();
    for body in ["{bad", "", "[1, 2]", "\"text\"", "{\"messages\": [}"] {
        let (st, v) = post_raw(s, "/v1/chat/completions", body).await;
        assert_eq!(st, 400, "{body:?}: {v}");
        assert_eq!(error(&v)["type"], "invalid_request_error");
    }
    let (st, v) = post_raw(s, "/tokenize", "{oops").await;
    assert_eq!(
        (st, error(&v)["code"].as_str()),
        (400, Some("invalid_json"))
    );
}

#[tokio::test]
async fn wrong_types_and_ranges_name_the_field() {
    let s = shared();
    let msg = json!([{"role": "user", "content": "hi"}]);
    let cases = [
        (
            json!({"messages": msg, "temperature": "hot"}),
            "temperature",
        ),
        (json!({"messages": msg, "max_tokens": -1}), "max_tokens"),
        (json!({"messages": msg, "max_tokens": "ten"}), "max_tokens"),
        (json!({"messages": msg, "n": 0}), "n"),
        (json!({"messages": msg, "top_p": 1.5}), "top_p"),
        (json!({"messages": msg, "stream": "yes"}), "stream"),
        (json!({"messages": msg, "stop": 5}), "stop"),
        (json!({"messages": msg, "seed": "x"}), "seed"),
        (
            json!({"messages": msg, "logit_bias": {"abc": 1}}),
            "logit_bias",
        ),
        (
            json!({"messages": msg, "logit_bias": {"5": 500}}),
            "logit_bias",
        ),
        (
            json!({"messages": msg, "stream_options": {"include_usage": true}}),
            "stream_options",
        ),
        (json!({"messages": "hi"}), "messages"),
        (
            json!({"messages": [{"role": "user", "content": 5}]}),
            "messages[0].content",
        ),
        (json!({"messages": [{"content": "x"}]}), "messages[0].role"),
        (json!({"messages": msg, "model": 7}), "model"),
    ];
    for (body, param) in cases {
        let (st, v) = post(s, "/v1/chat/completions", &body).await;
        assert_eq!(st, 400, "{body}: {v}");
        assert_eq!(error(&v)["param"], param, "{body}: {v}");
    }
    let (st, v) = post(s, "/v1/completions", &json!({"prompt": 5})).await;
    assert_eq!((st, error(&v)["param"].as_str()), (400, Some("prompt")));
    let (st, v) = post(s, "/v1/completions", &json!({"prompt": [1, "x"]})).await;
    assert_eq!((st, error(&v)["param"].as_str()), (400, Some("prompt")));
    let (st, v) = post(s, "/v1/completions", &json!({"prompt": [99999999]})).await;
    assert_eq!((st, error(&v)["param"].as_str()), (400, Some("prompt")));
    let (st, v) = post(s, "/v1/embeddings", &json!({"input": 3})).await;
    assert_eq!((st, error(&v)["param"].as_str()), (400, Some("input")));
}

#[tokio::test]
async fn empty_messages_and_unknown_roles_are_400() {
    let s = shared();
    let (st, v) = post(s, "/v1/chat/completions", &json!({"messages": []})).await;
    assert_eq!((st, error(&v)["param"].as_str()), (400, Some("messages")));
    let (st, v) = post(s, "/v1/chat/completions", &json!({})).await;
    assert_eq!((st, error(&v)["param"].as_str()), (400, Some("messages")));
    let (st, v) = post(
        s,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "wizard", "content": "x"}]}),
    )
    .await;
    assert_eq!(st, 400);
    assert_eq!(error(&v)["param"], "messages[0].role");
    assert!(v["error"]["message"].as_str().unwrap().contains("wizard"));
    let (st, v) = post(s, "/v1/completions", &json!({"prompt": ""})).await;
    assert_eq!((st, error(&v)["param"].as_str()), (400, Some("prompt")));
}

#[tokio::test]
async fn unsupported_fields_are_refused_by_name() {
    let s = shared();
    let msg = json!([{"role": "user", "content": "hi"}]);
    for (key, val) in [("functions", json!([])), ("audio", json!({}))] {
        let mut body = json!({"messages": msg});
        body[key] = val;
        let (st, v) = post(s, "/v1/chat/completions", &body).await;
        assert_eq!(st, 400, "{key}: {v}");
        assert_eq!(error(&v)["param"], key);
        assert_eq!(v["error"]["code"], "unsupported_parameter");
    }
    let (st, v) = post(
        s,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "function", "content": "x"}]}),
    )
    .await;
    assert_eq!(
        (st, error(&v)["code"].as_str()),
        (400, Some("unsupported_parameter"))
    );
    let (st, v) = post(s, "/v1/completions", &json!({"prompt": "x", "suffix": "y"})).await;
    assert_eq!((st, error(&v)["param"].as_str()), (400, Some("suffix")));
    // harmless extras and a plain-text response_format are accepted
    let body = json!({"messages": msg, "max_tokens": 1, "user": "u1", "metadata": {"a": "b"},
        "response_format": {"type": "text"}, "store": false});
    let (st, v) = post(s, "/v1/chat/completions", &body).await;
    assert_eq!(st, 200, "{v}");
}

#[tokio::test]
async fn unknown_model_is_404_model_not_found_when_names_must_be_exact() {
    let s = start(toy_serve::ServeConfig {
        exact_model: true,
        ..config()
    });
    for (path, body) in [
        (
            "/v1/chat/completions",
            json!({"model": "gpt-4", "messages": [{"role": "user", "content": "x"}]}),
        ),
        ("/v1/completions", json!({"model": "gpt-4", "prompt": "x"})),
        ("/v1/embeddings", json!({"model": "gpt-4", "input": "x"})),
        ("/tokenize", json!({"model": "gpt-4", "content": "x"})),
    ] {
        let (st, v) = post(&s, path, &body).await;
        assert_eq!(st, 404, "{path}: {v}");
        assert_eq!(error(&v)["code"], "model_not_found");
        assert_eq!(v["error"]["param"], "model");
    }
}

#[tokio::test]
async fn unknown_paths_are_404_and_wrong_methods_405_as_json() {
    let s = shared();
    let (st, v) = get(s, "/v1/nothing").await;
    assert_eq!((st, error(&v)["code"].as_str()), (404, Some("not_found")));
    let r = client()
        .delete(url(s, "/v1/chat/completions"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 405);
    let v: Value = serde_json::from_str(&r.text().await.unwrap()).expect("405 is JSON");
    assert_eq!(error(&v)["code"], "method_not_allowed");
    let (st, v) = get(s, "/v1/chat/completions").await;
    assert_eq!(
        (st, error(&v)["code"].as_str()),
        (405, Some("method_not_allowed"))
    );
}

#[tokio::test]
async fn a_body_over_the_limit_is_413() {
    let s = shared();
    let big = "a".repeat(5 << 20);
    let body = json!({"prompt": big}).to_string();
    let (st, v) = post_raw(s, "/v1/completions", &body).await;
    assert_eq!(
        (st, error(&v)["code"].as_str()),
        (413, Some("body_too_large"))
    );
}

#[tokio::test]
async fn prompts_past_the_context_are_400_and_long_outputs_end_with_length() {
    let mut cfg = config();
    cfg.ctx = 64;
    let s = start(cfg);
    let long = "word ".repeat(200);
    let (st, v) = post(&s, "/v1/completions", &json!({"prompt": long})).await;
    assert_eq!(st, 400, "{v}");
    assert_eq!(error(&v)["code"], "context_length_exceeded");
    let m = v["error"]["message"].as_str().unwrap();
    let (_, t) = post(
        &s,
        "/tokenize",
        &json!({"content": long, "add_special": true}),
    )
    .await;
    let n = t["tokens"].as_array().unwrap().len();
    assert!(
        m.contains(" 64") && m.contains(&n.to_string()),
        "both counts ({n}, 64) in: {m}"
    );
    let (st, v) = post(
        &s,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": long}]}),
    )
    .await;
    assert_eq!(
        (st, error(&v)["code"].as_str()),
        (400, Some("context_length_exceeded"))
    );
    // max_tokens past the context: the reply stops where the context ends
    let body = json!({"prompt": "Once upon a time", "max_tokens": 1000, "temperature": 0,
        "logit_bias": {"0": -100, "1": -100, "2": -100}});
    let (st, v) = post(&s, "/v1/completions", &body).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    let used = v["usage"]["total_tokens"].as_u64().unwrap();
    assert!(
        (60..=65).contains(&used),
        "prompt + output fill the context of 64: {used}"
    );
}

#[tokio::test]
async fn an_api_key_guards_the_api_but_not_the_page_or_health() {
    let mut cfg = config();
    cfg.api_key = Some("sekrit".into());
    let s = start(cfg);
    let c = client();
    let r = c.get(url(&s, "/v1/models")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 401);
    let v: Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
    assert_eq!(error(&v)["type"], "authentication_error");
    let r = c
        .get(url(&s, "/v1/models"))
        .bearer_auth("wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
    let r = c
        .post(url(&s, "/v1/chat/completions"))
        .bearer_auth("sekrit")
        .body(chat("hi", 1).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(
        c.get(url(&s, "/v1/models"))
            .bearer_auth("sekrit")
            .send()
            .await
            .unwrap()
            .status()
            .as_u16(),
        200
    );
    assert_eq!(
        c.get(url(&s, "/health"))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16(),
        200
    );
    assert_eq!(
        c.get(url(&s, "/")).send().await.unwrap().status().as_u16(),
        200
    );
}

#[tokio::test]
async fn the_server_keeps_serving_after_errors() {
    let s = shared();
    for _ in 0..3 {
        post_raw(s, "/v1/chat/completions", "{bad").await;
        post(s, "/v1/chat/completions", &json!({"messages": []})).await;
        post(
            s,
            "/v1/completions",
            &json!({"model": "nope", "prompt": "x"}),
        )
        .await;
    }
    let (st, v) = post(s, "/v1/chat/completions", &chat("Say yes.", 2)).await;
    assert_eq!(st, 200, "{v}");
    assert!(
        metric(
            s,
            "toy_requests_total{route=\"/v1/chat/completions\",status=\"400\"}"
        )
        .await
            >= 6.0
    );
    // the binding default is loopback
    assert_eq!(toy_serve::ServeConfig::default().host, "127.0.0.1");
}

#[tokio::test]
async fn a_model_that_fails_to_load_is_a_500_and_the_others_still_serve() {
    let dir = temp_dir("broken");
    std::fs::write(dir.join("broken.gguf"), b"GGUF but not really").unwrap();
    let mut cfg = config();
    cfg.models_dir = Some(dir);
    let s = start(cfg);
    let mut body = chat("Hi", 2);
    body["model"] = json!("broken");
    for _ in 0..2 {
        let (st, v) = post(&s, "/v1/chat/completions", &body).await;
        assert_eq!(st, 500, "{v}");
        assert_eq!(error(&v)["code"], "model_load_failed");
        assert!(v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("broken.gguf"));
    }
    let (st, h) = get(&s, "/health").await;
    assert_eq!(st, 200, "not stuck loading: {h}");
    body["model"] = json!("SmolLM2-135M-Instruct.Q4_1");
    let (st, v) = post(&s, "/v1/chat/completions", &body).await;
    assert_eq!(st, 200, "{v}");
}
