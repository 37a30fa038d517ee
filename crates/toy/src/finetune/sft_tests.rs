//! Unit tests of chat-SFT data on a byte-per-token vocabulary (every byte its own token, plus
//! ChatML's control tokens) with SmolLM2-135M-Instruct's ChatML template, so decoded trained
//! tokens show exactly which text carries loss. `tests/finetune_sft.rs` repeats the mask test
//! with the real SmolLM2 tokenizer.

use std::path::Path;

use super::*;
use crate::finetune::sft_batch::SftBatcher;
use crate::tokenizer::{TokenizerSpec, TOKEN_TYPE_CONTROL, TOKEN_TYPE_NORMAL};

/// `tokenizer.chat_template` of SmolLM2-135M-Instruct, as its GGUF holds it.
const SMOLLM2_TEMPLATE: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

const SPECIALS: [&str; 3] = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];

/// Ids 0..3 are the control tokens, 3 + b is byte b (GPT-2's byte-to-unicode alphabet).
fn byte_tokenizer(add_bos: bool) -> Tokenizer {
    let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    let mut tokens: Vec<String> = SPECIALS.map(String::from).to_vec();
    let mut shifted = 0u32;
    for b in 0..=255u8 {
        let c = if printable(b) {
            char::from(b)
        } else {
            shifted += 1;
            char::from_u32(255 + shifted).expect("valid char")
        };
        tokens.push(c.to_string());
    }
    let mut token_types = vec![TOKEN_TYPE_NORMAL; tokens.len()];
    token_types[..3].fill(TOKEN_TYPE_CONTROL);
    Tokenizer::from_spec(TokenizerSpec {
        model: "gpt2".into(),
        pre: Some("smollm".into()),
        tokens,
        token_types,
        merges: Vec::new(),
        bos: Some(1),
        eos: Some(2),
        eot: None,
        add_bos,
        ..TokenizerSpec::default()
    })
    .expect("byte tokenizer builds")
}

fn chatml() -> ChatTemplate {
    ChatTemplate::new(SMOLLM2_TEMPLATE, "<|im_start|>", "<|im_end|>").expect("template")
}

fn parse(
    text: &str,
    template: Option<&ChatTemplate>,
    ctx: usize,
    on_long: OnLong,
) -> Result<SftSet, SftError> {
    parse_jsonl(
        Path::new("d.jsonl"),
        text,
        &byte_tokenizer(false),
        template,
        ctx,
        on_long,
    )
}

/// The text of each run of consecutive trained tokens.
fn trained_runs(tok: &Tokenizer, s: &Sample) -> Vec<String> {
    let mut runs: Vec<Vec<u32>> = Vec::new();
    for (i, (&id, &t)) in s.tokens.iter().zip(&s.train).enumerate() {
        if !t {
            continue;
        }
        match runs.last_mut() {
            Some(r) if i > 0 && s.train[i - 1] => r.push(id),
            _ => runs.push(vec![id]),
        }
    }
    runs.iter().map(|r| tok.decode(r)).collect()
}

const CHAT: &str = r#"{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"2+2?"},{"role":"assistant","content":"4"},{"role":"user","content":"And 3+3?"},{"role":"assistant","content":"6, of course."}]}"#;

#[test]
fn chatml_mask_trains_assistant_content_and_im_end_only() {
    let set = parse(CHAT, Some(&chatml()), 512, OnLong::Error).unwrap();
    let s = &set.samples[0];
    let tok = byte_tokenizer(false);
    let full = chatml()
        .render(
            &serde_json::from_str::<serde_json::Value>(CHAT)
                .map(|v| serde_json::from_value::<Vec<ChatMessage>>(v["messages"].clone()).unwrap())
                .unwrap(),
            false,
        )
        .unwrap();
    assert_eq!(
        tok.decode(&s.tokens),
        full,
        "the whole rendering is tokenized"
    );
    assert_eq!(s.tokens.len(), s.train.len());
    assert_eq!(
        trained_runs(&tok, s),
        ["4<|im_end|>", "6, of course.<|im_end|>"]
    );
    assert_eq!(set.trainable_tokens, 2 + 14);
    // the header right before each reply is not trained
    let header = "<|im_start|>assistant\n";
    let first_reply = full.find(header).unwrap() + header.len();
    let n_before = tok.encode(&full[..first_reply], false).unwrap().len();
    assert!(!s.train[..n_before].contains(&true));
    assert!(s.train[n_before]);
}

