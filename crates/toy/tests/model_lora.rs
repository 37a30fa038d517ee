//! LoRA adapters run unmerged, per sequence (`Model::add_lora`, the `_lora` forward calls
//! that `toy serve` uses): on tiny random F32 models (`common/synthetic.rs`) they give the
//! merged model's logits (`merged_gguf`), in prefill and in batched decode, and a batch that
//! mixes sequences with and without adapters gives each its logits alone.

#[path = "common/synthetic.rs"]
mod synthetic;

use std::sync::Arc;
use synthetic::{gguf, weights, Rng, Spec, GPT2, LLAMA, LLAMA3, QWEN2, QWEN3};
use tinynn::quant::GgmlType;
use toy::finetune::adapter::{LoraAdapter, LoraTensor};
use toy::finetune::merge::merged_gguf;
use toy::gguf::GgufFile;
use toy::infer::kv_cache::KvCache;
use toy::model::{Logits, Model, ModelError};

const TOKENS: [u32; 8] = [3, 17, 42, 0, 49, 8, 23, 5];

fn lora_tensor(r: &mut Rng, base: String, n_in: usize, n_out: usize, rank: usize) -> LoraTensor {
    LoraTensor {
        base,
        n_in,
        n_out,
        rank,
        a: (0..rank * n_in).map(|_| 0.3 * r.next()).collect(),
        // nonzero B (a fresh LoRA has B = 0 and changes nothing)
        b: (0..n_out * rank).map(|_| 0.3 * r.next()).collect(),
    }
}

/// An adapter on every block matrix of every layer of `s`, rank 4 (3 on the MLP).
fn adapter(s: &Spec, seed: u64, alpha: f32) -> LoraAdapter {
    let mut r = Rng(seed);
    let (c, q, kv, ff) = (s.c, s.n_head * s.d, s.n_kv * s.d, s.ff);
    let mut tensors = Vec::new();
    let parts: &[(&str, usize, usize, usize)] = if s.arch == "gpt2" {
        &[
            ("attn_qkv", c, 3 * c, 4),
            ("attn_output", c, c, 4),
            ("ffn_up", c, ff, 3),
            ("ffn_down", ff, c, 3),
        ]
    } else {
        &[
            ("attn_q", c, q, 4),
            ("attn_k", c, kv, 4),
            ("attn_v", c, kv, 4),
            ("attn_output", q, c, 4),
            ("ffn_gate", c, ff, 3),
            ("ffn_up", c, ff, 3),
            ("ffn_down", ff, c, 3),
        ]
    };
    for i in 0..s.n_layer {
        for &(name, n_in, n_out, rank) in parts {
            let base = format!("blk.{i}.{name}.weight");
            tensors.push(lora_tensor(&mut r, base, n_in, n_out, rank));
        }
    }
    LoraAdapter {
        arch: s.arch.into(),
        alpha,
        tensors,
    }
}

fn base_file(s: &Spec) -> Arc<GgufFile> {
    Arc::new(GgufFile::from_bytes(gguf(s, &weights(s), GgmlType::F32)).expect("base gguf"))
}

fn merged(s: &Spec, loras: &[(&LoraAdapter, f32)]) -> Model {
    let f = merged_gguf(&base_file(s), loras).expect("merge");
    Model::from_gguf(Arc::new(f)).expect("merged model")
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()))
}

/// max_diff relative to the largest |logit| of `b` (at least 1): f32 rounding grows with
/// the logits, and GPT-2's random ones run larger than the others'.
fn rel_diff(a: &[f32], b: &[f32]) -> f32 {
    max_diff(a, b) / b.iter().fold(1f32, |m, x| m.max(x.abs()))
}

/// Logits (T, V) of TOKENS prefilled with `picks` on every token.
fn prefill(m: &Model, picks: &[(usize, f32)]) -> Vec<f32> {
    let mut s = m.new_state(16, 16);
    let mut c = m.new_cache(16);
    m.forward_cache_lora(&mut s, &mut c, &TOKENS, Logits::All, picks)
        .expect("prefill")
        .to_vec()
}

#[test]
fn unmerged_adapter_at_a_scale_gives_the_merged_models_logits() {
    for s in [LLAMA, QWEN2, QWEN3, LLAMA3, GPT2] {
        let (ad, ad2) = (adapter(&s, 11, 8.0), adapter(&s, 12, 0.0));
        let mut m = Model::from_gguf(base_file(&s)).expect("base");
        assert_eq!(m.add_lora(&ad).expect("adapter fits"), 0);
        assert_eq!(m.add_lora(&ad2).expect("adapter fits"), 1);
        let plain = prefill(&m, &[]);
        for scale in [1.0, 0.4] {
            let want = prefill(&merged(&s, &[(&ad, scale)]), &[]);
            let got = prefill(&m, &[(0, scale)]);
            let d = rel_diff(&got, &want);
            assert!(d < 5e-4, "{} scale {scale}: relative |diff| {d}", s.arch);
            assert!(max_diff(&got, &plain) > 1e-2, "the adapter matters");
        }
        // two adapters on one sequence add up, as merging both does
        let want = prefill(&merged(&s, &[(&ad, 0.7), (&ad2, 1.3)]), &[]);
        let got = prefill(&m, &[(0, 0.7), (1, 1.3)]);
        assert!(rel_diff(&got, &want) < 5e-4, "{}: two adapters", s.arch);
        // scale 0 is the base, bit for bit
        assert_eq!(prefill(&m, &[(0, 0.0)]), plain);
    }
}

