//! Several sequences decoded together (`Model::forward_multi`, what the server's continuous
//! batching runs on) give the logits of decoding each sequence on its own.

mod common;

use toy::infer::kv_cache::KvCache;
use toy::infer::sampler::argmax;
use toy::model::{Logits, Model, ModelError};

/// Prefill each prompt into its own cache through one shared scratch state.
fn prefill(
    model: &Model,
    scratch: &mut toy::model::State,
    prompts: &[Vec<u32>],
) -> (Vec<KvCache>, Vec<u32>) {
    let mut caches = Vec::new();
    let mut next = Vec::new();
    for p in prompts {
        let mut c = model.new_cache(128);
        let logits = model
            .forward_cache(scratch, &mut c, p, Logits::Last)
            .expect("prefill");
        next.push(argmax(logits));
        caches.push(c);
    }
    (caches, next)
}

#[test]
fn batched_decode_matches_one_sequence_at_a_time() {
    let model = Model::open(&common::model_path()).expect("model loads");
    let prompts: Vec<Vec<u32>> = vec![
        vec![1, 504, 3458, 282, 4649, 314],
        vec![1, 19556, 28, 638, 359, 346, 47, 216, 198, 1052, 30],
        vec![1, 2058, 1345],
    ];
    let mut scratch = model.new_state(128, 8);
    let (mut alone, mut alone_next) = prefill(&model, &mut scratch, &prompts);
    let (mut together, mut together_next) = prefill(&model, &mut scratch, &prompts);
    let exact = tinynn::kernels::qgemm::has_vnni() && tinynn::kernels::qdot::has_fast_q4_1();
    let v = model.cfg.vocab;
    for step in 0..8 {
        let mut refs: Vec<&mut KvCache> = together.iter_mut().collect();
        let batch = model
            .forward_multi(&mut scratch, &mut refs, &together_next)
            .expect("batched step")
            .to_vec();
        assert_eq!(batch.len(), prompts.len() * v);
        for (i, c) in alone.iter_mut().enumerate() {
            let one = model
                .forward_cache(&mut scratch, c, &[alone_next[i]], Logits::Last)
                .expect("single step");
            let row = &batch[i * v..(i + 1) * v];
            if exact {
                assert_eq!(one, row, "sequence {i}, step {step}: batched logits differ");
            } else {
                let worst = one
                    .iter()
                    .zip(row)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0.0, f32::max);
                assert!(worst < 0.5, "sequence {i}, step {step}: off by {worst}");
            }
            alone_next[i] = argmax(one);
            together_next[i] = argmax(row);
        }
        for (a, b) in alone.iter().zip(&together) {
            assert_eq!(a.pos, b.pos);
        }
    }
}

#[test]
fn batched_decode_rejects_mismatched_shapes() {
    let model = Model::open(&common::model_path()).expect("model loads");
    let mut scratch = model.new_state(64, 2);
    let (mut a, mut b, mut c) = (
        model.new_cache(64),
        model.new_cache(64),
        model.new_cache(64),
    );
    let mut three: Vec<&mut KvCache> = vec![&mut a, &mut b, &mut c];
    let err = model
        .forward_multi(&mut scratch, &mut three, &[1, 1, 1])
        .unwrap_err();
    assert!(
        matches!(err, ModelError::BatchShape { n_batch: 2, .. }),
        "{err}"
    );
    let mut two: Vec<&mut KvCache> = vec![&mut a, &mut b];
    let err = model
        .forward_multi(&mut scratch, &mut two, &[1])
        .unwrap_err();
    assert!(
        matches!(
            err,
            ModelError::BatchShape {
                tokens: 1,
                caches: 2,
                ..
            }
        ),
        "{err}"
    );
    let mut full = model.new_cache(1);
    model
        .forward_cache(&mut scratch, &mut full, &[1], Logits::Last)
        .expect("fits");
    let mut one: Vec<&mut KvCache> = vec![&mut full];
    let err = model
        .forward_multi(&mut scratch, &mut one, &[1])
        .unwrap_err();
    assert!(matches!(err, ModelError::ContextOverflow { .. }), "{err}");
}
