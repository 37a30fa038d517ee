//! Consistency with inference: a trained model's params written as an F32 GGUF (standard
//! `llama.*` / `gpt2.*` keys, depth scaling folded into the norms) load in toy's inference
//! `Model` and give the same next-token logits as `logits_last`. This pins the tensor layout,
//! names, dims and the RoPE convention to what llama.cpp loads.

use super::tests::{cfg, families, rough_params, tokens};
use super::{Arch, ModelConfig, TrainModel};
use crate::gguf::{GgufFile, GgufWriter, Value};
use crate::model::{Logits, Model};
use std::sync::Arc;
use tinynn::quant::GgmlType;

fn to_gguf(m: &TrainModel) -> Vec<u8> {
    let c = &m.cfg;
    let a = c.arch.name();
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", Value::String(a.into()));
    let u = |v: usize| Value::U32(v as u32);
    w.add_metadata(format!("{a}.block_count"), u(c.n_layer));
    w.add_metadata(format!("{a}.embedding_length"), u(c.d_model));
    w.add_metadata(format!("{a}.attention.head_count"), u(c.n_head));
    w.add_metadata(format!("{a}.attention.head_count_kv"), u(c.n_kv_head));
    w.add_metadata(format!("{a}.feed_forward_length"), u(c.d_ff));
    w.add_metadata(format!("{a}.context_length"), u(c.ctx));
    w.add_metadata(format!("{a}.vocab_size"), u(c.vocab));
    let eps_key = match c.arch.is_gpt2() {
        false => "attention.layer_norm_rms_epsilon",
        true => "attention.layer_norm_epsilon",
    };
    w.add_metadata(format!("{a}.{eps_key}"), Value::F32(c.norm_eps));
    w.add_metadata(format!("{a}.rope.freq_base"), Value::F32(c.rope_base));
    if c.head_dim * c.n_head != c.d_model {
        w.add_metadata(format!("{a}.attention.key_length"), u(c.head_dim));
    }
    if let Some(sw) = &c.swa {
        super::export::swa_metadata(&mut w, a, sw);
    }
    if let Some(f) = &c.rope_freqs {
        let bytes: Vec<u8> = f.iter().flat_map(|v| v.to_le_bytes()).collect();
        w.add_tensor(
            "rope_freqs.weight",
            vec![f.len() as u64],
            GgmlType::F32,
            bytes,
        )
        .unwrap();
    }
    for info in m.params_info() {
        let mut vals = m.params[info.range.clone()].to_vec();
        // depth scaling folded into the block norms (weight and bias): exact in math
        let f = super::export::depth_factor(c, &info.name);
        vals.iter_mut().for_each(|v| *v *= f);
        let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
        w.add_tensor(info.name.clone(), info.dims.clone(), GgmlType::F32, bytes)
            .unwrap();
    }
    let mut out = Vec::new();
    w.write_to(&mut out).unwrap();
    out
}

/// The trainer's last-position logits against toy's inference on the exported GGUF, for
/// prompts of `lens` tokens, within `tol` of the largest |logit|; returns the largest
/// difference relative to it.
fn check_same_logits(c: ModelConfig, lens: &[usize], tol: f32) -> f32 {
    let mut worst = 0f32;
    let base = TrainModel::init(c.clone(), 1, 1);
    let params = rough_params(&base, 4);
    let mut m = TrainModel::from_params(c.clone(), 1, params).unwrap();
    let model = Model::from_gguf(Arc::new(GgufFile::from_bytes(to_gguf(&m)).unwrap())).unwrap();
    for &len in lens {
        let toks = tokens(len, c.vocab, 10 + len as u64);
        let want = m.logits_last(&toks).to_vec();
        let mut st = model.new_state(c.ctx, c.ctx);
        let got = model.forward(&mut st, &toks, Logits::Last).unwrap();
        let spread = want.iter().fold(0f32, |a, v| a.max(v.abs()));
        assert!(spread > 0.5, "logits too flat to compare: {spread}");
        let err = want
            .iter()
            .zip(got)
            .fold(0f32, |a, (x, y)| a.max((x - y).abs()));
        assert!(
            err <= tol * spread.max(1.0),
            "{:?} ds={} tied={} len {len}: inference logits differ by {err} (max |logit| {spread})",
            c.arch,
            c.depth_scale,
            c.tied
        );
        worst = worst.max(err / spread.max(1.0));
    }
    worst
}

