//! Fine-tuning tests: a base written as GGUF loads back bit for bit for a full fine-tune; a
//! LoRA model on the frozen base starts at the base's loss exactly (B = 0), its adapter
//! gradients match finite differences, norms stay frozen, and on a Q8_0 base its loss falls.

use super::export::to_gguf;
use super::tests::{rough_params, tokens};
use super::{Arch, LoraSpec, ModelConfig, ModelSpec, TrainModel};
use crate::gguf::GgufFile;
use crate::quantize::quantize_model;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use tinynn::layers::cross_entropy::IGNORE;
use tinynn::layers::dropout::Dropout;
use tinynn::optim::{AdamW, AdamWConfig};
use tinynn::quant::GgmlType;

fn cfg(tied: bool) -> ModelConfig {
    ModelConfig::try_from(ModelSpec {
        arch: Arch::Llama,
        vocab: 19,
        d_model: 32,
        n_head: 4,
        n_kv_head: 2,
        d_ff: 64,
        n_layer: 2,
        ctx: 8,
        norm_eps: 1e-5,
        rope_base: 100.0,
        depth_scale: false,
        tied,
        hybrid: None,
        head_dim: None,
        rope_freqs: None,
        ctx_train: None,
        inference_rounding: false,
        swa: None,
    })
    .expect("a valid config")
}

/// A base model with rough weights, as the bytes of an f32 GGUF.
fn base_bytes(c: &ModelConfig) -> (Vec<f32>, Vec<u8>) {
    let m0 = TrainModel::init(c.clone(), 2, 1);
    let params = rough_params(&m0, 2);
    let m = TrainModel::from_params(c.clone(), 2, params.clone()).unwrap();
    let mut bytes = Vec::new();
    to_gguf(&m, &[], "base")
        .unwrap()
        .write_to(&mut bytes)
        .unwrap();
    (params, bytes)
}

fn all_linear() -> Vec<String> {
    [
        "attn_q",
        "attn_k",
        "attn_v",
        "attn_output",
        "ffn_gate",
        "ffn_up",
        "ffn_down",
    ]
    .map(String::from)
    .to_vec()
}

fn spec(targets: Vec<String>) -> LoraSpec {
    LoraSpec {
        targets,
        rank: 4,
        scale: 2.0,
        seed: 7,
        inference_rounding: false,
    }
}

#[test]
fn a_full_fine_tune_starts_from_the_base_bit_for_bit() {
    for tied in [true, false] {
        let c = cfg(tied);
        let (params, bytes) = base_bytes(&c);
        let file = GgufFile::from_bytes(bytes).unwrap();
        let m = TrainModel::from_base(&file, c.ctx, 2).unwrap();
        assert_eq!(m.cfg, c);
        assert_eq!(m.params, params);
    }
}

/// The other families LoRA trains on, beside `cfg`'s llama: qwen2 (frozen q/k/v biases
/// added to the frozen products), qwen3 (frozen q/k norms, its own head size), llama3
/// (rope_freqs), gpt2 (fused attn_qkv, frozen biases and LayerNorms, learned positions).
fn family_cfgs() -> Vec<ModelConfig> {
    let with = |arch: Arch, f: &dyn Fn(&mut ModelConfig)| {
        let mut c = cfg(false);
        c.arch = arch;
        f(&mut c);
        c
    };
    vec![
        cfg(false),
        with(Arch::Qwen2, &|_| {}),
        with(Arch::Qwen3, &|c| (c.head_dim, c.rope_dim) = (6, 6)),
        with(Arch::Llama, &|c| {
            c.rope_freqs = Some(vec![1.0, 2.0, 8.0, 32.0])
        }),
        with(Arch::Gpt2, &|c| {
            c.n_kv_head = c.n_head;
            c.tied = true
        }),
    ]
}

#[test]
fn lora_starts_at_the_base_and_its_gradients_match_finite_differences() {
    for c in family_cfgs() {
        lora_gradients(c);
    }
}

