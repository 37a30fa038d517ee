//! A LoRA adapter on a Qwen3.5 hybrid runs unmerged (`Model::add_lora`, what `toy serve
//! --lora` and `toy generate --lora` use): on every product of both layer kinds (the Gated
//! DeltaNet's attn_qkv, attn_gate, ssm_beta, ssm_alpha, ssm_out; the gated attention's
//! attn_q with its gate heads, attn_k, attn_v, attn_output; the MLP's three) it gives the
//! merged model's logits, in prefill and in decode.

#[path = "common/hybrid.rs"]
mod hybrid;
#[path = "common/synthetic.rs"]
mod synthetic;

use std::sync::Arc;
use synthetic::Rng;
use tinynn::quant::GgmlType;
use toy::finetune::adapter::{LoraAdapter, LoraTensor};
use toy::finetune::merge::merged_gguf;
use toy::gguf::GgufFile;
use toy::model::{Logits, Model};

const TOKENS: [u32; 8] = [3, 17, 42, 0, 49, 8, 23, 5];

fn adapter(s: &hybrid::HybridSpec) -> LoraAdapter {
    let mut r = Rng(77);
    let (c, ff) = (s.c, s.ff);
    let (q, kv) = (s.n_head * s.d, s.n_kv * s.d);
    let (vw, w) = (s.hv * s.dv, 2 * s.hk * s.dk + s.hv * s.dv);
    let mut tensors = Vec::new();
    for (i, &gdn) in s.recurrent.iter().enumerate() {
        let mixer: Vec<(&str, usize, usize)> = if gdn {
            vec![
                ("attn_qkv", c, w),
                ("attn_gate", c, vw),
                ("ssm_beta", c, s.hv),
                ("ssm_alpha", c, s.hv),
                ("ssm_out", vw, c),
            ]
        } else {
            vec![
                ("attn_q", c, 2 * q),
                ("attn_k", c, kv),
                ("attn_v", c, kv),
                ("attn_output", q, c),
            ]
        };
        let mlp = [("ffn_gate", c, ff), ("ffn_up", c, ff), ("ffn_down", ff, c)];
        for (name, n_in, n_out) in mixer.into_iter().chain(mlp) {
            let rank = 2;
            tensors.push(LoraTensor {
                base: format!("blk.{i}.{name}.weight"),
                n_in,
                n_out,
                rank,
                a: (0..rank * n_in).map(|_| 0.3 * r.next()).collect(),
                b: (0..n_out * rank).map(|_| 0.3 * r.next()).collect(),
            });
        }
    }
    LoraAdapter {
        arch: "qwen35".into(),
        alpha: 4.0,
        tensors,
    }
}

fn logits(m: &Model, picks: &[(usize, f32)]) -> Vec<f32> {
    let mut s = m.new_state(16, 16);
    let mut c = m.new_cache(16);
    let mut out = m
        .forward_cache_lora(&mut s, &mut c, &TOKENS[..6], Logits::All, picks)
        .unwrap()
        .to_vec();
    for &t in &TOKENS[6..] {
        let step = m.forward_cache_lora(&mut s, &mut c, &[t], Logits::Last, picks);
        out.extend_from_slice(step.unwrap());
    }
    out
}

#[test]
fn unmerged_hybrid_adapter_gives_the_merged_models_logits() {
    let s = hybrid::tiny();
    let base = hybrid::gguf_with(&s, &hybrid::tensors(&s, 0x9e37_79b9), GgmlType::F32, &[]);
    let file = Arc::new(GgufFile::from_bytes(base).unwrap());
    let ad = adapter(&s);
    let mut m = Model::from_gguf(file.clone()).unwrap();
    assert_eq!(m.add_lora(&ad).expect("a qwen35 adapter runs unmerged"), 0);
    let merged = Model::from_gguf(Arc::new(merged_gguf(&file, &[(&ad, 1.0)]).unwrap())).unwrap();
    let (plain, got, want) = (
        logits(&m, &[]),
        logits(&m, &[(0, 1.0)]),
        logits(&merged, &[]),
    );
    let top = want.iter().fold(1f32, |a, x| a.max(x.abs()));
    let diff = |a: &[f32], b: &[f32]| a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
    assert!(
        diff(&got, &want) < 5e-4 * top,
        "unmerged vs merged: {}",
        diff(&got, &want)
    );
    assert!(
        diff(&got, &plain) > 1e-2 * top,
        "the adapter changes the logits"
    );
}
