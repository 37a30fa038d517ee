//! The Qwen3.5 hybrid path (Gated DeltaNet layers beside gated attention) on tiny random
//! `qwen35` models built in memory (`common/hybrid.rs`): prefill equals token-by-token
//! decoding with state, batched decoding equals each sequence alone, a cache resumed from
//! a recurrent snapshot equals a cold prefill, and bad files give errors naming what is
//! wrong. Agreement with transformers and llama.cpp is `scripts/qwen35-reference.sh`.

#[path = "common/hybrid.rs"]
mod hybrid;
#[path = "common/synthetic.rs"]
mod synthetic;

use hybrid::{gguf_with, model, tensors, tiny, try_model, HybridSpec};
use tinynn::quant::GgmlType;
use toy::infer::kv_cache::KvCache;
use toy::model::{LayerKind, Logits, Model, ModelError};

fn tokens(n: usize, vocab: usize, seed: u64) -> Vec<u32> {
    let mut r = synthetic::Rng(seed | 1);
    (0..n)
        .map(|_| ((r.next() + 1.0) * 0.5 * vocab as f32) as u32 % vocab as u32)
        .collect()
}

/// Largest |a - b| relative to the largest |b| (logits of random models reach tens).
fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let scale = b.iter().map(|x| x.abs()).fold(0.0, f32::max).max(1e-6);
    let d = a
        .iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max);
    eprintln!("max |diff| {d:.3e}, largest logit {scale:.3}");
    d / scale
}

/// Every position's logits, one call over all tokens.
fn all_logits(m: &Model, toks: &[u32]) -> Vec<f32> {
    let mut s = m.new_state(512, 512);
    m.forward(&mut s, toks, Logits::All)
        .expect("forward")
        .to_vec()
}

/// Every position's logits, one token per call.
fn stepped_logits(m: &Model, toks: &[u32]) -> Vec<f32> {
    let mut s = m.new_state(512, 512);
    let mut out = Vec::new();
    for &t in toks {
        out.extend_from_slice(m.forward(&mut s, &[t], Logits::Last).expect("step"));
    }
    out
}

#[test]
fn the_layer_kinds_and_the_state_come_from_the_file() {
    let m = model(&tiny(), GgmlType::F32);
    let kinds: Vec<&str> = m.cfg.kinds.iter().map(|k| k.name()).collect();
    assert_eq!(
        kinds,
        ["gdn", "gdn", "gdn", "attn", "gdn", "gdn", "gdn", "attn"]
    );
    let sh = m.cfg.gdn.expect("a gdn shape");
    assert_eq!((sh.hk, sh.hv, sh.dk, sh.dv, sh.kernel), (2, 4, 8, 8, 4));
    // only the two attention layers hold positions
    let c = m.new_cache(512);
    let kv = 2 * 2 * 2 * (2 * 512 * 8);
    let rec = 6 * 4 * (sh.conv_state_len() + sh.ssm_state_len());
    assert_eq!(c.bytes(), kv + rec);
    assert!(
        m.cfg
            .kinds
            .iter()
            .filter(|&&k| k == LayerKind::Attention)
            .count()
            == 2
    );
}

#[test]
fn prefill_equals_decoding_token_by_token_with_state() {
    // under 64 tokens both runs use the same attention regime (f16 queries, as llama.cpp);
    // 40 tokens span the chunked GDN kernel (>= 16) against the recurrent one
    let m = model(&tiny(), GgmlType::F32);
    let toks = tokens(40, 64, 3);
    let d = max_diff(&all_logits(&m, &toks), &stepped_logits(&m, &toks));
    assert!(d <= 1e-4, "prefill vs decode: max |diff| {d}");
}

#[test]
fn an_all_gdn_stack_gives_the_same_logits_in_chunks_of_any_length() {
    // no attention layer: long prefills (several 64-token GDN chunks, a partial one)
    // against decoding, and against one token then the rest
    let mut s = tiny();
    s.recurrent = vec![true; 3];
    let m = model(&s, GgmlType::F32);
    let toks = tokens(150, 64, 5);
    let full = all_logits(&m, &toks);
    let d = max_diff(&full, &stepped_logits(&m, &toks));
    assert!(
        d <= 1e-4,
        "prefill vs decode over 150 tokens: max |diff| {d}"
    );
    let mut st = m.new_state(512, 512);
    let mut split = m
        .forward(&mut st, &toks[..1], Logits::All)
        .unwrap()
        .to_vec();
    split.extend_from_slice(m.forward(&mut st, &toks[1..], Logits::All).unwrap());
    let d = max_diff(&full, &split);
    assert!(d <= 1e-4, "1 + 149 tokens: max |diff| {d}");
}

