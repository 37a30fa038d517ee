//! Unit tests on a hand-made vocabulary: merge order, special tokens, pre-tokenizer choice.

use super::*;

const TOKENS: &[&str] = &[
    "<|endoftext|>", // 0, control
    "<|im_start|>",  // 1, control
    "<|im_end|>",    // 2, control
    "a",
    "b",
    "c",
    "Ġ",
    "1",
    "2",
    "3", // 3..=9: single bytes
    "ab",
    "abc",
    "Ġa",
    "12", // 10..=13: merge results
    "Ã",
    "©", // 14, 15: the two bytes of "é" (C3 A9)
];

fn spec(pre: &str) -> TokenizerSpec {
    let mut token_types = vec![TOKEN_TYPE_NORMAL; TOKENS.len()];
    token_types[..3].fill(TOKEN_TYPE_CONTROL);
    TokenizerSpec {
        model: "gpt2".into(),
        pre: Some(pre.into()),
        tokens: TOKENS.iter().map(|t| t.to_string()).collect(),
        token_types,
        merges: ["a b", "ab c", "Ġ a", "1 2", "x y"]
            .map(String::from)
            .to_vec(),
        bos: Some(1),
        eos: Some(2),
        eot: None,
        add_bos: false,
        ..TokenizerSpec::default()
    }
}

fn tok(pre: &str) -> Tokenizer {
    Tokenizer::from_spec(spec(pre)).expect("tiny tokenizer builds")
}

#[test]
fn merges_apply_in_rank_order() {
    let t = tok("gpt2");
    assert_eq!(t.encode("abc", false).unwrap(), [11]);
    assert_eq!(t.encode("ab a", false).unwrap(), [10, 12]);
    assert_eq!(t.encode("cab", false).unwrap(), [5, 10]);
    assert_eq!(t.encode("ba", false).unwrap(), [4, 3]);
}

#[test]
fn special_tokens_in_text_become_their_ids() {
    let t = tok("gpt2");
    let ids = t.encode("a<|im_start|>b<|im_end|>", false).unwrap();
    assert_eq!(ids, [3, 1, 4, 2]);
    assert_eq!(t.decode(&ids), "a<|im_start|>b<|im_end|>");
    assert_eq!(t.piece(1), "<|im_start|>");
}

#[test]
fn smollm_splits_digits_one_by_one_but_gpt2_does_not() {
    assert_eq!(tok("smollm").encode("123", false).unwrap(), [7, 8, 9]);
    assert_eq!(tok("gpt2").encode("123", false).unwrap(), [13, 9]);
}

#[test]
fn unknown_pre_name_lists_the_known_ones() {
    let err = Tokenizer::from_spec(spec("no-such-pre"))
        .err()
        .expect("must fail");
    let msg = err.to_string();
    assert!(
        msg.contains("no-such-pre") && msg.contains("smollm") && msg.contains("llama3"),
        "{msg}"
    );
}

#[test]
fn unsupported_model_is_an_error() {
    let mut s = spec("gpt2");
    s.model = "ugm".into();
    let err = Tokenizer::from_spec(s).err().expect("must fail");
    let msg = err.to_string();
    assert!(
        msg.contains("\"ugm\"") && msg.contains("\"llama\" (SentencePiece)"),
        "{msg}"
    );
}

#[test]
fn special_id_out_of_range_is_an_error() {
    let mut s = spec("gpt2");
    s.eos = Some(999);
    assert!(matches!(
        Tokenizer::from_spec(s),
        Err(TokenizerError::IdOutOfRange { id: 999, .. })
    ));
}

#[test]
fn bos_only_when_asked_and_the_model_wants_it() {
    assert_eq!(tok("gpt2").encode("a", true).unwrap(), [3]);
    let mut s = spec("gpt2");
    s.add_bos = true;
    let t = Tokenizer::from_spec(s).unwrap();
    assert_eq!(t.encode("a", true).unwrap(), [1, 3]);
    assert_eq!(t.encode("a", false).unwrap(), [3]);
}

#[test]
fn out_of_range_ids_decode_to_nothing() {
    let t = tok("gpt2");
    assert_eq!(t.decode(&[3, 12345, u32::MAX, 4]), "ab");
    assert!(t.token_bytes(12345).is_empty());
    assert_eq!(t.piece(u32::MAX), "");
}

#[test]
fn eog_covers_eos_and_known_end_texts() {
    let t = tok("gpt2");
    assert!(t.is_eog(2) && t.is_eog(0));
    assert!(!t.is_eog(1) && !t.is_eog(3) && !t.is_eog(u32::MAX));
    assert_eq!(t.token_id("Ġa"), Some(12));
    assert_eq!(t.vocab_size(), TOKENS.len());
}

#[test]
fn byte_level_tokens_decode_to_raw_bytes() {
    let t = tok("gpt2");
    assert_eq!(t.token_bytes(6), b" ");
    assert_eq!(t.token_bytes(14), [0xC3]);
    assert_eq!(t.encode("é", false).unwrap(), [14, 15]);
    assert_eq!(t.decode(&[14, 15]), "é");
}

#[test]
fn stream_decoder_holds_back_half_characters() {
    let t = tok("gpt2");
    let mut s = t.stream_decoder();
    assert_eq!(s.push(3), "a");
    assert_eq!(s.push(14), "");
    assert_eq!(s.push(15), "é");
    assert_eq!(s.push(15), "\u{FFFD}");
    assert_eq!(s.push(14), "");
    assert_eq!(s.finish(), "\u{FFFD}");
    assert_eq!(s.finish(), "");
}
