//! GPT-2 in the batched pass (`Model::forward_multi`, the server's continuous batching): its
//! sequences share one pass over the weights like the other families', with each row's
//! learned position its own, and get the logits of decoding each alone (bit for bit where
//! the integer kernels make the products row-exact, as for SmolLM2 in `model_multi.rs`).

#[path = "common/synthetic.rs"]
mod synthetic;

use synthetic::GPT2;
use tinynn::quant::GgmlType;
use toy::infer::kv_cache::KvCache;
use toy::model::Logits;

#[test]
fn gpt2_batched_decode_matches_one_sequence_at_a_time() {
    let model = synthetic::model(&GPT2, GgmlType::Q4_1);
    let prompts: [&[u32]; 3] = [&[3, 17, 42, 0, 49], &[8, 23], &[5, 1, 2, 9, 11, 30, 7]];
    let mut scratch = model.new_state(GPT2.ctx, 8);
    let mut prefill = || -> Vec<KvCache> {
        let mut caches = Vec::new();
        for p in prompts {
            let mut c = model.new_cache(GPT2.ctx);
            model
                .forward_cache(&mut scratch, &mut c, p, Logits::Last)
                .unwrap();
            caches.push(c);
        }
        caches
    };
    let (mut alone, mut together) = (prefill(), prefill());
    let exact = tinynn::kernels::qgemm::has_vnni() && tinynn::kernels::qdot::has_fast_q4_1();
    let v = model.cfg.vocab;
    let mut scratch = model.new_state(GPT2.ctx, 8);
    for step in 0..6u32 {
        let next = [step, 2 * step + 1, 40 - step];
        let mut refs: Vec<&mut KvCache> = together.iter_mut().collect();
        let batch = model
            .forward_multi(&mut scratch, &mut refs, &next)
            .unwrap()
            .to_vec();
        for (i, c) in alone.iter_mut().enumerate() {
            let one = model
                .forward_cache(&mut scratch, c, &[next[i]], Logits::Last)
                .unwrap();
            let row = &batch[i * v..(i + 1) * v];
            let worst = one
                .iter()
                .zip(row)
                .fold(0f32, |a, (x, y)| a.max((x - y).abs()));
            if exact {
                assert_eq!(one, row, "sequence {i} step {step}: batched logits differ");
            }
            assert!(worst < 1e-3, "sequence {i} step {step}: off by {worst}");
        }
    }
    // the positions moved on in every cache: a second sequence is not read at the first's
    for (a, b) in alone.iter().zip(&together) {
        assert_eq!(a.pos, b.pos);
    }
}
