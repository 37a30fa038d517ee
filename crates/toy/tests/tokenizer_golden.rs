//! Golden tests of the tokenizer against llama.cpp on SmolLM2-135M-Instruct: token ids and
//! pieces of the prompts in `shared/golden/smollm2-135m-q4_1.llama.cpp.json`, round trips,
//! the gpl-3.txt token count llama-perplexity saw, and streaming of multi-byte text.

mod common;

use common::{golden, golden_dir, model_path};

use toy::gguf::GgufFile;
use toy::tokenizer::Tokenizer;

fn tokenizer() -> Tokenizer {
    let f = GgufFile::open(&model_path()).expect("open model");
    Tokenizer::from_gguf(&f).expect("tokenizer from gguf")
}

fn ids(v: &serde_json::Value) -> Vec<u32> {
    let arr = v.as_array().expect("array of ids");
    arr.iter().map(|x| x.as_u64().expect("id") as u32).collect()
}

fn strings(v: &serde_json::Value) -> Vec<String> {
    let arr = v.as_array().expect("array of strings");
    arr.iter()
        .map(|x| x.as_str().expect("string").to_string())
        .collect()
}

fn check(tok: &Tokenizer, text: &str, want_ids: &[u32], want_pieces: &[String]) {
    let got = tok.encode(text, true).expect("encode");
    assert_eq!(got, want_ids, "ids of {text:?}");
    let pieces: Vec<String> = got.iter().map(|&id| tok.piece(id)).collect();
    assert_eq!(pieces, want_pieces, "pieces of {text:?}");
    assert_eq!(tok.decode(&got), text, "round trip of {text:?}");
}

#[test]
fn completion_prompts_match_llama_cpp() {
    let tok = tokenizer();
    let g = golden();
    let completions = g["completions"].as_array().expect("completions");
    assert!(!completions.is_empty());
    for c in completions {
        let prompt = c["prompt"].as_str().expect("prompt");
        check(
            &tok,
            prompt,
            &ids(&c["prompt_tokens"]),
            &strings(&c["prompt_pieces"]),
        );
    }
}

#[test]
fn chat_prompts_match_llama_cpp() {
    let tok = tokenizer();
    let g = golden();
    let chats = g["chat"].as_array().expect("chat");
    assert!(!chats.is_empty());
    for c in chats {
        let prompt = c["rendered_prompt"].as_str().expect("rendered_prompt");
        let want_ids = ids(&c["rendered_prompt_tokens"]);
        check(
            &tok,
            prompt,
            &want_ids,
            &strings(&c["rendered_prompt_pieces"]),
        );
    }
}

#[test]
fn gpl3_has_enough_tokens_for_29_perplexity_chunks_and_round_trips() {
    let tok = tokenizer();
    let text = std::fs::read_to_string(golden_dir().join("gpl-3.txt")).expect("gpl-3.txt");
    let ids = tok.encode(&text, false).expect("encode");
    assert!(
        ids.len() >= 29 * 256,
        "{} tokens, llama.cpp had at least 7424",
        ids.len()
    );
    assert_eq!(tok.decode(&ids), text);
}

#[test]
fn special_ids_and_end_of_generation() {
    let tok = tokenizer();
    assert_eq!(tok.vocab_size(), 49152);
    assert_eq!(tok.bos_id(), Some(1));
    assert_eq!(tok.eos_id(), Some(2));
    assert_eq!(tok.token_id("<|im_end|>"), Some(2));
    assert!(
        tok.is_eog(2) && tok.is_eog(0),
        "<|im_end|> and <|endoftext|> end generation"
    );
    assert!(!tok.is_eog(1));
    assert_eq!(
        tok.encode("Hi", true).unwrap(),
        tok.encode("Hi", false).unwrap(),
        "add_bos_token=false"
    );
}

#[test]
fn stream_decoder_never_splits_a_character() {
    let tok = tokenizer();
    let text = "héllo 世界 🦀 naïve café ✓";
    let ids = tok.encode(text, false).expect("encode");
    assert!(
        ids.iter()
            .any(|&id| std::str::from_utf8(&tok.token_bytes(id)).is_err()),
        "want a split char"
    );
    let mut stream = tok.stream_decoder();
    let mut out = String::new();
    for &id in &ids {
        let chunk = stream.push(id);
        assert!(
            !chunk.contains('\u{FFFD}'),
            "broken UTF-8 after id {id}: {chunk:?}"
        );
        out.push_str(&chunk);
    }
    out.push_str(&stream.finish());
    assert_eq!(out, text);
}
