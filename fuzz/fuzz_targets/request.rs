//! A chat/completions request body through every check before the model: JSON, messages,
//! tools, response_format / json_schema / grammar / regex (compiled against SmolLM2's
//! vocabulary by llguidance), the sampling fields, n, stop, max_tokens, stream.
#![no_main]
mod common;
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;
use toy::infer::constrain::Grammars;

fn grammars() -> &'static Grammars {
    static G: OnceLock<Grammars> = OnceLock::new();
    G.get_or_init(|| Grammars::new(common::bpe(), common::bpe().vocab_size()).expect("grammars"))
}

fuzz_target!(|data: &[u8]| {
    let _ = toy_serve::api::check_request(data, common::bpe(), Some(grammars()));
});
