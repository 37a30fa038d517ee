//! LoRA on a qwen35 hybrid base kept as stored: B = 0 starts at the base's loss, the adapters'
//! gradients match finite differences through the GDN and gated-attention layers, training
//! on a Q8_0 base lowers the loss and leaves every frozen tensor alone, and targets a qwen35
//! base lacks are named errors.

use super::export;
use super::tests::{rough_params, tokens};
use super::tests_hybrid::hybrid_cfg;
use super::tests_lora::{check_adapter_gradients, check_dropout, train_adapters};
use super::{LoraSpec, ModelConfig, TrainModel};
use crate::gguf::GgufFile;
use crate::quantize::quantize_model;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use tinynn::quant::GgmlType;

fn base(c: &ModelConfig) -> Arc<GgufFile> {
    let m0 = TrainModel::init(c.clone(), 2, 1);
    let m = TrainModel::from_params(c.clone(), 2, rough_params(&m0, 4)).unwrap();
    let mut bytes = Vec::new();
    export::to_gguf(&m, &[], "hybrid-base")
        .unwrap()
        .write_to(&mut bytes)
        .unwrap();
    Arc::new(GgufFile::from_bytes(bytes).unwrap())
}

fn spec(targets: &[&str]) -> LoraSpec {
    LoraSpec {
        targets: targets.iter().map(|s| s.to_string()).collect(),
        rank: 3,
        scale: 1.5,
        seed: 5,
        inference_rounding: false,
    }
}

#[test]
fn hybrid_lora_starts_at_the_base_and_its_gradients_match_finite_differences() {
    let c = hybrid_cfg(false, false);
    let file = base(&c);
    let (b, t) = (2, c.ctx);
    let (x, y) = (tokens(b * t, c.vocab, 7), tokens(b * t, c.vocab, 8));
    let want = TrainModel::from_base(&file, c.ctx, 2)
        .unwrap()
        .forward_loss(&x, &y, b, t);
    let mut m = TrainModel::lora_on_base(&file, c.ctx, 2, &spec(&["all-linear"]), None).unwrap();
    let l0 = m.forward_loss(&x, &y, b, t);
    assert!((l0 - want).abs() < 1e-4, "B = 0: {l0} vs the base's {want}");
    // every part of both layer kinds has an adapter: 2 GDN layers x (5 + 3), 1 attention x (4 + 3)
    let names: Vec<String> = m.params_info().iter().map(|i| i.name.clone()).collect();
    let n_a = names.iter().filter(|n| n.ends_with(".lora_a")).count();
    assert_eq!(n_a, 2 * 8 + 7, "{names:?}");
    for part in [
        "blk.0.ssm_out",
        "blk.1.attn_q",
        "blk.2.ffn_gate",
        "blk.0.attn_qkv",
    ] {
        assert!(names.contains(&format!("{part}.weight.lora_b")), "{part}");
    }

    let mut rng = StdRng::seed_from_u64(2);
    let adapters: Vec<_> = m
        .params_info()
        .iter()
        .filter(|i| i.name.contains(".lora_"))
        .cloned()
        .collect();
    for i in &adapters {
        for v in &mut m.params[i.range.clone()] {
            *v = rng.random_range(-0.3..0.3);
        }
    }
    m.zero_grad();
    m.forward_backward(&x, &y, b, t);
    let g = m.grads.clone();
    for info in &adapters {
        let gmax = g[info.range.clone()]
            .iter()
            .fold(0f32, |a, v| a.max(v.abs()));
        assert!(gmax > 0.0, "{} gets no gradient", info.name);
    }
    check_adapter_gradients(&mut m, &g, 2, &mut rng, |m| {
        m.forward_loss(&x, &y, b, t) as f64
    });
}

#[test]
fn hybrid_lora_on_a_q8_0_base_lowers_the_loss_and_keeps_the_frozen_tensors() {
    let mut c = hybrid_cfg(false, true);
    (c.d_model, c.d_ff) = (32, 64);
    let f32_file = base(&c);
    let mut q8 = Vec::new();
    quantize_model(&f32_file, GgmlType::Q8_0)
        .unwrap()
        .write_to(&mut q8)
        .unwrap();
    let file = Arc::new(GgufFile::from_bytes(q8).unwrap());
    assert_eq!(
        file.tensor("blk.0.attn_qkv.weight").unwrap().ty,
        GgmlType::Q8_0
    );
    let targets = ["attn_qkv", "ssm_out", "attn_q", "attn_v", "ffn_down"];
    let mut m = TrainModel::lora_on_base(&file, c.ctx, 2, &spec(&targets), None).unwrap();
    let frozen = m.frozen_ranges();
    assert!(
        frozen.iter().any(|r| !r.is_empty()),
        "norms, conv, A_log stay frozen"
    );
    let (x, y) = (tokens(2 * c.ctx, c.vocab, 5), tokens(2 * c.ctx, c.vocab, 6));
    let losses = train_adapters(&mut m, &x, &y, (2, c.ctx), 30);
    assert!(
        losses[29] < 0.8 * losses[0],
        "loss {} -> {}",
        losses[0],
        losses[29]
    );
}

#[test]
fn targets_a_base_lacks_are_named_errors() {
    let c = hybrid_cfg(false, true);
    let file = base(&c);
    let err = TrainModel::lora_on_base(&file, c.ctx, 2, &spec(&["ffn_up", "attn_qq"]), None)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("attn_qq") && err.contains("qwen35"), "{err}");
}

/// The adapters' dropout reaches every product of both layer kinds (the hybrid blocks once
/// ignored it): the checks of `tests_lora::check_dropout` on a hybrid base.
#[test]
fn hybrid_lora_dropout_masks_the_adapters_inputs_and_its_gradients_match_finite_differences() {
    let c = hybrid_cfg(false, false);
    let file = base(&c);
    let (b, t) = (2, c.ctx);
    let (x, y) = (tokens(b * t, c.vocab, 5), tokens(b * t, c.vocab, 6));
    let mut m = TrainModel::lora_on_base(&file, c.ctx, 2, &spec(&["all-linear"]), None).unwrap();
    check_dropout(&mut m, &x, &y, b, t);
}
