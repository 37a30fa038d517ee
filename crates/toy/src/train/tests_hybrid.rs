//! Qwen3.5-style hybrid models (GDN and gated attention layers): finite-difference gradients
//! of every tensor (each GDN and attention parameter, and the embedding, which is the first
//! block's input gradient), every tensor receives a gradient, a falling loss, and the
//! exported `qwen35` GGUF loading in toy's inference with the trainer's logits.

use super::export;
use super::tests::{
    assert_every_tensor_gets_a_gradient, check_sampled_gradients, rough_params, tokens,
};
use super::{Arch, HybridConfig, LayerKind, ModelConfig, ModelSpec, TrainModel};
use crate::gguf::GgufFile;
use crate::model::{Logits, Model};
use std::sync::Arc;
use tinynn::optim::{AdamW, AdamWConfig};

/// GDN, attention, GDN: both kinds, and a GDN layer after attention. Head size 8 (not
/// d_model / n_head), a quarter of it rotated, 2 value heads on 1 key head, GQA 2:1.
pub(super) fn hybrid_cfg(depth_scale: bool, tied: bool) -> ModelConfig {
    use LayerKind::{Attention as Attn, Gdn};
    ModelConfig::try_from(ModelSpec {
        arch: Arch::Qwen35,
        vocab: 13,
        d_model: 16,
        n_head: 2,
        n_kv_head: 1,
        d_ff: 24,
        n_layer: 3,
        ctx: 6,
        norm_eps: 1e-5,
        rope_base: 100.0,
        depth_scale,
        tied,
        hybrid: Some(HybridConfig {
            layers: vec![Gdn, Attn, Gdn],
            head_dim: 8,
            rope_dim: 4,
            gdn_key_heads: 1,
            gdn_value_heads: 2,
            gdn_key_dim: 8,
            gdn_value_dim: 8,
            conv_kernel: 4,
        }),
        head_dim: None,
        rope_freqs: None,
        ctx_train: None,
        inference_rounding: false,
        swa: None,
    })
    .expect("a valid config")
}

fn variants() -> Vec<ModelConfig> {
    vec![
        hybrid_cfg(false, true),
        hybrid_cfg(true, false),
        hybrid_cfg(true, true),
    ]
}

#[test]
fn hybrid_gradients_match_finite_differences() {
    // t = 5 < ctx runs the GDN core zero-padded, t = 6 = ctx directly; batch 3 puts two
    // sequences in one shard, batch 2 one in each
    for (c, batch, t) in [
        (hybrid_cfg(false, true), 2, 5),
        (hybrid_cfg(true, false), 3, 6),
        (hybrid_cfg(true, true), 2, 6),
    ] {
        // the first GDN layer is strongly curved at rough weights: at a step of 1e-2 the
        // central difference's own error reaches 10% of the embedding's gradient
        let what = format!("ds={} tied={}", c.depth_scale, c.tied);
        let names = check_sampled_gradients(&c, batch, t, 3e-3, false, &what);
        // every kind of hybrid tensor was among those checked
        for want in [
            "attn_qkv.weight",
            "ssm_conv1d.weight",
            "attn_gate.weight",
            "ssm_beta.weight",
            "ssm_alpha.weight",
            "ssm_dt.bias",
            "ssm_a",
            "ssm_norm.weight",
            "ssm_out.weight",
            "attn_q.weight",
            "attn_k.weight",
            "attn_v.weight",
            "attn_q_norm.weight",
            "attn_k_norm.weight",
            "attn_output.weight",
            "post_attention_norm.weight",
            "token_embd.weight",
        ] {
            assert!(
                names.iter().any(|n| n.ends_with(want)),
                "{want} not in the layout"
            );
        }
    }
}

#[test]
fn every_hybrid_tensor_receives_a_gradient() {
    // from the real init: A_log, dt_bias, conv and the norms start as training starts
    for c in variants() {
        assert_every_tensor_gets_a_gradient(&c);
    }
}

