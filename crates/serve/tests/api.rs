//! Generation through a real HTTP client, on the real SmolLM2 model: the OpenAI response
//! shapes of chat and completions, streaming, logprobs, stop strings, length limits,
//! choices and seeds, logit bias and penalties.

mod common;

use common::*;
use serde_json::{json, Value};

fn content(v: &Value) -> &str {
    v["choices"][0]["message"]["content"]
        .as_str()
        .expect("content")
}

#[tokio::test]
async fn chat_completion_has_the_openai_shape() {
    let s = shared();
    let (st, v) = post(s, "/v1/chat/completions", &chat("Name a color.", 8)).await;
    assert_eq!(st, 200, "{v}");
    assert!(v["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], "SmolLM2-135M-Instruct.Q4_1");
    assert!(v["created"].as_u64().unwrap() > 1_600_000_000);
    let c = &v["choices"][0];
    assert_eq!(c["index"], 0);
    assert_eq!(c["message"]["role"], "assistant");
    assert!(!content(&v).is_empty());
    assert!(["stop", "length"].contains(&c["finish_reason"].as_str().unwrap()));
    let u = &v["usage"];
    assert!(u["prompt_tokens"].as_u64().unwrap() > 5);
    assert!(u["completion_tokens"].as_u64().unwrap() <= 8);
    assert_eq!(
        u["total_tokens"].as_u64().unwrap(),
        u["prompt_tokens"].as_u64().unwrap() + u["completion_tokens"].as_u64().unwrap()
    );
    assert!(u["prompt_tokens_details"]["cached_tokens"].is_u64());
}

#[tokio::test]
async fn streamed_chat_equals_the_whole_answer_with_one_id_and_usage_only_when_asked() {
    let s = shared();
    let body = chat("Tell me about the sea.", 12);
    let (_, whole) = post(s, "/v1/chat/completions", &body).await;
    let mut sbody = body.clone();
    sbody["stream"] = json!(true);
    let (chunks, done) = stream(s, "/v1/chat/completions", &sbody).await;
    assert!(done, "ends with [DONE]");
    let id = chunks[0]["id"].clone();
    let created = chunks[0]["created"].clone();
    assert!(chunks
        .iter()
        .all(|c| c["id"] == id && c["created"] == created));
    assert!(chunks
        .iter()
        .all(|c| c["object"] == "chat.completion.chunk"));
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert!(
        chunks.iter().all(|c| c.get("usage").is_none()),
        "no usage unless asked"
    );
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, content(&whole));
    let last = chunks.last().unwrap();
    assert_eq!(
        last["choices"][0]["finish_reason"],
        whole["choices"][0]["finish_reason"]
    );
    assert!(chunks[..chunks.len() - 1]
        .iter()
        .all(|c| c["choices"][0]["finish_reason"].is_null()));

    sbody["stream_options"] = json!({"include_usage": true});
    let (chunks, done) = stream(s, "/v1/chat/completions", &sbody).await;
    assert!(done);
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"], json!([]));
    assert_eq!(
        last["usage"]["completion_tokens"],
        whole["usage"]["completion_tokens"]
    );
    assert!(chunks[..chunks.len() - 1]
        .iter()
        .all(|c| c["usage"].is_null()));
}

#[tokio::test]
async fn completions_take_every_prompt_form_and_echo() {
    let s = shared();
    let (_, tok) = post(
        s,
        "/tokenize",
        &json!({"content": "The capital of France is"}),
    )
    .await;
    let ids = tok["tokens"].clone();
    let text_body =
        json!({"prompt": "The capital of France is", "max_tokens": 4, "temperature": 0});
    let (st, a) = post(s, "/v1/completions", &text_body).await;
    assert_eq!(st, 200, "{a}");
    assert_eq!(a["object"], "text_completion");
    assert!(a["id"].as_str().unwrap().starts_with("cmpl-"));
    let text = a["choices"][0]["text"].as_str().unwrap().to_string();
    let (_, b) = post(
        s,
        "/v1/completions",
        &json!({"prompt": ids, "max_tokens": 4, "temperature": 0}),
    )
    .await;
    assert_eq!(
        b["choices"][0]["text"],
        text.as_str(),
        "token ids give the same text"
    );
    let (_, c) = post(
        s,
        "/v1/completions",
        &json!({"prompt": ["The capital of France is", ids], "max_tokens": 4, "temperature": 0}),
    )
    .await;
    let choices = c["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 2);
    assert!(choices.iter().all(|ch| ch["text"] == text.as_str()));
    assert_eq!(choices[1]["index"], 1);
    let (_, e) = post(
        s,
        "/v1/completions",
        &json!({"prompt": "The capital of France is", "max_tokens": 4, "temperature": 0, "echo": true}),
    )
    .await;
    assert_eq!(
        e["choices"][0]["text"],
        format!("The capital of France is{text}")
    );
    // the legacy default is 16 tokens
    let (_, d) = post(s, "/v1/completions", &json!({"prompt": "Once upon a time", "temperature": 0, "logit_bias": {"0": -100, "1": -100, "2": -100}})).await;
    assert_eq!(d["usage"]["completion_tokens"], 16);
}

#[tokio::test]
async fn legacy_logprobs_with_echo_cover_prompt_and_output() {
    let s = shared();
    let body = json!({"prompt": "The capital of France is", "max_tokens": 3, "temperature": 0,
        "logprobs": 2, "echo": true});
    let (st, v) = post(s, "/v1/completions", &body).await;
    assert_eq!(st, 200, "{v}");
    let lp = &v["choices"][0]["logprobs"];
    let tokens = lp["tokens"].as_array().unwrap();
    let n_prompt = v["usage"]["prompt_tokens"].as_u64().unwrap() as usize;
    assert_eq!(tokens.len(), n_prompt + 3);
    assert!(
        lp["token_logprobs"][0].is_null(),
        "the first prompt token has none"
    );
    assert!(lp["top_logprobs"][0].is_null());
    let offs: Vec<u64> = lp["text_offset"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect();
    assert_eq!(offs[0], 0);
    assert!(offs.windows(2).all(|w| w[0] <= w[1]));
    let joined: String = tokens.iter().map(|t| t.as_str().unwrap()).collect();
    assert_eq!(joined, v["choices"][0]["text"].as_str().unwrap());
    for i in 1..tokens.len() {
        let l = lp["token_logprobs"][i].as_f64().unwrap();
        assert!(l <= 0.0);
        let top = lp["top_logprobs"][i].as_object().unwrap();
        assert!(!top.is_empty() && top.len() <= 2);
        let best = top
            .values()
            .map(|x| x.as_f64().unwrap())
            .fold(f64::MIN, f64::max);
        assert!(best >= l - 1e-6, "top includes the best token");
    }
    // greedy output tokens are the most likely ones
    for i in n_prompt..tokens.len() {
        let top = lp["top_logprobs"][i].as_object().unwrap();
        let best = top
            .values()
            .map(|x| x.as_f64().unwrap())
            .fold(f64::MIN, f64::max);
        assert!((best - lp["token_logprobs"][i].as_f64().unwrap()).abs() < 1e-5);
    }
}

#[tokio::test]
async fn chat_logprobs_have_top_alternatives_and_stream_too() {
    let s = shared();
    let mut body = chat("Say hello.", 4);
    body["logprobs"] = json!(true);
    body["top_logprobs"] = json!(3);
    let (st, v) = post(s, "/v1/chat/completions", &body).await;
    assert_eq!(st, 200, "{v}");
    let items = v["choices"][0]["logprobs"]["content"].as_array().unwrap();
    assert_eq!(
        items.len() as u64,
        v["usage"]["completion_tokens"].as_u64().unwrap()
    );
    for it in items {
        assert!(it["logprob"].as_f64().unwrap() <= 0.0);
        assert!(it["bytes"].is_array() && it["token"].is_string());
        let top = it["top_logprobs"].as_array().unwrap();
        assert_eq!(top.len(), 3);
        assert_eq!(top[0]["token"], it["token"], "greedy picks the top token");
    }
    body["stream"] = json!(true);
    let (chunks, _) = stream(s, "/v1/chat/completions", &body).await;
    let streamed: Vec<&Value> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["logprobs"]["content"].as_array())
        .flatten()
        .collect();
    assert_eq!(streamed.len(), items.len());
    assert_eq!(streamed[0]["token"], items[0]["token"]);
    let (st, e) = post(
        s,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}),
    )
    .await;
    assert_eq!(
        (st, e["error"]["param"].as_str()),
        (400, Some("top_logprobs"))
    );
}