fn lora_gradients(c: ModelConfig) {
    let (params, bytes) = base_bytes(&c);
    let file = Arc::new(GgufFile::from_bytes(bytes).unwrap());
    let (b, t) = (2, 6);
    let (x, mut y) = (tokens(b * t, c.vocab, 3), tokens(b * t, c.vocab, 4));
    y[2] = IGNORE;
    let mut full = TrainModel::from_params(c.clone(), 2, params).unwrap();
    let want = full.forward_loss(&x, &y, b, t);
    let mut bare = TrainModel::lora_on_base(&file, c.ctx, 2, &spec(vec![]), None).unwrap();
    let all = spec(vec!["all-linear".into()]);
    let mut lora = TrainModel::lora_on_base(&file, c.ctx, 2, &all, None).unwrap();
    let (l0, l1) = (
        bare.forward_loss(&x, &y, b, t),
        lora.forward_loss(&x, &y, b, t),
    );
    assert_eq!(
        l0.to_bits(),
        l1.to_bits(),
        "B = 0: the adapters change nothing"
    );
    assert!(
        (l0 - want).abs() < 1e-4,
        "{:?}: frozen f32 base {l0} vs dense {want}",
        c.arch
    );
    let parts = if c.arch.is_gpt2() { 4 } else { 7 };
    assert_eq!(
        lora.params_info()
            .iter()
            .filter(|i| i.name.ends_with(".lora_a"))
            .count(),
        parts * c.n_layer
    );

    // rough adapters, then central differences on sampled elements of every adapter
    let mut rng = StdRng::seed_from_u64(9);
    for i in lora.params_info().to_vec() {
        if i.name.contains(".lora_") {
            for v in &mut lora.params[i.range.clone()] {
                *v = rng.random_range(-0.3..0.3);
            }
        }
    }
    lora.zero_grad();
    lora.forward_backward(&x, &y, b, t);
    let g = lora.grads.clone();
    for info in lora.params_info().to_vec() {
        let gmax = g[info.range.clone()]
            .iter()
            .fold(0f32, |a, v| a.max(v.abs()));
        assert!(
            !info.name.contains(".lora_") || gmax > 0.0,
            "{:?}: {} gets no gradient",
            c.arch,
            info.name
        );
    }
    check_adapter_gradients(&mut lora, &g, 3, &mut rng, |m| {
        m.forward_loss(&x, &y, b, t) as f64
    });
    // only adapters are trainable: everything else is in frozen_ranges
    let frozen: usize = lora.frozen_ranges().iter().map(|r| r.len()).sum();
    let adapters: usize = lora
        .params_info()
        .iter()
        .filter(|i| i.name.contains(".lora_"))
        .map(|i| i.range.len())
        .sum();
    assert_eq!(frozen + adapters, lora.params.len());
}

#[test]
fn lora_on_a_q8_0_base_lowers_the_loss_and_keeps_the_norms() {
    let c = cfg(true);
    let (_, bytes) = base_bytes(&c);
    let f32_file = GgufFile::from_bytes(bytes).unwrap();
    let mut q8 = Vec::new();
    quantize_model(&f32_file, GgmlType::Q8_0)
        .unwrap()
        .write_to(&mut q8)
        .unwrap();
    let file = Arc::new(GgufFile::from_bytes(q8).unwrap());
    assert_eq!(
        file.tensor("blk.0.attn_q.weight").unwrap().ty,
        GgmlType::Q8_0
    );
    let mut m = TrainModel::lora_on_base(&file, c.ctx, 2, &spec(all_linear()), None).unwrap();
    let (x, y) = (tokens(2 * 8, c.vocab, 5), tokens(2 * 8, c.vocab, 6));
    let losses = train_adapters(&mut m, &x, &y, (2, 8), 30);
    assert!(
        losses[29] < 0.7 * losses[0],
        "loss {} -> {}",
        losses[0],
        losses[29]
    );
}

/// `steps` AdamW steps (lr 1e-2, no decay) of a LoRA run's adapters on one batch, as the
/// fine-tuning loop takes them (frozen gradients zeroed); returns the losses and asserts
/// that no frozen tensor moved.
pub(super) fn train_adapters(
    m: &mut TrainModel,
    x: &[u32],
    y: &[u32],
    (b, t): (usize, usize),
    steps: usize,
) -> Vec<f32> {
    let (p0, frozen, decay) = (m.params.clone(), m.frozen_ranges(), m.decay_ranges());
    let cfg = AdamWConfig {
        weight_decay: 0.0,
        ..Default::default()
    };
    let mut opt = AdamW::new(m.params.len(), cfg);
    let mut losses = Vec::new();
    for _ in 0..steps {
        m.zero_grad();
        losses.push(m.forward_backward(x, y, b, t));
        for r in &frozen {
            m.grads[r.clone()].fill(0.0);
        }
        opt.step(&mut m.params, &m.grads, 1e-2, &decay);
    }
    for r in &frozen {
        assert_eq!(
            m.params[r.clone()],
            p0[r.clone()],
            "frozen tensors do not move"
        );
    }
    losses
}

