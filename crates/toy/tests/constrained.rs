//! Constrained decoding on the real model: what a JSON schema, a Lark grammar or a regex
//! allows is all that comes out, greedy or sampled, and a bad constraint is a named error.

mod common;

use toy::chat_template::{ChatMessage, ChatTemplate};
use toy::infer::constrain::{Constraint, Grammars};
use toy::infer::generate::{generate_guided, FinishReason, GenerateOptions, Generation};
use toy::infer::sampler::SamplerConfig;
use toy::model::Model;
use toy::tokenizer::Tokenizer;

struct Fixture {
    model: Model,
    tok: Tokenizer,
    tmpl: ChatTemplate,
    grammars: Grammars,
}

fn fixture() -> Fixture {
    let model = Model::open(&common::model_path()).expect("model loads");
    let tok = Tokenizer::from_gguf(&model.file).expect("tokenizer");
    let tmpl = ChatTemplate::from_gguf(&model.file, None).expect("template");
    let grammars = Grammars::new(&tok, model.cfg.vocab).expect("token table");
    Fixture {
        model,
        tok,
        tmpl,
        grammars,
    }
}

fn run(f: &Fixture, ask: &str, c: &Constraint, sampler: SamplerConfig, max: usize) -> Generation {
    let msgs = [ChatMessage::new("user", ask)];
    let text = f.tmpl.render(&msgs, true).expect("render");
    let prompt = f.tok.encode(&text, true).expect("encode");
    let mut guide = f.grammars.compile(c).expect("compiles");
    let mut state = f.model.new_state(prompt.len() + max + 1, 64);
    let opts = GenerateOptions {
        max_tokens: max,
        stop: Vec::new(),
        sampler,
    };
    generate_guided(
        &f.model,
        &mut state,
        &f.tok,
        &prompt,
        &opts,
        Some(&mut guide),
        |_| {},
    )
    .expect("generates")
}

fn sampled(seed: u64) -> SamplerConfig {
    SamplerConfig {
        temperature: 1.0,
        seed,
        ..SamplerConfig::default()
    }
}

#[test]
fn json_schema_output_parses_and_follows_the_schema_greedy_and_sampled() {
    let f = fixture();
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 20},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "color": {"enum": ["red", "green", "blue"]},
            "tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]{1,8}$"}, "maxItems": 3}
        },
        "required": ["name", "age", "color", "tags"],
        "additionalProperties": false
    });
    let c = Constraint::JsonSchema(schema);
    for (i, sampler) in [SamplerConfig::greedy(), sampled(1), sampled(2), sampled(3)]
        .into_iter()
        .enumerate()
    {
        let g = run(&f, "Describe a person as JSON.", &c, sampler, 200);
        assert_eq!(g.finish_reason, FinishReason::Stop, "try {i}: {}", g.text);
        let v: serde_json::Value = serde_json::from_str(&g.text)
            .unwrap_or_else(|e| panic!("try {i}: not JSON ({e}): {}", g.text));
        let o = v.as_object().expect("an object");
        assert_eq!(o.len(), 4, "{v}");
        assert!(o["name"].as_str().expect("name").chars().count() <= 20);
        let age = o["age"].as_i64().expect("integer age");
        assert!((0..=120).contains(&age), "{v}");
        assert!(["red", "green", "blue"].contains(&o["color"].as_str().expect("color")));
        let tags = o["tags"].as_array().expect("tags");
        assert!(tags.len() <= 3);
        for t in tags {
            let t = t.as_str().expect("tag");
            assert!((1..=8).contains(&t.len()) && t.bytes().all(|b| b.is_ascii_lowercase()));
        }
    }
}

#[test]
fn regex_and_lark_outputs_match_exactly() {
    let f = fixture();
    let ask = "What is the capital of France?";
    let re = Constraint::Regex("[0-9]{3}-[A-Z]{2}".into());
    let g = run(&f, ask, &re, sampled(7), 30);
    let b = g.text.as_bytes();
    assert_eq!(g.finish_reason, FinishReason::Stop, "{}", g.text);
    assert!(b.len() == 6 && b[..3].iter().all(u8::is_ascii_digit) && b[3] == b'-');
    assert!(b[4..].iter().all(u8::is_ascii_uppercase), "{}", g.text);

    let lark = Constraint::Lark(
        "start: \"ANSWER: \" city \"\\n\"\ncity: \"Paris\" | \"Lyon\" | \"Nice\"\n".into(),
    );
    let g = run(&f, ask, &lark, SamplerConfig::greedy(), 30);
    assert!(
        ["ANSWER: Paris\n", "ANSWER: Lyon\n", "ANSWER: Nice\n"].contains(&g.text.as_str()),
        "{:?}",
        g.text
    );
}

#[test]
fn a_cut_before_the_constraint_is_met_ends_with_length() {
    let f = fixture();
    let c = Constraint::JsonSchema(serde_json::json!({
        "type": "object",
        "properties": {"story": {"type": "string", "minLength": 200}},
        "required": ["story"]
    }));
    let g = run(&f, "Tell a story as JSON.", &c, SamplerConfig::greedy(), 12);
    assert_eq!(g.finish_reason, FinishReason::Length);
    assert_eq!(g.tokens.len(), 12);
    assert!(serde_json::from_str::<serde_json::Value>(&g.text).is_err());
}

#[test]
fn constraints_that_do_not_compile_are_named_errors() {
    let f = fixture();
    let cases = [
        (Constraint::Lark("start: foo\n".into()), "the grammar"),
        (Constraint::Regex("[a-".into()), "the regex"),
        (
            Constraint::JsonSchema(serde_json::json!({"type": "nonsense"})),
            "the JSON schema",
        ),
    ];
    for (c, what) in cases {
        let msg = match f.grammars.compile(&c) {
            Ok(_) => panic!("{c:?} compiled"),
            Err(e) => e.to_string(),
        };
        assert!(
            msg.contains(what) && msg.contains("does not compile"),
            "{msg}"
        );
    }
}
