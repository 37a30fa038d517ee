//! Golden tests of chat templates against llama.cpp on SmolLM2-135M-Instruct: the rendered
//! prompt of each chat in `shared/golden/smollm2-135m-q4_1.llama.cpp.json`, byte for byte,
//! and the errors for a missing or broken template.

mod common;

use common::{golden, model_path};
use toy::chat_template::{ChatMessage, ChatTemplate, TemplateError};
use toy::gguf::{GgufFile, GgufWriter, Value, ValueType};

fn model() -> GgufFile {
    GgufFile::open(&model_path()).expect("open model")
}

/// A GGUF with a three-token vocabulary and, optionally, a chat template.
fn tiny_gguf(template: Option<&str>) -> GgufFile {
    let mut w = GgufWriter::new();
    let tokens = ["<s>", "</s>", "a"]
        .map(|t| Value::String(t.into()))
        .to_vec();
    w.add_metadata(
        "tokenizer.ggml.tokens",
        Value::Array(ValueType::String, tokens),
    );
    w.add_metadata("tokenizer.ggml.bos_token_id", Value::U32(0));
    w.add_metadata("tokenizer.ggml.eos_token_id", Value::U32(1));
    if let Some(t) = template {
        w.add_metadata("tokenizer.chat_template", Value::String(t.into()));
    }
    let mut bytes = Vec::new();
    w.write_to(&mut bytes).expect("write gguf");
    GgufFile::from_bytes(bytes).expect("read gguf")
}

#[test]
fn golden_chats_render_byte_for_byte() {
    let f = model();
    let g = golden();
    assert_eq!(
        f.get_str("tokenizer.chat_template"),
        g["meta"]["chat_template"].as_str(),
        "the model's template is the one llama.cpp used"
    );
    let tmpl = ChatTemplate::from_gguf(&f, None).expect("model template");
    let chats = g["chat"].as_array().expect("chat");
    assert!(!chats.is_empty());
    for c in chats {
        let messages: Vec<ChatMessage> =
            serde_json::from_value(c["messages"].clone()).expect("messages");
        let want = c["rendered_prompt"].as_str().expect("rendered_prompt");
        assert_eq!(tmpl.render(&messages, true).expect("render"), want);
    }
}

#[test]
fn system_message_replaces_the_default_and_no_generation_prompt_without_asking() {
    let tmpl = ChatTemplate::from_gguf(&model(), None).expect("model template");
    let messages = [
        ChatMessage::new("system", "Be brief."),
        ChatMessage::new("user", "Hi"),
    ];
    let want = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n";
    assert_eq!(tmpl.render(&messages, false).unwrap(), want);
}

#[test]
fn no_template_and_no_override_is_missing() {
    let err = ChatTemplate::from_gguf(&tiny_gguf(None), None)
        .err()
        .expect("must fail");
    assert!(matches!(err, TemplateError::Missing), "{err:?}");
    assert!(err.to_string().contains("--chat-template"), "{err}");
}

#[test]
fn override_wins_and_bos_eos_come_from_the_vocabulary() {
    let f = tiny_gguf(Some("model's own"));
    let tmpl = ChatTemplate::from_gguf(
        &f,
        Some("{{ bos_token }}{{ messages[0].content }}{{ eos_token }}"),
    )
    .expect("override");
    assert_eq!(
        tmpl.render(&[ChatMessage::new("user", "x")], false)
            .unwrap(),
        "<s>x</s>"
    );
    let own = ChatTemplate::from_gguf(&f, None).expect("model's template");
    assert_eq!(own.render(&[], true).unwrap(), "model's own");
}

#[test]
fn syntax_error_is_reported_clearly() {
    let err = ChatTemplate::new("{% for m in messages %}{{ m.content }}", "", "")
        .err()
        .expect("must fail");
    assert!(matches!(err, TemplateError::Syntax(_)), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.starts_with("chat template does not parse") && msg.contains("unexpected end of input"),
        "{msg}"
    );
}