#[test]
fn batched_decoding_equals_each_sequence_alone() {
    let m = model(&tiny(), GgmlType::Q8_0);
    let prompts = [tokens(5, 64, 7), tokens(19, 64, 8), tokens(2, 64, 9)];
    let mut scratch = m.new_state(512, 8);
    let step = |c: &mut KvCache, s: &mut toy::model::State, t: u32| {
        m.forward_cache(s, c, &[t], Logits::Last).unwrap().to_vec()
    };
    let mut alone: Vec<KvCache> = Vec::new();
    let mut together: Vec<KvCache> = Vec::new();
    for p in &prompts {
        for caches in [&mut alone, &mut together] {
            let mut c = m.new_cache(512);
            m.forward_cache(&mut scratch, &mut c, p, Logits::Last)
                .unwrap();
            caches.push(c);
        }
    }
    for round in 0..4u32 {
        let next: Vec<u32> = (0..3).map(|i| (round * 7 + i * 11) % 64).collect();
        let mut refs: Vec<&mut KvCache> = together.iter_mut().collect();
        let batched = m
            .forward_multi(&mut scratch, &mut refs, &next)
            .unwrap()
            .to_vec();
        for (i, c) in alone.iter_mut().enumerate() {
            let one = step(c, &mut scratch, next[i]);
            let d = max_diff(&one, &batched[i * 64..(i + 1) * 64]);
            assert!(d <= 1e-4, "round {round} sequence {i}: max |diff| {d}");
        }
    }
}

#[test]
fn a_cache_goes_back_only_to_a_recurrent_snapshot_and_resumes_exactly() {
    let m = model(&tiny(), GgmlType::F32);
    let toks = tokens(150, 64, 11);
    let mut s = m.new_state(512, 64);
    // in chunks of 64 (as the server prefills): snapshots at 64 and 128
    let mut cache = m.new_cache(512);
    for part in toks.chunks(64) {
        m.forward_cache(&mut s, &mut cache, part, Logits::Last)
            .unwrap();
    }
    assert_eq!(cache.resume_at(100), 64, "the snapshot before 100");
    assert_eq!(cache.resume_at(150), 150, "where it is");
    assert_eq!(cache.resume_at(63), 0, "nothing before 64");
    cache.truncate(100);
    assert_eq!(cache.pos, 64);
    let resumed = m
        .forward_cache(&mut s, &mut cache, &toks[64..130], Logits::All)
        .unwrap()
        .to_vec();
    let mut cold = m.new_cache(512);
    m.forward_cache(&mut s, &mut cold, &toks[..64], Logits::Last)
        .unwrap();
    let want = m
        .forward_cache(&mut s, &mut cold, &toks[64..130], Logits::All)
        .unwrap()
        .to_vec();
    assert_eq!(
        resumed, want,
        "resumed from the snapshot at 64 == cold prefill"
    );
    // and a copy from another cache lands on its snapshot too
    let mut other = m.new_cache(512);
    let got = other.copy_prefix_from(&cache, 0, 100);
    assert_eq!(got, 64);
}

fn err(s: &HybridSpec, drop: &[&str]) -> String {
    let bytes = gguf_with(s, &tensors(s, 1), GgmlType::F32, drop);
    match synthetic::load(bytes) {
        Ok(_) => panic!("loaded without {drop:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn bad_hybrid_files_say_what_is_wrong() {
    let s = tiny();
    let e = err(&s, &["blk.1.ssm_a"]);
    assert!(e.contains("blk.1.ssm_a"), "{e}");
    let e = err(&s, &["blk.0.ssm_conv1d.weight"]);
    assert!(e.contains("ssm_conv1d"), "{e}");
    // a conv of the wrong shape
    let mut t = tensors(&s, 1);
    let conv = t
        .iter_mut()
        .find(|x| x.0 == "blk.2.ssm_conv1d.weight")
        .unwrap();
    conv.1 = vec![2, conv.1[1] * 2];
    let e = match synthetic::load(gguf_with(&s, &t, GgmlType::F32, &[])) {
        Ok(_) => panic!("a 3-tap conv loaded"),
        Err(e) => e.to_string(),
    };
    assert!(
        e.contains("blk.2.ssm_conv1d.weight") && e.contains("[4, 64]"),
        "{e}"
    );
    // key heads that do not divide the value heads
    let mut bad = tiny();
    bad.hk = 3;
    match try_model(&bad, GgmlType::F32) {
        Err(ModelError::BadKey { key, why }) => {
            assert_eq!(key, "qwen35.ssm.group_count");
            assert!(why.contains("do not divide"), "{why}");
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("3 key heads for 4 value heads loaded"),
    }
}

#[test]
fn quantizing_a_hybrid_keeps_the_conv_taps_as_stored_and_stays_close() {
    let s = tiny();
    let f32_file =
        toy::gguf::GgufFile::from_bytes(gguf_with(&s, &tensors(&s, 2), GgmlType::F32, &[]))
            .expect("gguf");
    let mut out = Vec::new();
    toy::quantize::quantize_model(&f32_file, GgmlType::Q8_0)
        .expect("quantize")
        .write_to(&mut out)
        .expect("write");
    let q = toy::gguf::GgufFile::from_bytes(out.clone()).expect("quantized gguf");
    for t in &q.tensors {
        let want = if t.name.ends_with("ssm_conv1d.weight") || t.dims.len() == 1 {
            GgmlType::F32
        } else {
            GgmlType::Q8_0
        };
        assert_eq!(t.ty, want, "{}", t.name);
    }
    // the first position (no recurrence yet) near the f32 model's: 8-bit weights and
    // activations; later positions wander further in a random 8-layer net
    let toks = tokens(1, 64, 4);
    let f32_model = synthetic::load(gguf_with(&s, &tensors(&s, 2), GgmlType::F32, &[])).unwrap();
    let a = all_logits(&f32_model, &toks);
    let b = all_logits(&synthetic::load(out).unwrap(), &toks);
    let d = max_diff(&b, &a);
    assert!(
        d < 0.1,
        "Q8_0 hybrid vs f32 at the first position: relative {d}"
    );
}
