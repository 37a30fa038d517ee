//! What the targets share: the default model's tokenizer and chat template, loaded once.
#![allow(dead_code)]

use std::sync::{Arc, OnceLock};
use toy::gguf::GgufFile;

pub fn smollm2() -> &'static Arc<GgufFile> {
    static F: OnceLock<Arc<GgufFile>> = OnceLock::new();
    F.get_or_init(|| {
        let p = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../models/SmolLM2-135M-Instruct.Q4_1.gguf"
        );
        Arc::new(GgufFile::open(std::path::Path::new(p)).expect("scripts/fetch-model.sh first"))
    })
}

pub fn bpe() -> &'static toy::tokenizer::Tokenizer {
    static T: OnceLock<toy::tokenizer::Tokenizer> = OnceLock::new();
    T.get_or_init(|| toy::tokenizer::Tokenizer::from_gguf(smollm2()).expect("tokenizer"))
}

pub fn spm() -> &'static toy::tokenizer::Tokenizer {
    static T: OnceLock<toy::tokenizer::Tokenizer> = OnceLock::new();
    T.get_or_init(|| {
        let p = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../crates/toy/tests/fixtures/spm-small.gguf"
        );
        let f = GgufFile::open(std::path::Path::new(p)).expect("spm fixture");
        toy::tokenizer::Tokenizer::from_gguf(&f).expect("spm tokenizer")
    })
}
