//! Constrained decoding through the server: `response_format` (JSON object and schema),
//! `json_schema`, `grammar` and `regex` on chat and completions, streamed or not, batched
//! with unconstrained requests; constraints that do not compile are 400s naming the field.

mod common;

use common::*;
use serde_json::{json, Value};

fn content(v: &Value) -> &str {
    v["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_else(|| panic!("no content in {v}"))
}

fn person_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 24},
            "age": {"type": "integer", "minimum": 1, "maximum": 99},
            "pets": {"type": "array", "items": {"enum": ["cat", "dog", "fish"]}, "maxItems": 3}
        },
        "required": ["name", "age", "pets"],
        "additionalProperties": false
    })
}

fn check_person(text: &str) {
    let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    let o = v.as_object().expect("an object");
    assert_eq!(o.len(), 3, "{v}");
    assert!(o["name"].as_str().unwrap().chars().count() <= 24);
    assert!((1..=99).contains(&o["age"].as_i64().unwrap()), "{v}");
    for p in o["pets"].as_array().unwrap() {
        assert!(["cat", "dog", "fish"].contains(&p.as_str().unwrap()), "{v}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_schema_replies_parse_streamed_or_not_and_batched_with_plain_requests() {
    let s = shared();
    let rf = json!({"type": "json_schema",
        "json_schema": {"name": "person", "schema": person_schema(), "strict": true}});
    let mut body = chat("Describe a person.", 120);
    body["response_format"] = rf;
    body["temperature"] = json!(0.9);
    body["n"] = json!(3);
    let plain = chat("Write a haiku about rain.", 24);
    let (alone_st, alone) = post(s, "/v1/chat/completions", &plain).await;
    assert_eq!(alone_st, 200);
    // the constrained request shares the batch with an unconstrained one
    let ((st, v), (pst, pv)) = tokio::join!(
        post(s, "/v1/chat/completions", &body),
        post(s, "/v1/chat/completions", &plain)
    );
    assert_eq!((st, pst), (200, 200), "{v} {pv}");
    for c in v["choices"].as_array().unwrap() {
        assert_eq!(c["finish_reason"], "stop", "{c}");
        check_person(c["message"]["content"].as_str().unwrap());
    }
    if exact_kernels() {
        assert_eq!(
            content(&pv),
            content(&alone),
            "a constrained neighbour changed the output"
        );
    }
    body["stream"] = json!(true);
    body["n"] = json!(1);
    let (events, done) = stream(s, "/v1/chat/completions", &body).await;
    assert!(done);
    let text: String = events
        .iter()
        .filter_map(|e| e["choices"][0]["delta"]["content"].as_str())
        .collect();
    check_person(&text);
    // json_object: any object
    let mut body = chat("Give me a JSON object about the weather.", 80);
    body["response_format"] = json!({"type": "json_object"});
    let (st, v) = post(s, "/v1/chat/completions", &body).await;
    assert_eq!(st, 200, "{v}");
    if v["choices"][0]["finish_reason"] == "stop" {
        let o: Value = serde_json::from_str(content(&v)).expect("JSON");
        assert!(o.is_object(), "{o}");
    }
}

#[tokio::test]
async fn completions_take_grammar_regex_and_json_schema() {
    let s = shared();
    let body = json!({"prompt": "The answer is", "max_tokens": 20, "temperature": 1.0, "seed": 3,
        "regex": " (yes|no)\\. [0-9]{1,3}%"});
    let (st, v) = post(s, "/v1/completions", &body).await;
    assert_eq!(st, 200, "{v}");
    let t = v["choices"][0]["text"].as_str().unwrap();
    assert!(t.starts_with(" yes. ") || t.starts_with(" no. "), "{t}");
    assert!(t.ends_with('%'), "{t}");
    let body = json!({"prompt": "Pick a colour:", "max_tokens": 20, "temperature": 0,
        "grammar": "start: \" \" colour \".\"\ncolour: \"red\" | \"green\" | \"blue\"\n"});
    let (st, v) = post(s, "/v1/completions", &body).await;
    assert_eq!(st, 200, "{v}");
    let t = v["choices"][0]["text"].as_str().unwrap();
    assert!([" red.", " green.", " blue."].contains(&t), "{t}");
    let body = json!({"prompt": "A person:", "max_tokens": 120, "temperature": 0,
        "json_schema": person_schema()});
    let (st, v) = post(s, "/v1/completions", &body).await;
    assert_eq!(st, 200, "{v}");
    check_person(v["choices"][0]["text"].as_str().unwrap());
}

#[tokio::test]
async fn a_reply_cut_by_max_tokens_ends_with_length() {
    let s = shared();
    let mut body = chat("Tell me a long story.", 8);
    body["response_format"] = json!({"type": "json_schema", "json_schema": {"name": "s",
        "schema": {"type": "object", "properties": {"story": {"type": "string", "minLength": 300}},
        "required": ["story"]}}});
    let (st, v) = post(s, "/v1/chat/completions", &body).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert!(serde_json::from_str::<Value>(content(&v)).is_err());
}

#[tokio::test]
async fn constraints_that_do_not_compile_are_400_naming_the_field() {
    let s = shared();
    let msg = json!([{"role": "user", "content": "hi"}]);
    let cases = [
        (
            "response_format",
            json!({"type": "json_schema", "json_schema": {"name": "x",
            "schema": {"type": "object", "properties": {"a": {"type": "no-such-type"}}}}}),
        ),
        ("response_format", json!({"type": "xml"})),
        ("grammar", json!("start: missing_rule\n")),
        ("regex", json!("(unclosed")),
        ("json_schema", json!("not a schema")),
    ];
    for (key, val) in cases {
        let mut body = json!({"messages": msg, "max_tokens": 4});
        body[key] = val.clone();
        let (st, v) = post(s, "/v1/chat/completions", &body).await;
        assert_eq!(st, 400, "{key}={val}: {v}");
        let param = v["error"]["param"].as_str().unwrap_or("");
        assert!(param.starts_with(key), "{key}: {v}");
        assert!(v["error"]["message"].as_str().unwrap().len() > 10, "{v}");
    }
    let body = json!({"messages": msg, "regex": "a", "grammar": "start: \"a\"\n"});
    let (st, v) = post(s, "/v1/chat/completions", &body).await;
    assert_eq!(st, 400, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("at most one"),
        "{v}"
    );
    // the server still serves
    let (st, _) = post(s, "/v1/chat/completions", &chat("hi", 2)).await;
    assert_eq!(st, 200);
}

fn weather_tools() -> Value {
    json!([{"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30},
            "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city", "unit"]}}},
        {"type": "function", "function": {"name": "get_time",
        "parameters": {"type": "object", "properties": {"tz": {"type": "string", "maxLength": 30}},
            "required": ["tz"]}}}])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_choice_is_enforced_and_streamed_calls_match_the_whole_reply() {
    let s = shared();
    for (choice, allowed) in [
        (json!("required"), &["get_weather", "get_time"][..]),
        (
            json!({"type": "function", "function": {"name": "get_time"}}),
            &["get_time"][..],
        ),
    ] {
        let mut body = chat("What is the weather in Paris?", 120);
        body["tools"] = weather_tools();
        body["tool_choice"] = choice.clone();
        body["temperature"] = json!(0.8);
        body["n"] = json!(3);
        let (st, v) = post(s, "/v1/chat/completions", &body).await;
        assert_eq!(st, 200, "{v}");
        for c in v["choices"].as_array().unwrap() {
            assert_eq!(c["finish_reason"], "tool_calls", "{choice}: {c}");
            assert!(c["message"]["content"].is_null(), "{c}");
            let call = &c["message"]["tool_calls"][0];
            assert_eq!(call["type"], "function");
            let name = call["function"]["name"].as_str().unwrap();
            assert!(allowed.contains(&name), "{choice}: {name}");
            let args: Value =
                serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
            assert!(args.is_object(), "{args}");
        }
    }
    // greedy: the stream's deltas rebuild the non-streamed calls
    let mut body = chat("What is the weather in Rome?", 120);
    body["tools"] = weather_tools();
    body["tool_choice"] = json!("required");
    let (_, whole) = post(s, "/v1/chat/completions", &body).await;
    body["stream"] = json!(true);
    let (events, done) = stream(s, "/v1/chat/completions", &body).await;
    assert!(done);
    let (mut name, mut args, mut finish) = (String::new(), String::new(), Value::Null);
    for e in &events {
        let c = &e["choices"][0];
        if let Some(t) = c["delta"]["tool_calls"].get(0) {
            name += t["function"]["name"].as_str().unwrap_or("");
            args += t["function"]["arguments"].as_str().unwrap_or("");
        }
        if !c["finish_reason"].is_null() {
            finish = c["finish_reason"].clone();
        }
    }
    let call = &whole["choices"][0]["message"]["tool_calls"][0]["function"];
    assert_eq!(
        (name.as_str(), args.as_str()),
        (
            call["name"].as_str().unwrap(),
            call["arguments"].as_str().unwrap()
        )
    );
    assert_eq!(finish, "tool_calls");
    // none: no call, plain content
    body["stream"] = json!(false);
    body["tool_choice"] = json!("none");
    let (st, v) = post(s, "/v1/chat/completions", &body).await;
    assert_eq!(st, 200, "{v}");
    assert!(v["choices"][0]["message"]["tool_calls"].is_null(), "{v}");
    assert_ne!(v["choices"][0]["finish_reason"], "tool_calls");
    // a tool result in the history is taken
    body["tool_choice"] = json!("auto");
    body["messages"] = json!([{"role": "user", "content": "Weather in Rome?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\": \"Rome\", \"unit\": \"celsius\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "20 degrees"}]);
    let (st, v) = post(s, "/v1/chat/completions", &body).await;
    assert_eq!(st, 200, "{v}");
    // a named tool that is not listed, and a grammar beside tools, are 400s
    body["tool_choice"] = json!({"type": "function", "function": {"name": "nope"}});
    let (st, v) = post(s, "/v1/chat/completions", &body).await;
    assert_eq!(
        (st, v["error"]["param"].as_str()),
        (400, Some("tool_choice")),
        "{v}"
    );
    body["tool_choice"] = json!("auto");
    body["regex"] = json!("a+");
    let (st, v) = post(s, "/v1/chat/completions", &body).await;
    assert_eq!(
        (st, v["error"]["param"].as_str()),
        (400, Some("regex")),
        "{v}"
    );
}
