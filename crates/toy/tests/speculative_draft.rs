//! How a draft model drafts (`model_draft`): it goes on past a token only while its top
//! token's probability there was at least p_min; the first unsure token is still proposed
//! (its logits were paid for) but not run through the draft. On SmolLM2, sampling at
//! temperature 1 so that each drafted token comes with the draft's whole distribution.

mod common;

use std::sync::Arc;
use toy::gguf::GgufFile;
use toy::infer::sampler::{Sampler, SamplerConfig};
use toy::infer::speculative::model_draft;
use toy::model::Model;
use toy::tokenizer::Tokenizer;

#[test]
fn a_draft_stops_after_its_first_unsure_token_and_proposes_it() {
    let m = Model::from_gguf(Arc::new(GgufFile::open(&common::model_path()).unwrap())).unwrap();
    let tok = Tokenizer::from_gguf(&m.file).unwrap();
    // a sure continuation for a while, then a choice
    let hist = tok
        .encode(&"one two three four five six seven eight. ".repeat(4), true)
        .unwrap();
    let cfg = SamplerConfig {
        temperature: 1.0,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        ..SamplerConfig::default()
    };
    let k = 12;
    // the draft's test sums the softmax in f32: a little slack either side of p_min
    let eps = 1e-4;
    let (mut sure_rounds, mut short_rounds) = (0, 0);
    for (seed, p_min) in [(1, 0.0), (2, 0.5), (3, 0.9), (4, 0.99), (5, 2.0)] {
        let mut state = m.new_state(512, 64);
        let mut fed = Vec::new();
        let mut sampler = Sampler::new(SamplerConfig {
            seed,
            ..cfg.clone()
        });
        let (out, dists) =
            model_draft(&m, &mut state, &mut fed, &mut sampler, &hist, k, p_min).unwrap();
        let top = |d: &Vec<(u32, f64)>| d.iter().map(|e| e.1).fold(0.0, f64::max);
        assert!(!out.is_empty() && out.len() <= k && dists.len() == out.len());
        // every token but the last was drafted where the draft was sure
        for (i, d) in dists[..out.len() - 1].iter().enumerate() {
            assert!(
                top(d) >= p_min as f64 - eps,
                "p_min {p_min}: token {i} at {}",
                top(d)
            );
        }
        // a short draft ends on an unsure token, which is proposed but not fed to the draft
        let last = top(dists.last().unwrap());
        if out.len() < k {
            assert!(
                last < p_min as f64 + eps,
                "p_min {p_min}: stopped at {last}"
            );
            short_rounds += 1;
        } else {
            sure_rounds += 1;
        }
        assert_eq!(fed.len(), hist.len() + out.len() - 1, "p_min {p_min}");
        assert_eq!(state.pos(), fed.len());
        assert_eq!(fed[hist.len()..], out[..out.len() - 1]);
    }
    // p_min 0 drafts all k, p_min above 1 stops after the first token
    assert!(
        sure_rounds >= 1 && short_rounds >= 2,
        "{sure_rounds} {short_rounds}"
    );
}
