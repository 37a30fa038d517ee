//! A model loaded to draft with (`Model::from_gguf_draft`, speculative decoding) holds its
//! wider matrices in Q4_0: its logits are those of the same model stored so (requantized from
//! the file's values), not those of the file's types; the embedding stays as stored when the
//! head has its own matrix, and is requantized with it when tied. On tiny random models
//! (`common/synthetic.rs`).

#[path = "common/synthetic.rs"]
mod synthetic;

use std::sync::Arc;
use synthetic::{gguf, gguf_with, load, weights, Spec, LLAMA, LLAMA_OUTPUT};
use tinynn::quant::GgmlType::{self, F32, Q4_0, Q4_1, Q8_0};
use toy::gguf::GgufFile;
use toy::model::{Logits, Model};

const TOKENS: [u32; 6] = [3, 17, 42, 8, 0, 29];

fn logits(m: &Model, s: &Spec) -> Vec<f32> {
    let mut state = m.new_state(s.ctx, s.ctx);
    m.forward(&mut state, &TOKENS, Logits::All)
        .unwrap()
        .to_vec()
}

fn draft(bytes: Vec<u8>) -> Model {
    Model::from_gguf_draft(Arc::new(GgufFile::from_bytes(bytes).unwrap()), false).unwrap()
}

/// The draft of `s` stored in `ty`, against `s` stored with the matrices `in_q4` picks in
/// Q4_0 (from the values `ty` holds) and the rest as `ty` holds them (in F32).
fn check(s: &Spec, ty: GgmlType, in_q4: fn(&str) -> bool) {
    let w = weights(s);
    let file = gguf(s, &w, ty);
    let (d, plain) = (
        logits(&draft(file.clone()), s),
        logits(&load(file).unwrap(), s),
    );
    let held = w.dequantized(ty);
    let want = load(gguf_with(s, &held, |n| if in_q4(n) { Q4_0 } else { F32 })).unwrap();
    assert_eq!(
        d,
        logits(&want, s),
        "{}: draft is not the Q4_0 model",
        s.arch
    );
    assert_ne!(d, plain, "{}: nothing was requantized", s.arch);
}

#[test]
fn a_draft_holds_wide_matrices_in_q4_0_but_an_untied_embedding() {
    check(&LLAMA_OUTPUT, Q8_0, |n| n != "token_embd.weight");
}

#[test]
fn a_tied_draft_requantizes_its_embedding_with_its_head() {
    check(&LLAMA, Q8_0, |_| true);
}

#[test]
fn a_draft_in_four_bits_loads_as_stored() {
    let file = gguf(&LLAMA_OUTPUT, &weights(&LLAMA_OUTPUT), Q4_1);
    let d = logits(&draft(file.clone()), &LLAMA_OUTPUT);
    assert_eq!(d, logits(&load(file).unwrap(), &LLAMA_OUTPUT));
}
