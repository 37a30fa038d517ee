//! `toy serve --lora FILE[:SCALE]` on SmolLM2 with a random adapter (nonzero B) on every
//! layer's attention output and MLP down projection: a request's `lora` scale picks the
//! adapter (scale 0 answers as a server without it), unknown ids are 400s, GET/POST
//! `/lora-adapters` list the adapters and set the default scales, requests with and without
//! the adapter decode in one batch and answer as they do alone, and an adapter that does
//! not fit the model stops the server from starting, naming the file.

mod common;

use common::*;
use serde_json::{json, Value};
use std::path::PathBuf;
use toy::finetune::adapter::{LoraAdapter, LoraTensor};
use toy::gguf::GgufFile;

/// The adapter file (written once per test process).
fn adapter_path() -> PathBuf {
    static P: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    P.get_or_init(|| {
        let base = GgufFile::open(&model_path()).expect("SmolLM2 opens");
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            0.2 * ((seed >> 40) as f32 / (1u64 << 23) as f32 - 1.0)
        };
        let rank = 4;
        let mut tensors = Vec::new();
        for t in &base.tensors {
            if !(t.name.ends_with("attn_output.weight") || t.name.ends_with("ffn_down.weight")) {
                continue;
            }
            let (n_in, n_out) = (t.dims[0] as usize, t.dims[1] as usize);
            tensors.push(LoraTensor {
                base: t.name.clone(),
                n_in,
                n_out,
                rank,
                a: (0..rank * n_in).map(|_| next()).collect(),
                b: (0..n_out * rank).map(|_| next()).collect(),
            });
        }
        let ad = LoraAdapter {
            arch: base.architecture().expect("arch").into(),
            alpha: rank as f32,
            tensors,
        };
        let path = temp_dir("lora").join("random-lora.gguf");
        ad.write(&path).expect("writing the adapter");
        path
    })
    .clone()
}

fn lora_config(scale: f32) -> toy_serve::ServeConfig {
    let mut cfg = config();
    cfg.loras = vec![(adapter_path(), scale)];
    cfg
}

fn with_lora(mut body: Value, lora: Value) -> Value {
    body["lora"] = lora;
    body
}

async fn reply(s: &toy_serve::Server, body: &Value) -> String {
    let (st, v) = post(s, "/v1/chat/completions", body).await;
    assert_eq!(st, 200, "{v}");
    v["choices"][0]["message"]["content"]
        .as_str()
        .expect("content")
        .to_string()
}