#[test]
fn llama_gguf_export_matches_inference_logits() {
    for (ds, tied) in [(false, true), (true, false)] {
        let mut c = cfg(Arch::Llama, ds, tied);
        c.ctx = 12;
        check_same_logits(c.clone(), &[1, 3, c.ctx], 5e-3);
    }
}

#[test]
fn gpt2_gguf_export_matches_inference_logits() {
    for ds in [false, true] {
        let mut c = cfg(Arch::Gpt2, ds, true);
        c.ctx = 12;
        check_same_logits(c.clone(), &[1, 3, c.ctx], 5e-3);
    }
}

#[test]
fn qwen2_qwen3_llama3_training_logits_match_inference() {
    // each family's own parts (biases, q/k norms, neox RoPE, llama3 divisors) change the
    // function: a trainer that skipped one would miss the inference logits
    for mut c in families() {
        c.ctx = 12;
        check_same_logits(c.clone(), &[1, 3, c.ctx], 5e-3);
    }
}

#[test]
fn training_with_inference_rounding_is_the_cached_inference_function_on_every_family() {
    // from 64 tokens on, inference attends with f32 queries and sums over its f16 cache (and
    // GPT-2's GELU goes through ggml's f16 table): the training pass that rounds alike gives
    // its logits to f32 rounding
    let mut all = vec![cfg(Arch::Llama, false, true), cfg(Arch::Llama, true, false)];
    all.push(cfg(Arch::Gpt2, true, true));
    all.extend(families());
    let mut f32_worst = 0f32;
    for mut c in all {
        c.ctx = 72;
        c.inference_rounding = true;
        let worst = check_same_logits(c.clone(), &[64, 72], 1e-5);
        eprintln!(
            "{:?} ds={}: {worst:.1e} of max |logit|",
            c.arch, c.depth_scale
        );
        // the rounding is what closes the gap: without it the same case is further off
        c.inference_rounding = false;
        f32_worst = f32_worst.max(check_same_logits(c, &[64, 72], 5e-3));
    }
    eprintln!("without the rounding: {f32_worst:.1e}");
    assert!(
        f32_worst > 1e-5,
        "f32 K/V already within 1e-5 ({f32_worst})"
    );
}

#[test]
fn a_sliding_window_cache_keeps_only_the_window_and_decodes_as_a_full_cache_does() {
    // gemma3 with a window of 3 on its first layer: 1400 tokens decoded one by one move its
    // window cache (3 + 64 + 512 slots) along twice; every step's logits are the bits a full
    // cache gives, and so are they after going back 20 tokens (within the kept margin)
    let mut c = super::tests::families().pop().unwrap();
    assert!(c.swa.is_some());
    c.ctx = 1500;
    let base = TrainModel::init(c.clone(), 1, 1);
    let m = TrainModel::from_params(c.clone(), 1, rough_params(&base, 4)).unwrap();
    let model = Model::from_gguf(Arc::new(GgufFile::from_bytes(to_gguf(&m)).unwrap())).unwrap();
    let toks = tokens(1400, c.vocab, 7);
    let mut scratch = model.new_state(c.ctx, 64);
    let mut window = model.new_cache(c.ctx);
    let (mc, d) = (&model.cfg, model.cfg.head_dim);
    let mut full = crate::model::kv_cache::KvCache::new(mc.n_layer, mc.n_kv_head, d, c.ctx);
    assert!(
        window.bytes() < full.bytes() * 3 / 4,
        "{} vs {}",
        window.bytes(),
        full.bytes()
    );
    let mut step = |cache: &mut crate::model::kv_cache::KvCache, t: u32| {
        model
            .forward_cache(&mut scratch, cache, &[t], Logits::Last)
            .unwrap()
            .to_vec()
    };
    for (i, &t) in toks.iter().enumerate() {
        assert_eq!(step(&mut window, t), step(&mut full, t), "token {i}");
    }
    for cache in [&mut window, &mut full] {
        cache.truncate(1380);
        assert_eq!(cache.pos, 1380);
    }
    for &t in &toks[..5] {
        assert_eq!(step(&mut window, t), step(&mut full, t));
    }
    // far back, the window no longer holds what the next query reads: start again
    assert_eq!(window.resume_at(700), 0);
    assert_eq!(full.resume_at(700), 700);
}