#[tokio::test]
async fn stop_strings_never_reach_the_client_streamed_or_not() {
    let s = shared();
    let body = json!({"prompt": "1, 2, 3, 4, 5,", "max_tokens": 24, "temperature": 0});
    let (_, v) = post(s, "/v1/completions", &body).await;
    let full = v["choices"][0]["text"].as_str().unwrap().to_string();
    // a stop string that spans several tokens, from the middle of the greedy text
    let chars: Vec<char> = full.chars().collect();
    assert!(chars.len() > 12, "greedy text too short: {full:?}");
    let stop: String = chars[6..11].iter().collect();
    let cut = full.find(&stop).unwrap();
    let mut b = body.clone();
    b["stop"] = json!(["never-appears", stop]);
    let (_, v) = post(s, "/v1/completions", &b).await;
    assert_eq!(v["choices"][0]["text"], &full[..cut]);
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    b["stream"] = json!(true);
    let (chunks, done) = stream(s, "/v1/completions", &b).await;
    assert!(done);
    let streamed: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["text"].as_str())
        .collect();
    assert_eq!(streamed, &full[..cut]);
    // a single string works too
    let mut one = body.clone();
    one["stop"] = json!(stop);
    let (_, v) = post(s, "/v1/completions", &one).await;
    assert_eq!(v["choices"][0]["text"], &full[..cut]);
}

