//! A tiny random Qwen3.5 hybrid (llama.cpp's `qwen35` keys and tensor names, as
//! `src/models/qwen35.cpp` loads them), built in memory: for tests of the hybrid path that
//! need no Python. Letters: C width, H / Hkv attention heads, D head size, F MLP width,
//! Hk / Hv GDN key / value heads, Dk / Dv their sizes, K conv taps, W = 2 Hk Dk + Hv Dv.
#![allow(dead_code)]

use super::synthetic::{load, Rng};
use tinynn::quant::{quantize, GgmlType};
use toy::gguf::{GgufFile, GgufWriter, Value, ValueType};
use toy::model::{Model, ModelError};

#[derive(Clone, Debug)]
pub struct HybridSpec {
    /// Per layer: true for a GDN layer.
    pub recurrent: Vec<bool>,
    pub c: usize,
    pub n_head: usize,
    pub n_kv: usize,
    pub d: usize,
    pub rope_dim: usize,
    pub ff: usize,
    pub vocab: usize,
    pub ctx: usize,
    pub hk: usize,
    pub hv: usize,
    pub dk: usize,
    pub dv: usize,
    pub kernel: usize,
}

/// 3 GDN layers then 1 attention layer, twice.
pub fn tiny() -> HybridSpec {
    HybridSpec {
        recurrent: vec![true, true, true, false, true, true, true, false],
        c: 32,
        n_head: 4,
        n_kv: 2,
        d: 8,
        rope_dim: 4,
        ff: 64,
        vocab: 64,
        ctx: 512,
        hk: 2,
        hv: 4,
        dk: 8,
        dv: 8,
        kernel: 4,
    }
}

/// (name, GGUF dims, data) of random weights for `s`.
pub fn tensors(s: &HybridSpec, seed: u64) -> Vec<(String, Vec<u64>, Vec<f32>)> {
    let mut r = Rng(seed | 1);
    let mut t = Vec::new();
    let mut add = |name: String, dims: &[usize], center: f32, scale: f32| {
        let n: usize = dims.iter().product();
        let data = (0..n).map(|_| center + scale * r.next()).collect();
        t.push((name, dims.iter().map(|&d| d as u64).collect(), data));
    };
    let (c, ff) = (s.c, s.ff);
    let lin = |k: usize| 1.5 / (k as f32).sqrt();
    let w = 2 * s.hk * s.dk + s.hv * s.dv;
    add("token_embd.weight".into(), &[c, s.vocab], 0.0, 1.0);
    add("output_norm.weight".into(), &[c], 1.0, 0.3);
    for (l, &rec) in s.recurrent.iter().enumerate() {
        let p = |n: &str| format!("blk.{l}.{n}");
        add(p("attn_norm.weight"), &[c], 1.0, 0.3);
        add(p("post_attention_norm.weight"), &[c], 1.0, 0.3);
        if rec {
            add(p("attn_qkv.weight"), &[c, w], 0.0, 2.0 * lin(c));
            add(p("attn_gate.weight"), &[c, s.hv * s.dv], 0.0, 2.0 * lin(c));
            add(p("ssm_beta.weight"), &[c, s.hv], 0.0, 2.0 * lin(c));
            add(p("ssm_alpha.weight"), &[c, s.hv], 0.0, 2.0 * lin(c));
            add(p("ssm_conv1d.weight"), &[s.kernel, w], 0.0, 0.6);
            add(p("ssm_dt.bias"), &[s.hv], 0.5, 0.5);
            add(p("ssm_a"), &[s.hv], -1.0, 0.5);
            add(p("ssm_norm.weight"), &[s.dv], 1.0, 0.3);
            add(
                p("ssm_out.weight"),
                &[s.hv * s.dv, c],
                0.0,
                lin(s.hv * s.dv),
            );
        } else {
            let (q, kv) = (s.n_head * s.d, s.n_kv * s.d);
            add(p("attn_q.weight"), &[c, 2 * q], 0.0, 2.5 * lin(c));
            add(p("attn_k.weight"), &[c, kv], 0.0, 2.5 * lin(c));
            add(p("attn_v.weight"), &[c, kv], 0.0, lin(c));
            add(p("attn_q_norm.weight"), &[s.d], 1.0, 0.5);
            add(p("attn_k_norm.weight"), &[s.d], 1.0, 0.5);
            add(p("attn_output.weight"), &[q, c], 0.0, lin(q));
        }
        add(p("ffn_gate.weight"), &[c, ff], 0.0, 2.0 * lin(c));
        add(p("ffn_up.weight"), &[c, ff], 0.0, 2.0 * lin(c));
        add(p("ffn_down.weight"), &[ff, c], 0.0, lin(ff));
    }
    t
}

