//! SentencePiece tokenization against llama.cpp's: ids recorded with `llama-tokenize`
//! (scripts/make-spm-fixture.py) for 40 strings (unicode, code, runs of spaces and newlines,
//! byte fallback, control bytes, special tokens written as text), on a 3134-piece vocabulary
//! cut from Gemma 3's with `add_space_prefix` on (Llama 2 / Mistral style, in git), and on
//! Gemma 3 270M itself (when `scripts/fetch-gemma.sh` has fetched it); and decoding back.

use serde_json::Value;
use std::path::Path;
use toy::gguf::GgufFile;
use toy::tokenizer::Tokenizer;

fn fixture(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// Every case's ids as llama.cpp's; returns the cases.
fn check(model: &Path, ids_file: &str) -> (Tokenizer, Vec<(String, Vec<u32>)>) {
    let f = GgufFile::open(model).expect("open the vocabulary");
    let tok = Tokenizer::from_gguf(&f).expect("a SentencePiece tokenizer");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(fixture(ids_file)).expect("ids"))
        .expect("json");
    let cases: Vec<(String, Vec<u32>)> = v["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .map(|c| {
            let ids = c["ids"].as_array().expect("ids").iter();
            let ids = ids.map(|i| i.as_u64().expect("id") as u32).collect();
            (c["text"].as_str().expect("text").to_string(), ids)
        })
        .collect();
    assert!(cases.len() >= 30);
    let mut bad = Vec::new();
    for (text, want) in &cases {
        let got = tok.encode(text, true).expect("encode");
        if &got != want {
            bad.push(format!("{text:?}\n  toy   {got:?}\n  llama {want:?}"));
        }
    }
    assert!(
        bad.is_empty(),
        "{} of {} differ:\n{}",
        bad.len(),
        cases.len(),
        bad.join("\n")
    );
    (tok, cases)
}

#[test]
fn small_spm_vocabulary_with_space_prefix_tokenizes_as_llama_cpp() {
    let (tok, cases) = check(&fixture("spm-small.gguf"), "spm-small-ids.json");
    // decoding gives the text back, after the space the prefix added
    for (text, ids) in &cases {
        if ids[1..].iter().any(|&i| tok.is_special(i)) || text.is_empty() {
            continue;
        }
        assert_eq!(tok.decode(&ids[1..]), format!(" {text}"), "{ids:?}");
    }
}

#[test]
fn gemma3_tokenizes_as_llama_cpp_and_decodes_back() {
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/gemma-3-270m-q4_k_m.gguf");
    if !model.is_file() {
        eprintln!(
            "skipped: {} is missing (scripts/fetch-gemma.sh fetches it)",
            model.display()
        );
        return;
    }
    let (tok, cases) = check(&model, "gemma3-spm-ids.json");
    for (text, ids) in &cases {
        assert_eq!(&tok.decode(&ids[1..]), text, "{ids:?}");
    }
}
