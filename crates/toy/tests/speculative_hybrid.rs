//! Speculative decoding on a hybrid target: drafted tokens it refuses are undone in the
//! recurrent layers by going back to a snapshot taken before the verify pass and taking
//! the kept tokens again, so greedy output equals the target alone (prompt lookup and a
//! draft model, which is a hybrid too), also across chunk-boundary snapshots.

mod common;
#[path = "common/hybrid.rs"]
mod hybrid;
#[path = "common/synthetic.rs"]
mod synthetic;

use std::sync::Arc;
use tinynn::quant::GgmlType;
use toy::gguf::GgufFile;
use toy::infer::generate::{generate, GenerateOptions};
use toy::infer::sampler::{Sampler, SamplerConfig};
use toy::infer::speculative::{generate_speculative, Drafter};
use toy::model::Model;
use toy::tokenizer::Tokenizer;

fn hybrid_chat_model(seed_vocab: &GgufFile, ty: GgmlType) -> Model {
    let mut spec = hybrid::tiny();
    spec.vocab = 49152;
    spec.ctx = 512;
    let bytes = hybrid::chat_gguf(&spec, seed_vocab, ty);
    Model::from_gguf(Arc::new(GgufFile::from_bytes(bytes).unwrap())).unwrap()
}

#[test]
fn greedy_speculation_on_a_hybrid_equals_the_target_alone() {
    let smol = GgufFile::open(&common::model_path()).unwrap();
    let target = hybrid_chat_model(&smol, GgmlType::Q8_0);
    let draft = hybrid_chat_model(&smol, GgmlType::Q4_0);
    let tok = Tokenizer::from_gguf(&target.file).unwrap();
    let prompt = tok
        .encode(&"one two three four five six seven ".repeat(6), true)
        .unwrap();
    let opts = GenerateOptions {
        max_tokens: 120,
        stop: Vec::new(),
        sampler: SamplerConfig::greedy(),
    };
    let mut state = target.new_state(512, 64);
    let plain = generate(&target, &mut state, &tok, &prompt, &opts, |_| {}).unwrap();
    assert_eq!(
        plain.tokens.len(),
        120,
        "the random model should not stop early"
    );
    let mut drafters: Vec<Drafter> = vec![
        Drafter::Ngram { n: 3 },
        Drafter::Model {
            model: &draft,
            state: Box::new(draft.new_state(512, 64)),
            fed: Vec::new(),
            sampler: Box::new(Sampler::new(SamplerConfig::greedy())),
            p_min: 0.0,
        },
    ];
    // drafting up to 6 every round, and as many as the tuner finds fastest
    for tune in [false, true] {
        for (i, d) in drafters.iter_mut().enumerate() {
            let mut state = target.new_state(512, 64);
            let (g, st) = generate_speculative(
                &target,
                &mut state,
                &tok,
                &prompt,
                &opts,
                d,
                6,
                tune,
                None,
                |_| {},
            )
            .unwrap();
            assert_eq!(
                g.tokens, plain.tokens,
                "drafter {i} (tune {tune}) changed the output"
            );
            assert!(st.drafted > 0, "drafter {i} drafted nothing");
            // some refused, so the recurrent layers were rewound
            assert!(st.accepted < st.drafted, "drafter {i}: {st:?}");
            assert_eq!(state.pos(), prompt.len() + g.tokens.len() - 1);
        }
    }
}