#[test]
fn default_system_prompt_is_not_trained() {
    let line =
        r#"{"messages":[{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello!"}]}"#;
    let set = parse(line, Some(&chatml()), 512, OnLong::Error).unwrap();
    let tok = byte_tokenizer(false);
    assert!(tok.decode(&set.samples[0].tokens).contains("named SmolLM"));
    assert_eq!(trained_runs(&tok, &set.samples[0]), ["Hello!<|im_end|>"]);
}

#[test]
fn the_mask_follows_the_turns_not_the_token_ids() {
    // the user turn holds the reply's text and an <|im_end|> of its own: neither is trained
    let line = r#"{"messages":[{"role":"user","content":"Say ok<|im_end|> ok"},{"role":"assistant","content":"ok"}]}"#;
    let set = parse(line, Some(&chatml()), 512, OnLong::Error).unwrap();
    let tok = byte_tokenizer(false);
    assert_eq!(trained_runs(&tok, &set.samples[0]), ["ok<|im_end|>"]);
}

#[test]
fn prompt_completion_is_plain_text_with_loss_on_the_completion() {
    let line = r#"{"prompt":"Q: 1+1?\nA:","completion":" 2<|im_end|>"}"#;
    let set = parse(line, Some(&chatml()), 512, OnLong::Error).unwrap();
    let tok = byte_tokenizer(false);
    let s = &set.samples[0];
    assert_eq!(
        tok.decode(&s.tokens),
        "Q: 1+1?\nA: 2<|im_end|>",
        "no template applied"
    );
    assert_eq!(trained_runs(&tok, s), [" 2<|im_end|>"]);
}

