//! `eval::choice` (llama-perplexity's `--hellaswag` scoring): the JSON-lines parser names bad
//! lines, the shared prefix is skipped, and on a tiny random model (`common/synthetic.rs`)
//! the ending that is the model's own greedy continuation scores highest; on SmolLM2 (the
//! default model, see common/mod.rs) the committed set `data/choice/easy-40.jsonl` scores
//! well above chance.

mod common;
#[path = "common/synthetic.rs"]
mod synthetic;

use synthetic::{model, LLAMA};
use tinynn::quant::GgmlType;
use toy::eval::choice::{evaluate, parse_items, pick, score_endings, ChoiceError, ChoiceTokens};
use toy::model::Logits;

#[test]
fn bad_lines_are_errors_naming_the_line() {
    let good = r#"{"context": "a", "endings": ["b", "c"], "label": 1}"#;
    for (bad, want) in [
        (
            r#"{"context": "a", "endings": ["b", "c"]}"#,
            "missing field `label`",
        ),
        (
            r#"{"context": "a", "endings": ["b"], "label": 0}"#,
            "1 endings, expected at least 2",
        ),
        (
            r#"{"context": "a", "endings": ["b", "c"], "label": 2}"#,
            "label 2 out of range",
        ),
        (
            r#"{"context": "a", "endings": ["b", " "], "label": 0}"#,
            "ending 1 is empty",
        ),
        ("not json", "expected {\"context\""),
    ] {
        let text = format!("{good}\n\n{bad}\n{good}\n");
        let e = parse_items(&text).expect_err(bad);
        let msg = e.to_string();
        assert!(
            msg.starts_with("line 3: ") && msg.contains(want),
            "{bad}: {msg}"
        );
    }
    assert!(matches!(parse_items("\n \n"), Err(ChoiceError::Empty)));
    let items = parse_items(&format!("{good}\n{good}")).expect("good lines");
    assert_eq!((items.len(), items[1].line, items[1].label), (2, 2, 1));
}

#[test]
fn shared_prefix_is_skipped_but_one_token_is_kept() {
    let t = ChoiceTokens::new(vec![vec![1, 2, 3, 4], vec![1, 2, 3, 5, 6]], 1).unwrap();
    assert_eq!(t.prefix, 3);
    // one ending is a prefix of the other: it keeps its last token to score
    let t = ChoiceTokens::new(vec![vec![1, 2, 3], vec![1, 2, 3, 4]], 1).unwrap();
    assert_eq!(t.prefix, 2);
    let e = ChoiceTokens::new(vec![vec![1, 2], vec![3, 2]], 7)
        .err()
        .unwrap();
    assert!(e.to_string().starts_with("line 7: "), "{e}");
}

#[test]
fn greedy_continuation_scores_highest() {
    let m = model(&LLAMA, GgmlType::F32);
    let context = [3u32, 17, 42, 8];
    let mut state = m.new_state(16, 16);
    let logits = m
        .forward(&mut state, &context, Logits::Last)
        .unwrap()
        .to_vec();
    let greedy = pick(&logits.iter().map(|&x| f64::from(x)).collect::<Vec<_>>()) as u32;
    // single-token endings: the greedy one has the highest log-probability by definition
    let endings = [
        (greedy + 7) % 50,
        greedy,
        (greedy + 13) % 50,
        (greedy + 29) % 50,
    ];
    let seqs = endings
        .iter()
        .map(|&e| context.iter().copied().chain([e]).collect())
        .collect();
    let t = ChoiceTokens::new(seqs, 1).unwrap();
    assert_eq!(t.prefix, context.len());
    let scores = score_endings(&m, &mut state, &t).unwrap();
    assert_eq!(pick(&scores), 1, "{scores:?}");
    let lse = tinynn::kernels::act::log_sum_exp(&logits);
    assert!((scores[1] - (f64::from(logits[greedy as usize]) - lse)).abs() < 1e-4);
    // a longer ending scores the mean log-probability of its tokens after the shared prefix
    let mut two = context.to_vec();
    two.push(greedy);
    state.reset();
    let l2 = m.forward(&mut state, &two, Logits::Last).unwrap().to_vec();
    let g2 = pick(&l2.iter().map(|&x| f64::from(x)).collect::<Vec<_>>()) as u32;
    let other = [context.to_vec(), vec![(greedy + 7) % 50, 5]].concat();
    let t = ChoiceTokens::new(vec![other, [two, vec![g2]].concat()], 1).unwrap();
    assert_eq!(t.prefix, context.len());
    let scores = score_endings(&m, &mut state, &t).unwrap();
    let want = 0.5 * (scores_one(&logits, greedy) + scores_one(&l2, g2));
    assert!((scores[1] - want).abs() < 1e-4, "{} vs {want}", scores[1]);
}

/// log softmax(logits)[id].
fn scores_one(logits: &[f32], id: u32) -> f64 {
    f64::from(logits[id as usize]) - tinynn::kernels::act::log_sum_exp(logits)
}

#[test]
fn easy_set_scores_well_above_chance_on_smollm2() {
    let path = common::model_path();
    let f = std::sync::Arc::new(toy::gguf::GgufFile::open(&path).expect("gguf"));
    let tok = toy::tokenizer::Tokenizer::from_gguf(&f).expect("tokenizer");
    let m = toy::model::Model::from_gguf(f).expect("model");
    let set = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../data/choice/easy-40.jsonl"
    );
    let items = parse_items(&std::fs::read_to_string(set).expect("easy-40.jsonl")).unwrap();
    assert_eq!(items.len(), 40);
    let r = evaluate(&m, &tok, &items, |_, _, _| {}).expect("evaluate");
    eprintln!(
        "accuracy {:.3} +/- {:.3}, chance {:.3}",
        r.accuracy, r.stderr, r.chance
    );
    assert_eq!(r.chance, 0.25);
    assert!((r.stderr - (r.accuracy * (1.0 - r.accuracy) / 40.0).sqrt()).abs() < 1e-12);
    assert!(r.accuracy >= 0.75, "accuracy {} on an easy set", r.accuracy);
}