#[tokio::test]
async fn max_tokens_and_max_completion_tokens_cap_the_output() {
    let s = shared();
    let ban = json!({"0": -100, "1": -100, "2": -100});
    for key in ["max_tokens", "max_completion_tokens"] {
        let body = json!({"messages": [{"role": "user", "content": "Count to fifty."}], key: 5,
            "temperature": 0, "logit_bias": ban});
        let (_, v) = post(s, "/v1/chat/completions", &body).await;
        assert_eq!(v["usage"]["completion_tokens"], 5, "{key}");
        assert_eq!(v["choices"][0]["finish_reason"], "length");
    }
}

#[tokio::test]
async fn n_choices_and_seeds_are_reproducible() {
    let s = shared();
    let body = json!({"messages": [{"role": "user", "content": "Write a word."}], "max_tokens": 8,
        "temperature": 1.5, "top_k": 0, "min_p": 0, "n": 3, "seed": 42});
    let (st, a) = post(s, "/v1/chat/completions", &body).await;
    assert_eq!(st, 200, "{a}");
    let texts = |v: &Value| -> Vec<String> {
        v["choices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["message"]["content"].as_str().unwrap().to_string())
            .collect()
    };
    let ta = texts(&a);
    assert_eq!(ta.len(), 3);
    let idx: Vec<u64> = a["choices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["index"].as_u64().unwrap())
        .collect();
    assert_eq!(idx, vec![0, 1, 2]);
    let (_, b) = post(s, "/v1/chat/completions", &body).await;
    assert_eq!(texts(&b), ta, "same seed, same choices");
    assert!(
        ta.iter().any(|t| t != &ta[0]),
        "choices draw differently: {ta:?}"
    );
    let sum: u64 = a["usage"]["completion_tokens"].as_u64().unwrap();
    assert!(sum > 8, "usage counts every choice: {sum}");
}

#[tokio::test]
async fn logit_bias_and_penalties_change_the_greedy_choice() {
    let s = shared();
    let body = json!({"prompt": "The capital of France is", "max_tokens": 1, "temperature": 0, "logprobs": 1});
    let (_, v) = post(s, "/v1/completions", &body).await;
    let first = v["choices"][0]["logprobs"]["tokens"][0]
        .as_str()
        .unwrap()
        .to_string();
    let (_, t) = post(s, "/tokenize", &json!({"content": first})).await;
    let id = t["tokens"][0].as_u64().unwrap();
    let mut b = body.clone();
    b["logit_bias"] = json!({ id.to_string(): -100 });
    let (_, v2) = post(s, "/v1/completions", &b).await;
    assert_ne!(
        v2["choices"][0]["logprobs"]["tokens"][0].as_str().unwrap(),
        first
    );
    // a penalty on every prompt token (presence) moves greedy decoding off repeats
    let rep = json!({"prompt": "a a a a a a a a", "max_tokens": 4, "temperature": 0});
    let (_, plain) = post(s, "/v1/completions", &rep).await;
    let mut pen = rep.clone();
    pen["presence_penalty"] = json!(2.0);
    pen["frequency_penalty"] = json!(2.0);
    pen["repeat_penalty"] = json!(3.0);
    let (_, penalised) = post(s, "/v1/completions", &pen).await;
    assert_ne!(plain["choices"][0]["text"], penalised["choices"][0]["text"]);
}