#[test]
fn bad_bases_are_named_errors() {
    let c = cfg(true);
    let (_, bytes) = base_bytes(&c);
    let file = Arc::new(GgufFile::from_bytes(bytes).unwrap());
    let mut s = spec(all_linear());
    s.rank = 0;
    let e = TrainModel::lora_on_base(&file, c.ctx, 2, &s, None)
        .err()
        .unwrap();
    assert!(e.to_string().contains("rank 0"), "{e}");
}

#[test]
fn lora_dropout_masks_the_adapters_inputs_and_its_gradients_match_finite_differences() {
    let c = cfg(false);
    let (_, bytes) = base_bytes(&c);
    let file = Arc::new(GgufFile::from_bytes(bytes).unwrap());
    let (b, t) = (2, 6);
    let (x, y) = (tokens(b * t, c.vocab, 5), tokens(b * t, c.vocab, 6));
    let mut m = TrainModel::lora_on_base(&file, c.ctx, 2, &spec(all_linear()), None).unwrap();
    check_dropout(&mut m, &x, &y, b, t);
}

/// With random adapters on `m`: a masked pass (forward_backward with dropout) differs from
/// the clean one, one key gives one mask and another key another, evaluation runs no
/// dropout, and the masked loss's gradients match finite differences.
pub(super) fn check_dropout(m: &mut TrainModel, x: &[u32], y: &[u32], b: usize, t: usize) {
    let mut rng = StdRng::seed_from_u64(3);
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
    let clean = m.forward_loss(x, y, b, t);
    // the loss of one masked pass (forward_backward applies the dropout; grads are reset)
    let masked = |m: &mut TrainModel| {
        m.zero_grad();
        m.forward_backward(x, y, b, t) as f64
    };
    m.set_dropout(Some(Dropout::new(0.3, 11)));
    let l0 = masked(m);
    assert!(
        (l0 - clean as f64).abs() > 1e-4,
        "dropout changed nothing: {l0}"
    );
    assert_eq!(masked(m), l0, "one key, one mask");
    assert_eq!(
        m.forward_loss(x, y, b, t),
        clean,
        "no dropout in evaluation"
    );
    m.set_dropout(Some(Dropout::new(0.3, 12)));
    assert_ne!(masked(m), l0, "another key, another mask");
    m.set_dropout(Some(Dropout::new(0.3, 11)));
    masked(m);
    let g = m.grads.clone();
    check_adapter_gradients(m, &g, 2, &mut rng, masked);
}

/// Central differences (eps 1e-2) of `loss` on `samples` random elements of each LoRA
/// adapter of `m` against the gradient `g` taken at its current parameters, within 3% of
/// the tensor's largest gradient.
pub(super) fn check_adapter_gradients(
    m: &mut TrainModel,
    g: &[f32],
    samples: usize,
    rng: &mut StdRng,
    mut loss: impl FnMut(&mut TrainModel) -> f64,
) {
    let p0 = m.params.clone();
    let adapters: Vec<_> = m
        .params_info()
        .iter()
        .filter(|i| i.name.contains(".lora_"))
        .cloned()
        .collect();
    for info in &adapters {
        let gmax = g[info.range.clone()]
            .iter()
            .fold(0f32, |a, v| a.max(v.abs()));
        for _ in 0..samples {
            let i = rng.random_range(info.range.clone());
            let eps = 1e-2;
            m.params[i] = p0[i] + eps;
            let hi = loss(m);
            m.params[i] = p0[i] - eps;
            let lo = loss(m);
            m.params[i] = p0[i];
            let num = (hi - lo) / (2.0 * eps as f64);
            assert!(
                (num - g[i] as f64).abs() <= 0.03 * gmax as f64 + 2e-4,
                "{}[{i}]: analytic {} vs numeric {num}",
                info.name,
                g[i]
            );
        }
    }
}