#[test]
fn hybrid_init_is_qwen_and_mamba_shaped() {
    let m = TrainModel::init(hybrid_cfg(false, true), 1, 3);
    let vals = |suffix: &str| -> Vec<f32> {
        m.params_info()
            .iter()
            .filter(|i| i.name.ends_with(suffix))
            .flat_map(|i| m.params[i.range.clone()].to_vec())
            .collect()
    };
    for a_log in vals(".ssm_a") {
        assert!((0.0..16f32.ln()).contains(&a_log), "A_log {a_log}");
    }
    for dt in vals(".ssm_dt.bias") {
        let sp = (1.0 + dt.exp()).ln();
        assert!((0.99e-3..=1.01e-1).contains(&sp), "softplus(dt_bias) {sp}");
    }
    for w in vals(".ssm_conv1d.weight") {
        assert!(w.abs() <= 0.5, "conv tap {w} outside 1/sqrt(4)");
    }
    assert!(vals(".ssm_norm.weight").iter().all(|&w| w == 1.0));
}

#[test]
fn hybrid_loss_falls_under_adamw() {
    let mut c = hybrid_cfg(false, true);
    c.ctx = 32;
    let mut m = TrainModel::init(c.clone(), 4, 11);
    let (b, t) = (4, 32);
    let (x, y) = (tokens(b * t, c.vocab, 12), tokens(b * t, c.vocab, 13));
    let l0 = m.forward_loss(&x, &y, b, t);
    assert!(
        (l0 - (c.vocab as f32).ln()).abs() < 0.05,
        "init loss {l0} vs ln V"
    );
    let mut opt = AdamW::new(m.params.len(), AdamWConfig::default());
    let decay = m.decay_ranges();
    let mut last = l0;
    for _ in 0..30 {
        m.zero_grad();
        last = m.forward_backward(&x, &y, b, t);
        opt.step(&mut m.params, &m.grads, 3e-3, &decay);
    }
    assert!(
        last < l0 - 0.3,
        "loss {l0} -> {last} after 30 steps on one batch"
    );
}

/// The trainer's last-position logits against toy's inference on the exported GGUF, for
/// prompts of `lens` tokens, within `tol` of the largest |logit|.
fn check_same_logits(c: ModelConfig, lens: &[usize], tol: f32) {
    let base = TrainModel::init(c.clone(), 1, 1);
    let params = rough_params(&base, 4);
    let mut m = TrainModel::from_params(c.clone(), 1, params).unwrap();
    let mut bytes = Vec::new();
    export::to_gguf(&m, &[], "hybrid-test")
        .unwrap()
        .write_to(&mut bytes)
        .unwrap();
    let file = GgufFile::from_bytes(bytes).unwrap();
    let sections = file
        .get("qwen35.rope.dimension_sections")
        .and_then(|v| v.as_array())
        .map(|a| a.len());
    assert_eq!(sections, Some(4), "llama.cpp requires 4 rope sections");
    let model = Model::from_gguf(Arc::new(file)).unwrap();
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
            "ds={} tied={} len {len}: inference logits differ by {err} (max |logit| {spread})",
            c.depth_scale,
            c.tied
        );
    }
}

#[test]
fn qwen35_gguf_export_matches_inference_logits() {
    for c in variants() {
        let mut c = c;
        // past one GDN chunk (32), so the chunked kernels of both sides meet
        c.ctx = 40;
        check_same_logits(c.clone(), &[1, 3, 9, c.ctx], 5e-3);
    }
}

#[test]
fn qwen35_training_with_inference_rounding_is_the_cached_inference_function() {
    // from 64 tokens on, inference attends with f32 queries and sums over its f16 cache: the
    // training pass that rounds K and V alike gives its logits to f32 rounding
    for c in variants() {
        let mut c = c;
        c.ctx = 72;
        c.inference_rounding = true;
        check_same_logits(c.clone(), &[64, 72], 1e-5);
    }
}