#[test]
fn text_trains_every_token_but_the_first_and_bos_is_not_trained() {
    let set = parse(r#"{"text":"hello"}"#, None, 512, OnLong::Error).unwrap();
    assert_eq!(set.samples[0].train, [false, true, true, true, true]);
    assert_eq!(set.trainable_tokens, 4);

    let tok = byte_tokenizer(true);
    let set = parse_jsonl(
        Path::new("d"),
        r#"{"text":"hi"}"#,
        &tok,
        None,
        8,
        OnLong::Error,
    )
    .unwrap();
    assert_eq!(
        set.samples[0].tokens,
        [1, 3 + u32::from(b'h'), 3 + u32::from(b'i')]
    );
    assert_eq!(set.samples[0].train, [false, true, true]);
}

#[test]
fn tokens_are_taken_as_they_are_with_loss_on_all_but_the_first() {
    // no BOS is added even where the tokenizer asks for one; on_long applies as to text
    let tok = byte_tokenizer(true);
    let load = |text: &str, on_long| parse_jsonl(Path::new("d"), text, &tok, None, 3, on_long);
    let set = load(r#"{"tokens":[5, 0, 258]}"#, OnLong::Error).unwrap();
    assert_eq!(set.samples[0].tokens, [5, 0, 258]);
    assert_eq!(set.samples[0].train, [false, true, true]);
    let set = load(r#"{"tokens":[5, 6, 7, 8, 9]}"#, OnLong::Truncate).unwrap();
    assert_eq!(set.samples[0].tokens, [5, 6, 7, 8]);
    assert_eq!(set.truncated, 1);
}

#[test]
fn on_long_errors_skips_or_truncates() {
    let text = "{\"text\":\"abc\"}\n\n{\"text\":\"abcdefgh\"}\n";
    let err = parse(text, None, 4, OnLong::Error).unwrap_err();
    assert!(
        matches!(
            err,
            SftError::TooLong {
                line: 3,
                len: 8,
                max: 5,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().starts_with("d.jsonl:3: 8 tokens"), "{err}");

    let set = parse(text, None, 4, OnLong::Skip).unwrap();
    assert_eq!(
        (set.samples.len(), set.skipped_long, set.truncated),
        (1, 1, 0)
    );

    let set = parse(text, None, 4, OnLong::Truncate).unwrap();
    assert_eq!(
        (set.samples.len(), set.skipped_long, set.truncated),
        (2, 0, 1)
    );
    assert_eq!(
        byte_tokenizer(false).decode(&set.samples[1].tokens),
        "abcde"
    );
    assert_eq!(set.trainable_tokens, 2 + 4);

    // cut before the completion starts: nothing left to train, so it is dropped
    let pc = r#"{"prompt":"abcdef","completion":"g"}"#;
    let set = parse(
        &format!("{pc}\n{{\"text\":\"ab\"}}"),
        None,
        4,
        OnLong::Truncate,
    )
    .unwrap();
    assert_eq!(
        (set.samples.len(), set.skipped_long, set.truncated),
        (1, 1, 0)
    );
    assert_eq!(
        serde_json::from_str::<OnLong>("\"truncate\"").unwrap(),
        OnLong::Truncate
    );
}

#[test]
fn bad_records_are_errors_that_name_the_line() {
    let t = chatml();
    let ok = r#"{"text":"fine"}"#;
    let cases: &[(&str, &str)] = &[
        ("{\"text\": \"a\"", "malformed JSON"),
        (r#"{"input":"a","output":"b"}"#, "unknown record shape"),
        (
            r#"{"text":"a","prompt":"b","completion":"c"}"#,
            "unknown record shape",
        ),
        (r#"["text"]"#, "not a JSON object"),
        (r#"{"prompt":"a"}"#, "\"completion\" is missing"),
        (
            r#"{"messages":[{"role":"bot","content":"x"}]}"#,
            "role \"bot\"",
        ),
        (r#"{"messages":[{"role":"user"}]}"#, "messages:"),
        (
            r#"{"messages":[{"role":"user","content":"only a question"}]}"#,
            "no token carries loss",
        ),
        (r#"{"prompt":"a","completion":""}"#, "no token carries loss"),
        (r#"{"tokens":[7]}"#, "no token carries loss"),
        (
            r#"{"tokens":[7, 259]}"#,
            "token id 259 is outside the vocabulary",
        ),
        (r#"{"tokens":[7, -1]}"#, "list of token ids"),
        (r#"{"tokens":"7 8"}"#, "list of token ids"),
        (r#"{"tokens":[7, 8],"text":"a"}"#, "unknown record shape"),
    ];
    for (bad, want) in cases {
        let text = format!("{ok}\n{bad}\n{ok}\n");
        let err = parse(&text, Some(&t), 512, OnLong::Error)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("d.jsonl:2: "), "{bad}: {err}");
        assert!(err.contains(want), "{bad}: {err}");
    }
    let err = parse(&format!("{ok}\n{CHAT}"), None, 512, OnLong::Error).unwrap_err();
    assert!(matches!(err, SftError::NoTemplate { line: 2, .. }), "{err}");
    for empty in ["", "\n  \n"] {
        let err = parse(empty, None, 512, OnLong::Error).unwrap_err();
        assert!(matches!(err, SftError::Empty { skipped: 0, .. }), "{err}");
    }
}

#[test]
fn templates_that_cannot_be_split_into_turns_are_errors() {
    let chat = r#"{"messages":[{"role":"user","content":"u"},{"role":"assistant","content":"a"}]}"#;
    // the generation prompt is not how the assistant turn starts
    let src = "{% for m in messages %}{{ m.content }}{% if not loop.last %}|{% endif %}{% endfor %}{% if add_generation_prompt %}>{% endif %}";
    let t = ChatTemplate::new(src, "", "").unwrap();
    let err = parse(chat, Some(&t), 512, OnLong::Error).unwrap_err();
    assert!(
        matches!(
            err,
            SftError::NotPrefix {
                line: 1,
                index: 1,
                ..
            }
        ),
        "{err}"
    );
    // assistant turns render as nothing
    let src = "{% for m in messages %}{% if m.role != 'assistant' %}{{ m.content }}{% endif %}{% endfor %}";
    let t = ChatTemplate::new(src, "", "").unwrap();
    let err = parse(chat, Some(&t), 512, OnLong::Error).unwrap_err();
    assert!(
        matches!(
            err,
            SftError::EmptyTurn {
                line: 1,
                index: 1,
                ..
            }
        ),
        "{err}"
    );
}

/// Samples of lengths 2..=5 whose token ids say their sample and position (10 * s + i),
/// trained on odd positions.
fn toy_set() -> SftSet {
    let samples: Vec<Sample> = (0..4u32)
        .map(|s| {
            let len = s as usize + 2;
            Sample {
                tokens: (0..len as u32).map(|i| 10 * s + i).collect(),
                train: (0..len).map(|i| i % 2 == 1).collect(),
            }
        })
        .collect();
    let trainable_tokens = samples
        .iter()
        .map(|s| s.train.iter().filter(|&&t| t).count())
        .sum();
    SftSet {
        samples,
        skipped_long: 0,
        truncated: 0,
        trainable_tokens,
    }
}

#[test]
fn batcher_rows_are_samples_with_ignore_off_the_trained_targets_and_padding() {
    let set = toy_set();
    let (b, t) = (4, 4);
    let mut batcher = SftBatcher::new(set.samples.len(), 7, b, t);
    let (mut inp, mut tgt) = (vec![0; b * t], vec![0; b * t]);
    let trained = batcher.next(&set, &mut inp, &mut tgt);
    assert_eq!(trained, set.trainable_tokens, "one epoch in one batch");
    let mut seen = Vec::new();
    for row in 0..b {
        let s = (inp[row * t] / 10) as usize;
        seen.push(s);
        let sample = &set.samples[s];
        let n = sample.tokens.len() - 1;
        for i in 0..t {
            let (x, y) = (inp[row * t + i], tgt[row * t + i]);
            if i < n {
                assert_eq!(x, sample.tokens[i]);
                let want = if sample.train[i + 1] {
                    sample.tokens[i + 1]
                } else {
                    IGNORE
                };
                assert_eq!(y, want, "row {row} col {i}");
            } else {
                assert_eq!((x, y), (*sample.tokens.last().unwrap(), IGNORE), "padding");
            }
        }
    }
    seen.sort_unstable();
    assert_eq!(seen, [0, 1, 2, 3], "each sample once per epoch");
}

#[test]
fn batcher_is_seeded_and_resumes_exactly_from_its_state() {
    let set = toy_set();
    let (b, t) = (3, 4);
    let run = |batcher: &mut SftBatcher, steps: usize| -> Vec<Vec<u32>> {
        (0..steps)
            .map(|_| {
                let (mut inp, mut tgt) = (vec![0; b * t], vec![0; b * t]);
                batcher.next(&set, &mut inp, &mut tgt);
                inp.extend(tgt);
                inp
            })
            .collect()
    };
    let n = set.samples.len();
    let a = run(&mut SftBatcher::new(n, 42, b, t), 9);
    assert_eq!(
        a,
        run(&mut SftBatcher::new(n, 42, b, t), 9),
        "same seed, same batches"
    );
    assert_ne!(
        a,
        run(&mut SftBatcher::new(n, 43, b, t), 9),
        "another seed, another order"
    );
    // epochs are reshuffled: the first row's sample is not the same every epoch
    let mut whole = SftBatcher::new(n, 42, n, t);
    let (mut inp, mut tgt) = (vec![0; n * t], vec![0; n * t]);
    let firsts: Vec<u32> = (0..8)
        .map(|_| {
            whole.next(&set, &mut inp, &mut tgt);
            inp[0]
        })
        .collect();
    assert!(firsts.iter().any(|&f| f != firsts[0]), "{firsts:?}");
    assert_eq!(whole.epoch(), 7);

    for split in [1, 4, 5] {
        let mut first = SftBatcher::new(n, 42, b, t);
        let head = run(&mut first, split);
        let mut resumed = SftBatcher::from_state(n, first.state(), b, t);
        assert_eq!(resumed.epoch(), first.epoch());
        let tail = run(&mut resumed, 9 - split);
        assert_eq!([head, tail].concat(), a, "resumed after {split} batches");
    }
}

#[test]
fn in_file_order_draws_the_samples_in_order_every_epoch_and_resumes() {
    let set = toy_set();
    let (b, t, n) = (3, 4, set.samples.len());
    let firsts = |batcher: &mut SftBatcher, steps: usize| -> Vec<u32> {
        let (mut inp, mut tgt) = (vec![0; b * t], vec![0; b * t]);
        (0..steps)
            .flat_map(|_| {
                batcher.next(&set, &mut inp, &mut tgt);
                (0..b).map(|r| inp[r * t] / 10).collect::<Vec<_>>()
            })
            .collect()
    };
    let all = firsts(&mut SftBatcher::new(n, 42, b, t).in_file_order(), 4);
    assert_eq!(all, [0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3]);
    let mut first = SftBatcher::new(n, 42, b, t).in_file_order();
    let head = firsts(&mut first, 1);
    let mut resumed = SftBatcher::from_state(n, first.state(), b, t).in_file_order();
    assert_eq!([head, firsts(&mut resumed, 3)].concat(), all);
}

#[test]
fn packed_rows_hold_whole_samples_with_positions_from_zero_and_resume_exactly() {
    // samples of 2..=5 tokens take 1..=4 positions: rows of 6 hold one to three of them
    let set = toy_set();
    let (b, t, n) = (2, 6, set.samples.len());
    let draw = |batcher: &mut SftBatcher| {
        let (mut inp, mut tgt, mut pos) = (vec![0; b * t], vec![0; b * t], vec![0; b * t]);
        let trained = batcher.next_packed(&set, &mut inp, &mut tgt, &mut pos);
        (inp, tgt, pos, trained)
    };
    let mut batcher = SftBatcher::new(n, 7, b, t);
    let mut all = Vec::new();
    for _ in 0..6 {
        let (inp, tgt, pos, trained) = draw(&mut batcher);
        assert_eq!(trained, tgt.iter().filter(|&&y| y != IGNORE).count());
        for row in 0..b {
            let r = row * t..(row + 1) * t;
            let (inp, tgt, pos) = (&inp[r.clone()], &tgt[r.clone()], &pos[r]);
            assert_eq!(pos[0], 0, "a row starts a sample");
            let mut i = 0;
            while i < t {
                let s = &set.samples[(inp[i] / 10) as usize];
                let l = (s.tokens.len() - 1).min(t - i);
                // (every toy_set sample trains its first target; padding trains none)
                if tgt[i] == IGNORE {
                    // padding: the row's last token again, no loss, its own sample
                    assert!(tgt[i..].iter().all(|&y| y == IGNORE), "{inp:?} {pos:?}");
                    assert!(pos[i..].iter().zip(0..).all(|(p, k)| *p == k), "{pos:?}");
                    break;
                }
                for k in 0..l {
                    assert_eq!((inp[i + k], pos[i + k]), (s.tokens[k], k as u32));
                    let want = if s.train[k + 1] {
                        s.tokens[k + 1]
                    } else {
                        IGNORE
                    };
                    assert_eq!(tgt[i + k], want, "{inp:?}");
                }
                all.push(inp[i] / 10);
                i += l;
            }
        }
    }
    assert!(all.len() > 6 * b + 3, "rows hold several samples: {all:?}");
    // every sample once per pass, in shuffled order, none lost where a row was full
    for pass in all.chunks(n).filter(|c| c.len() == n) {
        let mut p = pass.to_vec();
        p.sort_unstable();
        assert_eq!(p, [0, 1, 2, 3], "{all:?}");
    }
    // resuming from the state mid-way draws the same batches
    let mut first = SftBatcher::new(n, 7, b, t);
    let head: Vec<_> = (0..3).map(|_| draw(&mut first)).collect();
    let mut resumed = SftBatcher::from_state(n, first.state(), b, t);
    let tail: Vec<_> = (0..3).map(|_| draw(&mut resumed)).collect();
    let mut whole = SftBatcher::new(n, 7, b, t);
    let want: Vec<_> = (0..6).map(|_| draw(&mut whole)).collect();
    assert_eq!([head, tail].concat(), want);
}
