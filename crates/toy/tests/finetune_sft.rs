//! Chat-SFT loss masks on SmolLM2-135M-Instruct's own tokenizer and ChatML template (from its
//! GGUF, `tokenizer.chat_template`): the trained tokens spell exactly the assistant replies
//! and their `<|im_end|>`; every assistant turn of the committed `data/sft` set is in its
//! two-line `ANSWER:` / `CONFIDENCE:` format.

mod common;

use std::path::PathBuf;

use common::model_path;
use toy::chat_template::{ChatMessage, ChatTemplate};
use toy::finetune::sft::{load_jsonl, OnLong, Sample};
use toy::gguf::GgufFile;
use toy::tokenizer::Tokenizer;

fn smollm2() -> (Tokenizer, ChatTemplate) {
    let f = GgufFile::open(&model_path()).expect("open model");
    let tok = Tokenizer::from_gguf(&f).expect("tokenizer");
    let tmpl = ChatTemplate::from_gguf(&f, None).expect("template");
    (tok, tmpl)
}

/// The text of each run of consecutive trained tokens.
fn trained_runs(tok: &Tokenizer, s: &Sample) -> Vec<String> {
    let mut runs: Vec<Vec<u32>> = Vec::new();
    for (i, (&id, &t)) in s.tokens.iter().zip(&s.train).enumerate() {
        match (t, runs.last_mut()) {
            (false, _) => {}
            (true, Some(r)) if s.train[i - 1] => r.push(id),
            (true, _) => runs.push(vec![id]),
        }
    }
    runs.iter().map(|r| tok.decode(r)).collect()
}

fn write_tmp(name: &str, text: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("toy-sft-{}-{name}", std::process::id()));
    std::fs::write(&p, text).expect("write temp jsonl");
    p
}

#[test]
fn smollm2_mask_is_the_assistant_replies_and_im_end() {
    let (tok, tmpl) = smollm2();
    let lines = [
        r#"{"messages":[{"role":"system","content":"You answer tersely."},{"role":"user","content":"What is the capital of France?"},{"role":"assistant","content":"ANSWER: Paris\nCONFIDENCE: high"},{"role":"user","content":"And of Italy?"},{"role":"assistant","content":"Rome, of course."}]}"#,
        r#"{"messages":[{"role":"user","content":"Say hi"},{"role":"assistant","content":" hi there "}]}"#,
    ];
    let path = write_tmp("mask.jsonl", &lines.join("\n"));
    let set = load_jsonl(&path, &tok, Some(&tmpl), 2048, OnLong::Error).expect("load");
    std::fs::remove_file(&path).ok();
    assert_eq!(set.samples.len(), 2);
    assert_eq!(
        trained_runs(&tok, &set.samples[0]),
        [
            "ANSWER: Paris\nCONFIDENCE: high<|im_end|>",
            "Rome, of course.<|im_end|>"
        ]
    );
    assert_eq!(
        trained_runs(&tok, &set.samples[1]),
        [" hi there <|im_end|>"]
    );

    // the tokens are the whole rendering, tokenized once; system, user and headers untrained
    let s = &set.samples[0];
    let messages = serde_json::from_str::<serde_json::Value>(lines[0]).unwrap()["messages"].clone();
    let messages: Vec<ChatMessage> = serde_json::from_value(messages).unwrap();
    let full = tmpl.render(&messages, false).unwrap();
    assert_eq!(s.tokens, tok.encode(&full, true).unwrap());
    let im_end = tok.token_id("<|im_end|>").expect("<|im_end|>");
    let trained_im_ends = s
        .tokens
        .iter()
        .zip(&s.train)
        .filter(|&(&t, &tr)| t == im_end && tr);
    assert_eq!(
        trained_im_ends.count(),
        2,
        "only the assistant turns' <|im_end|>"
    );
    let untrained: String = s
        .tokens
        .iter()
        .zip(&s.train)
        .filter(|&(_, &tr)| !tr)
        .map(|(&t, _)| tok.piece(t))
        .collect();
    for part in [
        "You answer tersely.",
        "capital of France",
        "And of Italy?",
        "<|im_start|>assistant\n",
    ] {
        assert!(untrained.contains(part), "{part:?} must not be trained");
    }
}

#[test]
fn committed_sft_data_loads_on_smollm2() {
    let (tok, tmpl) = smollm2();
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../data/sft");
    for (name, at_least) in [("train.jsonl", 250), ("val.jsonl", 30)] {
        let set = load_jsonl(&dir.join(name), &tok, Some(&tmpl), 512, OnLong::Error)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(
            set.samples.len() >= at_least,
            "{name}: {} samples",
            set.samples.len()
        );
        for s in &set.samples {
            for turn in trained_runs(&tok, s) {
                let reply = turn
                    .strip_suffix("<|im_end|>")
                    .expect("ends with <|im_end|>");
                let (answer, confidence) = reply.split_once('\n').expect("two lines");
                let answer = answer.strip_prefix("ANSWER: ").expect("ANSWER line");
                assert!(!answer.is_empty() && !answer.contains('\n'), "{reply:?}");
                let level = confidence
                    .strip_prefix("CONFIDENCE: ")
                    .expect("CONFIDENCE line");
                assert!(["high", "medium", "low"].contains(&level), "{reply:?}");
            }
        }
    }
}
