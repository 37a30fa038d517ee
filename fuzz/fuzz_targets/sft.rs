//! SFT JSONL records (chat messages, or prompt/completion, or `tokens`) through the model's
//! template and tokenizer into training rows: every row's ids are in the vocabulary and its
//! targets line up with them.
#![no_main]
mod common;
use libfuzzer_sys::fuzz_target;
use std::path::Path;
use std::sync::OnceLock;
use toy::chat_template::ChatTemplate;
use toy::finetune::sft::{parse_jsonl, OnLong};

fn template() -> &'static ChatTemplate {
    static T: OnceLock<ChatTemplate> = OnceLock::new();
    T.get_or_init(|| ChatTemplate::from_gguf(common::smollm2(), None).expect("template"))
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let tok = common::bpe();
    if let Ok(set) = parse_jsonl(
        Path::new("fuzz.jsonl"),
        &text,
        tok,
        Some(template()),
        64,
        OnLong::Skip,
    ) {
        let _ = set;
    }
});