#[test]
fn hybrid_training_is_the_same_bits_on_one_and_two_threads() {
    let mut c = hybrid_cfg(true, true);
    c.ctx = 40;
    let run = || {
        let mut m = TrainModel::init(c.clone(), 4, 21);
        let mut opt = AdamW::new(m.params.len(), AdamWConfig::default());
        let decay = m.decay_ranges();
        let mut losses = Vec::new();
        for s in 0..3u64 {
            let (x, y) = (
                tokens(4 * 40, c.vocab, 100 + s),
                tokens(4 * 40, c.vocab, 200 + s),
            );
            m.zero_grad();
            losses.push(m.forward_backward(&x, &y, 4, 40));
            opt.step(&mut m.params, &m.grads, 1e-3, &decay);
        }
        (m.params, losses)
    };
    let pool = |n| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .unwrap()
    };
    let (p1, l1) = pool(1).install(run);
    let (p2, l2) = pool(2).install(run);
    assert_eq!(l1, l2, "losses differ between 1 and 2 threads");
    assert!(p1 == p2, "params differ between 1 and 2 threads");
}

#[test]
fn a_qwen35_base_imports_for_a_full_fine_tune() {
    for tied in [true, false] {
        let c = hybrid_cfg(false, tied);
        let base = TrainModel::init(c.clone(), 2, 1);
        let params = rough_params(&base, 4);
        let mut m = TrainModel::from_params(c.clone(), 2, params.clone()).unwrap();
        let mut bytes = Vec::new();
        export::to_gguf(&m, &[], "hybrid-base")
            .unwrap()
            .write_to(&mut bytes)
            .unwrap();
        let file = Arc::new(GgufFile::from_bytes(bytes).unwrap());
        let mut ft = TrainModel::from_base(&file, c.ctx, 2).unwrap();
        assert_eq!(ft.cfg, c, "the shape read back from the qwen35 keys");
        for (i, (a, b)) in ft.params.iter().zip(&params).enumerate() {
            // A_log goes through -exp and back (ssm_a); everything else is copied
            assert!(
                (a - b).abs() <= 1e-6 * b.abs().max(1.0),
                "param {i}: {a} vs {b}"
            );
        }
        let (x, y) = (tokens(2 * c.ctx, c.vocab, 5), tokens(2 * c.ctx, c.vocab, 6));
        let (l0, l1) = (
            m.forward_loss(&x, &y, 2, c.ctx),
            ft.forward_loss(&x, &y, 2, c.ctx),
        );
        assert!((l0 - l1).abs() < 1e-5, "{l0} vs {l1}");
    }
}

/// One config: a model trained from a recipe, written as GGUF and read back as a base, is the
/// same `model::Config` inference reads from that file; and a config is stored in a
/// checkpoint in the recipe's words (`ModelSpec`) and reads back equal.
#[test]
fn a_base_config_is_the_inference_config_and_checkpoints_keep_the_spec() {
    let mut all = super::tests::variants();
    all.extend(super::tests::families());
    all.push(hybrid_cfg(false, true));
    for c in all {
        let m = TrainModel::init(c.clone(), 1, 3);
        let mut bytes = Vec::new();
        let gguf = super::export::to_gguf(&m, &[], "one-config").unwrap();
        gguf.write_to(&mut bytes).unwrap();
        let f = crate::gguf::GgufFile::from_bytes(bytes).unwrap();
        let inference = crate::model::Config::from_gguf(&f).unwrap();
        let base = super::base_config(&f, c.ctx).unwrap();
        assert_eq!(base.shape, inference, "{:?}", c.arch);
        let mut want = c.shape.clone();
        want.rope_neox = c.arch.rope_neox();
        want.tied = m.cfg.is_tied();
        if c.arch.is_gpt2() {
            // learned positions: the file carries no RoPE base, inference keeps its default
            want.rope_base = inference.rope_base;
        }
        assert_eq!(inference, want, "{:?}: the trained shape", c.arch);

        let json = serde_json::to_string(&c).unwrap();
        assert!(!json.contains("\"shape\""), "{json}");
        assert_eq!(json.contains("\"hybrid\""), c.gdn.is_some(), "{json}");
        let back: ModelConfig = serde_json::from_str(&json).unwrap();
        assert_eq!(back, c);
    }
}