/// Prefill TOKENS[..5] into a cache with `picks`, then decode TOKENS[5..] one at a time;
/// returns the logits of each decode step.
fn decode_alone(m: &Model, picks: &[(usize, f32)]) -> Vec<Vec<f32>> {
    let mut s = m.new_state(16, 16);
    let mut c = m.new_cache(16);
    m.forward_cache_lora(&mut s, &mut c, &TOKENS[..5], Logits::Last, picks)
        .expect("prefill");
    TOKENS[5..]
        .iter()
        .map(|&t| {
            m.forward_cache_lora(&mut s, &mut c, &[t], Logits::Last, picks)
                .expect("step")
                .to_vec()
        })
        .collect()
}

#[test]
fn a_batch_mixing_adapters_gives_each_sequence_its_logits_alone() {
    // GPT-2 too: its sequences share the batched pass like the others'
    for s in [LLAMA, GPT2] {
        batch_mixing_adapters(s);
    }
}

fn batch_mixing_adapters(s: Spec) {
    let (ad, ad2) = (adapter(&s, 21, 8.0), adapter(&s, 22, 4.0));
    let mut m = Model::from_gguf(base_file(&s)).expect("base");
    m.add_lora(&ad).expect("fits");
    m.add_lora(&ad2).expect("fits");
    let picks: [&[(usize, f32)]; 4] = [&[(0, 1.0)], &[], &[(0, 1.0)], &[(1, 0.5), (0, 0.2)]];
    let alone: Vec<Vec<Vec<f32>>> = picks.iter().map(|p| decode_alone(&m, p)).collect();
    // and the adapted decode is the merged model's decode
    let want = decode_alone(&merged(&s, &[(&ad, 1.0)]), &[]);
    for (a, b) in alone[0].iter().zip(&want) {
        let d = rel_diff(a, b);
        assert!(d < 5e-4, "{}: decode vs merged by {d}", s.arch);
    }

    let mut scratch = m.new_state(16, 16);
    let mut caches: Vec<KvCache> = picks
        .iter()
        .map(|p| {
            let mut c = m.new_cache(16);
            m.forward_cache_lora(&mut scratch, &mut c, &TOKENS[..5], Logits::Last, p)
                .expect("prefill");
            c
        })
        .collect();
    let v = m.cfg.vocab;
    for (step, &t) in TOKENS[5..].iter().enumerate() {
        let mut refs: Vec<&mut KvCache> = caches.iter_mut().collect();
        let batch = m
            .forward_multi_lora(&mut scratch, &mut refs, &[t; 4], &picks)
            .expect("batched step")
            .to_vec();
        for (i, one) in alone.iter().enumerate() {
            let d = max_diff(&batch[i * v..(i + 1) * v], &one[step]);
            assert!(d < 1e-4, "sequence {i} step {step}: batched differs by {d}");
        }
    }
    // the plain call is the no-adapter row
    let mut c = m.new_cache(16);
    m.forward_cache(&mut scratch, &mut c, &TOKENS[..5], Logits::Last)
        .expect("prefill");
    let mut refs = vec![&mut c];
    let plain = m
        .forward_multi(&mut scratch, &mut refs, &TOKENS[5..6])
        .expect("step")
        .to_vec();
    assert!(max_diff(&plain, &alone[1][0]) < 1e-5);
}

#[test]
fn adapters_that_cannot_run_unmerged_are_refused_by_name() {
    let s = LLAMA;
    let mut m = Model::from_gguf(base_file(&s)).expect("base");
    let mut head = adapter(&s, 1, 8.0);
    let mut r = Rng(3);
    head.tensors
        .push(lora_tensor(&mut r, "output.weight".into(), s.c, s.vocab, 2));
    // the tied head's `output.weight` does not exist in LLAMA: the base check says so
    let e = m.add_lora(&head).expect_err("no output.weight");
    assert!(e.to_string().contains("output.weight"), "{e}");
    let e = m
        .forward_cache_lora(
            &mut m.new_state(16, 16),
            &mut m.new_cache(16),
            &TOKENS,
            Logits::Last,
            &[(0, 1.0)],
        )
        .expect_err("no adapter 0");
    assert!(matches!(e, ModelError::NoSuchLora { id: 0, n: 0 }), "{e}");

    let mut out = Model::from_gguf(base_file(&synthetic::LLAMA_OUTPUT)).expect("base");
    let e = out
        .add_lora(&head)
        .expect_err("head adapters run merged only");
    assert!(
        matches!(e, ModelError::LoraTarget(ref n) if n == "output.weight"),
        "{e}"
    );
}
