//! Both tokenizers on any text: byte-level BPE (SmolLM2's) gives the text back exactly from
//! its ids' bytes, but for the bytes its vocabulary has no token for (4, 6, 19, 20, 22, 29 and
//! some above 0x7f), which it drops as llama.cpp does; SentencePiece (Gemma-style: byte fallback, user-defined whitespace tokens) gives
//! back every character but spaces in order: as in llama.cpp, `add_space_prefix` puts a space
//! before the text and before each fragment after a user-defined token ("Hello  world" is
//! " Hello" "  " " world"), and a '▁' written in the text comes back as a space.
#![no_main]
mod common;
use libfuzzer_sys::fuzz_target;

/// The bytes SmolLM2's vocabulary has a one-byte token for; byte-level BPE drops the others
/// (as llama.cpp does: 4, 6, 19, 20, 22, 29 and some of 0x80..).
fn present() -> &'static [bool; 256] {
    static P: std::sync::OnceLock<[bool; 256]> = std::sync::OnceLock::new();
    P.get_or_init(|| {
        let tok = common::bpe();
        let mut p = [false; 256];
        for id in 0..tok.vocab_size() as u32 {
            if let [b] = tok.token_bytes(id)[..] {
                p[b as usize] |= !tok.is_special(id);
            }
        }
        p
    })
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    // special tokens written as text become their ids, whose text is the same
    let tok = common::bpe();
    let ids = tok.encode(&text, false).expect("bpe encodes any text");
    let got: Vec<u8> = ids.iter().flat_map(|&id| tok.token_bytes(id)).collect();
    let want: Vec<u8> = text.bytes().filter(|&b| present()[b as usize]).collect();
    assert!(got == want, "bpe round trip: {text:?} -> {ids:?}");
    let spm = common::spm();
    let ids = spm.encode(&text, false).expect("spm encodes any text");
    let back = spm.decode(&ids);
    // a '▁' in the text is a space to SentencePiece (its escape), as in llama.cpp
    let bare = |s: &str| {
        s.chars()
            .filter(|c| *c != ' ' && *c != '▁')
            .collect::<String>()
    };
    assert_eq!(
        bare(&back),
        bare(&text),
        "spm round trip: {text:?} -> {ids:?} -> {back:?}"
    );
});