const PROMPT: &str = "What is the capital of France?";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_requests_lora_scale_picks_the_adapter_and_scale_zero_is_the_base() {
    let plain = start(config());
    let base = reply(&plain, &chat(PROMPT, 12)).await;
    drop(plain);

    let s = start(lora_config(1.0));
    let on = reply(
        &s,
        &with_lora(chat(PROMPT, 12), json!([{"id": 0, "scale": 1.0}])),
    )
    .await;
    let off = reply(
        &s,
        &with_lora(chat(PROMPT, 12), json!([{"id": 0, "scale": 0.0}])),
    )
    .await;
    let default = reply(&s, &chat(PROMPT, 12)).await;
    let none = reply(&s, &with_lora(chat(PROMPT, 12), json!([]))).await;
    assert_eq!(off, base, "scale 0 answers as the plain model");
    assert_eq!(none, base, "an empty list turns the adapters off");
    assert_ne!(on, base, "the adapter changes the reply");
    assert_eq!(default, on, "without 'lora' the default scale (1) applies");

    // unknown ids and malformed lists are 400s naming the field
    for bad in [
        json!([{"id": 1, "scale": 1.0}]),
        json!([{"id": 0}]),
        json!({"id": 0}),
    ] {
        let (st, v) = post(&s, "/v1/chat/completions", &with_lora(chat(PROMPT, 4), bad)).await;
        assert_eq!(st, 400, "{v}");
        assert_eq!(v["error"]["param"], "lora", "{v}");
        assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
    }
    let (_, v) = post(
        &s,
        "/v1/chat/completions",
        &with_lora(chat(PROMPT, 4), json!([{"id": 7, "scale": 1.0}])),
    )
    .await;
    let msg = v["error"]["message"].as_str().unwrap_or("");
    assert!(msg.contains("id 7"), "{msg}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lora_adapters_routes_list_and_set_the_default_scales() {
    let s = start(lora_config(0.5));
    let (st, v) = get(&s, "/lora-adapters").await;
    assert_eq!(st, 200, "{v}");
    let path = adapter_path().display().to_string();
    assert_eq!(v, json!([{"id": 0, "path": path, "scale": 0.5}]));

    let (st, v) = post(&s, "/lora-adapters", &json!([{"id": 0, "scale": 0.0}])).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(get(&s, "/lora-adapters").await.1[0]["scale"], 0.0);
    let default_off = reply(&s, &chat(PROMPT, 12)).await;
    let off = reply(
        &s,
        &with_lora(chat(PROMPT, 12), json!([{"id": 0, "scale": 0}])),
    )
    .await;
    assert_eq!(default_off, off);

    post(&s, "/lora-adapters", &json!([{"id": 0, "scale": 1.0}])).await;
    let default_on = reply(&s, &chat(PROMPT, 12)).await;
    let on = reply(
        &s,
        &with_lora(chat(PROMPT, 12), json!([{"id": 0, "scale": 1}])),
    )
    .await;
    assert_eq!(default_on, on);
    assert_ne!(default_on, default_off);

    let (st, v) = post(&s, "/lora-adapters", &json!([{"id": 3, "scale": 1.0}])).await;
    assert_eq!(st, 400, "{v}");
    let (st, v) = post_raw(&s, "/lora-adapters", "{\"id\": 0}").await;
    assert_eq!(st, 400, "{v}");
    assert_eq!(get(&s, "/lora-adapters").await.1[0]["scale"], 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_with_and_without_the_adapter_batch_together_and_answer_as_alone() {
    let s = start(lora_config(1.0));
    let prompts = [
        "Name a prime number.",
        "Say hello in Spanish.",
        PROMPT,
        "List three fruits.",
    ];
    let body = |i: usize| {
        let scale = if i.is_multiple_of(2) { 1.0 } else { 0.0 };
        with_lora(chat(prompts[i], 16), json!([{"id": 0, "scale": scale}]))
    };
    let mut alone = Vec::new();
    for i in 0..prompts.len() {
        alone.push(reply(&s, &body(i)).await);
    }
    let together = concurrent_texts(&s, (0..prompts.len()).map(body).collect(), |i| i == 1).await;
    for (i, t) in together.iter().enumerate() {
        if exact_kernels() {
            assert_eq!(
                t, &alone[i],
                "request {i} under batching differs from alone"
            );
        }
    }
}

#[test]
fn an_adapter_that_does_not_fit_the_model_stops_startup_naming_the_file() {
    let path = temp_dir("lora-bad").join("wrong-shape.gguf");
    LoraAdapter {
        arch: "llama".into(),
        alpha: 1.0,
        tensors: vec![LoraTensor {
            base: "blk.0.attn_q.weight".into(),
            n_in: 7,
            n_out: 5,
            rank: 1,
            a: vec![0.1; 7],
            b: vec![0.1; 5],
        }],
    }
    .write(&path)
    .expect("write");
    let mut cfg = config();
    cfg.loras = vec![(path.clone(), 1.0)];
    let e = toy_serve::start(cfg).err().expect("refused").to_string();
    assert!(
        e.contains("wrong-shape.gguf") && e.contains("attn_q"),
        "{e}"
    );
    let mut cfg = config();
    cfg.loras = vec![(PathBuf::from("/nonexistent/lora.gguf"), 1.0)];
    let e = toy_serve::start(cfg).err().expect("refused").to_string();
    assert!(e.contains("/nonexistent/lora.gguf"), "{e}");
}