/// The GGUF bytes of `s` with `tensors` (matrices as `ty`, vectors F32), minus the tensors
/// named in `drop`.
pub fn gguf_with(
    s: &HybridSpec,
    tensors: &[(String, Vec<u64>, Vec<f32>)],
    ty: GgmlType,
    drop: &[&str],
) -> Vec<u8> {
    gguf_full(s, tensors, ty, drop, None)
}

/// A runnable chat model: `s` with random weights and the tokenizer and chat template of
/// `vocab_from` (its `tokenizer.*` keys); `s.vocab` must be that tokenizer's size.
pub fn chat_gguf(s: &HybridSpec, vocab_from: &GgufFile, ty: GgmlType) -> Vec<u8> {
    gguf_full(s, &tensors(s, 0x5eed), ty, &[], Some(vocab_from))
}

fn gguf_full(
    s: &HybridSpec,
    tensors: &[(String, Vec<u64>, Vec<f32>)],
    ty: GgmlType,
    drop: &[&str],
    vocab_from: Option<&GgufFile>,
) -> Vec<u8> {
    let mut w = GgufWriter::new();
    for (k, v) in vocab_from.iter().flat_map(|f| f.metadata.iter()) {
        if k.starts_with("tokenizer.") {
            w.add_metadata(k.clone(), v.clone());
        }
    }
    let a = "qwen35";
    w.add_metadata("general.architecture", Value::String(a.into()));
    for (k, v) in [
        ("block_count", s.recurrent.len()),
        ("embedding_length", s.c),
        ("feed_forward_length", s.ff),
        ("attention.head_count", s.n_head),
        ("attention.head_count_kv", s.n_kv),
        ("attention.key_length", s.d),
        ("attention.value_length", s.d),
        ("rope.dimension_count", s.rope_dim),
        ("context_length", s.ctx),
        ("vocab_size", s.vocab),
        ("ssm.conv_kernel", s.kernel),
        ("ssm.state_size", s.dk),
        ("ssm.group_count", s.hk),
        ("ssm.time_step_rank", s.hv),
        ("ssm.inner_size", s.hv * s.dv),
    ] {
        w.add_metadata(format!("{a}.{k}"), Value::U32(v as u32));
    }
    let rec = s.recurrent.iter().map(|&b| Value::Bool(b)).collect();
    w.add_metadata(
        format!("{a}.attention.recurrent_layers"),
        Value::Array(ValueType::Bool, rec),
    );
    w.add_metadata(
        format!("{a}.attention.layer_norm_rms_epsilon"),
        Value::F32(1e-6),
    );
    w.add_metadata(format!("{a}.rope.freq_base"), Value::F32(10000.0));
    // llama.cpp requires M-RoPE sections (summing to rope_dim / 2); text turns them alike
    let half = s.rope_dim as i32 / 2;
    let sections = [half - 2 * (half / 3), half / 3, half / 3, 0];
    w.add_metadata(
        format!("{a}.rope.dimension_sections"),
        Value::Array(ValueType::I32, sections.map(Value::I32).to_vec()),
    );
    for (name, dims, data) in tensors {
        if drop.contains(&name.as_str()) {
            continue;
        }
        let ty = if dims.len() == 2 && !name.contains("ssm_conv1d") {
            ty
        } else {
            GgmlType::F32
        };
        let mut bytes = vec![0u8; ty.row_bytes(data.len() as u64).unwrap() as usize];
        quantize(ty, data, &mut bytes).unwrap();
        w.add_tensor(name.clone(), dims.clone(), ty, bytes).unwrap();
    }
    let mut out = Vec::new();
    w.write_to(&mut out).unwrap();
    out
}

pub fn try_model(s: &HybridSpec, ty: GgmlType) -> Result<Model, ModelError> {
    load(gguf_with(s, &tensors(s, 0x9e37_79b9), ty, &[]))
}

pub fn model(s: &HybridSpec, ty: GgmlType) -> Model {
    try_model(s, ty).expect("synthetic hybrid loads")
}
