//! Tiny random models of every supported architecture, built in memory as GGUF (tensor
//! names and metadata keys as llama.cpp's `llama-arch.cpp`), and a naive f32 reference
//! forward for them: plain loops, full causal softmax, RoPE as ggml defines it. Letters:
//! T tokens, C width, H / Hkv heads, D head size, F MLP width, V vocabulary.
#![allow(dead_code)]

use std::sync::Arc;
use tinynn::quant::{dequantize, quantize, GgmlType};
use toy::gguf::{GgufFile, GgufWriter, Value};
use toy::model::{Model, ModelError};

/// xorshift64: deterministic weights without a rand crate.
pub struct Rng(pub u64);

impl Rng {
    /// Uniform in [-1, 1).
    pub fn next(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }

    fn vec(&mut self, n: usize, center: f32, scale: f32) -> Vec<f32> {
        (0..n).map(|_| center + scale * self.next()).collect()
    }
}

/// The shape and variations of one tiny model.
#[derive(Clone, Copy, Debug)]
pub struct Spec {
    pub arch: &'static str,
    pub n_layer: usize,
    pub c: usize,
    pub n_head: usize,
    pub n_kv: usize,
    pub d: usize,
    pub ff: usize,
    pub vocab: usize,
    pub ctx: usize,
    pub base: f32,
    pub eps: f32,
    /// A separate `output.weight` (else the head is tied to `token_embd.weight`).
    pub output: bool,
    /// Qwen2's q/k/v biases.
    pub qkv_bias: bool,
    /// Qwen3's per-head q/k RMSNorm.
    pub qk_norm: bool,
    /// Llama3 `rope_freqs.weight` divisors.
    pub rope_freqs: bool,
    pub neox: bool,
    /// Gemma 3: embeddings times sqrt(C), post-norms, GELU gate, and a sliding window of
    /// this many positions on every layer but each third (base 10000 there); 0: none.
    pub swa: usize,
}

pub const LLAMA: Spec = Spec {
    arch: "llama",
    n_layer: 2,
    c: 32,
    n_head: 4,
    n_kv: 2,
    d: 8,
    ff: 64,
    vocab: 50,
    ctx: 16,
    base: 10000.0,
    eps: 1e-5,
    output: false,
    qkv_bias: false,
    qk_norm: false,
    rope_freqs: false,
    neox: false,
    swa: 0,
};
pub const LLAMA_OUTPUT: Spec = Spec {
    output: true,
    ..LLAMA
};
pub const LLAMA3: Spec = Spec {
    rope_freqs: true,
    base: 500.0,
    ..LLAMA
};
pub const QWEN2: Spec = Spec {
    arch: "qwen2",
    qkv_bias: true,
    neox: true,
    base: 1000.0,
    eps: 1e-6,
    output: true,
    ..LLAMA
};
/// Head size 16 with 4 heads: q is 64 wide against C = 32, so `key_length` matters.
pub const QWEN3: Spec = Spec {
    arch: "qwen3",
    d: 16,
    qk_norm: true,
    neox: true,
    eps: 1e-6,
    ..LLAMA
};
pub const GPT2: Spec = Spec {
    arch: "gpt2",
    n_kv: 4,
    ..LLAMA
};
/// Three layers, the first two local with a window of 4 (of the test's 10 tokens).
pub const GEMMA3: Spec = Spec {
    arch: "gemma3",
    n_layer: 3,
    d: 16,
    qk_norm: true,
    neox: true,
    eps: 1e-6,
    base: 50.0,
    swa: 4,
    ..LLAMA
};
pub const ALL: [Spec; 7] = [LLAMA, LLAMA_OUTPUT, LLAMA3, QWEN2, QWEN3, GPT2, GEMMA3];

/// Named f32 tensors with GGUF dims ([K, N] for a matrix of N rows of K).
pub struct Tensors(pub Vec<(String, Vec<u64>, Vec<f32>)>);

impl Tensors {
    pub fn get(&self, name: &str) -> Option<&[f32]> {
        self.0.iter().find(|t| t.0 == name).map(|t| &t.2[..])
    }

    fn w(&self, name: &str) -> &[f32] {
        self.get(name).unwrap_or_else(|| panic!("no tensor {name}"))
    }

    fn add(&mut self, r: &mut Rng, name: String, dims: &[usize], center: f32, scale: f32) {
        let n = dims.iter().product();
        let dims = dims.iter().map(|&d| d as u64).collect();
        self.0.push((name, dims, r.vec(n, center, scale)));
    }

    /// Round every matrix through `ty` (as the engine sees it), for a reference on the
    /// same weights as a quantized model.
    pub fn dequantized(&self, ty: GgmlType) -> Tensors {
        let mut out = Tensors(self.0.clone());
        for (_, _, data) in out.0.iter_mut().filter(|t| t.1.len() == 2) {
            let mut q = vec![0u8; ty.row_bytes(data.len() as u64).unwrap() as usize];
            quantize(ty, data, &mut q).unwrap();
            dequantize(ty, &q, data).unwrap();
        }
        out
    }
}

/// Random weights for `s`: matrices scaled so attention scores are O(1) and not uniform.
pub fn weights(s: &Spec) -> Tensors {
    let mut r = Rng(0x2545_f491_4f6c_dd1d);
    let mut t = Tensors(Vec::new());
    let (c, ff, v) = (s.c, s.ff, s.vocab);
    let lin = |k: usize| 1.5 / (k as f32).sqrt();
    t.add(&mut r, "token_embd.weight".into(), &[c, v], 0.0, 1.0);
    if s.arch == "gpt2" {
        t.add(&mut r, "position_embd.weight".into(), &[c, s.ctx], 0.0, 0.5);
        for l in 0..s.n_layer {
            let p = |n: &str| format!("blk.{l}.{n}");
            for (n, k, m) in [("attn_qkv", c, 3 * c), ("attn_output", c, c)]
                .into_iter()
                .chain([("ffn_up", c, ff), ("ffn_down", ff, c)])
            {
                t.add(
                    &mut r,
                    p(&format!("{n}.weight")),
                    &[k, m],
                    0.0,
                    2.0 * lin(k),
                );
                t.add(&mut r, p(&format!("{n}.bias")), &[m], 0.0, 0.5);
            }
            for n in ["attn_norm", "ffn_norm"] {
                t.add(&mut r, p(&format!("{n}.weight")), &[c], 1.0, 0.3);
                t.add(&mut r, p(&format!("{n}.bias")), &[c], 0.0, 0.3);
            }
        }
        t.add(&mut r, "output_norm.weight".into(), &[c], 1.0, 0.3);
        t.add(&mut r, "output_norm.bias".into(), &[c], 0.0, 0.3);
        return t;
    }
    let (q, kv) = (s.n_head * s.d, s.n_kv * s.d);
    if s.output {
        t.add(&mut r, "output.weight".into(), &[c, v], 0.0, 0.5);
    }
    if s.rope_freqs {
        let f = (0..s.d / 2).map(|i| [4.0, 1.0, 8.0, 2.0][i % 4]).collect();
        t.0.push(("rope_freqs.weight".into(), vec![s.d as u64 / 2], f));
    }
    t.add(&mut r, "output_norm.weight".into(), &[c], 1.0, 0.3);
    for l in 0..s.n_layer {
        let p = |n: &str| format!("blk.{l}.{n}");
        t.add(&mut r, p("attn_norm.weight"), &[c], 1.0, 0.3);
        t.add(&mut r, p("attn_q.weight"), &[c, q], 0.0, 2.5 * lin(c));
        t.add(&mut r, p("attn_k.weight"), &[c, kv], 0.0, 2.5 * lin(c));
        t.add(&mut r, p("attn_v.weight"), &[c, kv], 0.0, lin(c));
        if s.qkv_bias {
            t.add(&mut r, p("attn_q.bias"), &[q], 0.0, 0.8);
            t.add(&mut r, p("attn_k.bias"), &[kv], 0.0, 0.8);
            t.add(&mut r, p("attn_v.bias"), &[kv], 0.0, 0.8);
        }
        if s.qk_norm {
            t.add(&mut r, p("attn_q_norm.weight"), &[s.d], 1.0, 0.8);
            t.add(&mut r, p("attn_k_norm.weight"), &[s.d], 1.0, 0.8);
        }
        t.add(&mut r, p("attn_output.weight"), &[q, c], 0.0, lin(q));
        if s.swa > 0 {
            t.add(&mut r, p("post_attention_norm.weight"), &[c], 1.0, 0.3);
            t.add(&mut r, p("post_ffw_norm.weight"), &[c], 1.0, 0.3);
        }
        t.add(&mut r, p("ffn_norm.weight"), &[c], 1.0, 0.3);
        t.add(&mut r, p("ffn_gate.weight"), &[c, ff], 0.0, 2.0 * lin(c));
        t.add(&mut r, p("ffn_up.weight"), &[c, ff], 0.0, 2.0 * lin(c));
        t.add(&mut r, p("ffn_down.weight"), &[ff, c], 0.0, lin(ff));
    }
    t
}

/// The GGUF bytes of `s` with `tensors`, matrices stored as `ty` (vectors stay F32).
pub fn gguf(s: &Spec, tensors: &Tensors, ty: GgmlType) -> Vec<u8> {
    gguf_with(s, tensors, |_| ty)
}

/// [`gguf`] with matrix `name` stored as `ty_of(name)`.
pub fn gguf_with(s: &Spec, tensors: &Tensors, ty_of: impl Fn(&str) -> GgmlType) -> Vec<u8> {
    let mut w = GgufWriter::new();
    let a = s.arch;
    w.add_metadata("general.architecture", Value::String(a.into()));
    for (k, v) in [
        ("block_count", s.n_layer),
        ("embedding_length", s.c),
        ("feed_forward_length", s.ff),
        ("attention.head_count", s.n_head),
        ("attention.head_count_kv", s.n_kv),
        ("context_length", s.ctx),
        ("vocab_size", s.vocab),
    ] {
        w.add_metadata(format!("{a}.{k}"), Value::U32(v as u32));
    }
    if s.qk_norm {
        w.add_metadata(format!("{a}.attention.key_length"), Value::U32(s.d as u32));
        w.add_metadata(
            format!("{a}.attention.value_length"),
            Value::U32(s.d as u32),
        );
    }
    let eps = if a == "gpt2" {
        "attention.layer_norm_epsilon"
    } else {
        "attention.layer_norm_rms_epsilon"
    };
    w.add_metadata(format!("{a}.{eps}"), Value::F32(s.eps));
    w.add_metadata(format!("{a}.rope.freq_base"), Value::F32(s.base));
    if s.swa > 0 {
        w.add_metadata(
            format!("{a}.attention.sliding_window"),
            Value::U32(s.swa as u32),
        );
        w.add_metadata(
            format!("{a}.attention.sliding_window_pattern"),
            Value::U32(3),
        );
    }
    for (name, dims, data) in &tensors.0 {
        let ty = if dims.len() == 2 {
            ty_of(name)
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

pub fn load(bytes: Vec<u8>) -> Result<Model, ModelError> {
    Model::from_gguf(Arc::new(GgufFile::from_bytes(bytes)?))
}

/// The model of `s` with its weights in `ty`.
pub fn model(s: &Spec, ty: GgmlType) -> Model {
    load(gguf(s, &weights(s), ty)).expect("synthetic model loads")
}

/// A mistake to plant in the reference, to show the tolerance catches it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Bug {
    SwapRopeMode,
    DropBias,
    KvHeadModulo,
    NoQkNorm,
    NoRopeFreqs,
    /// Ignore `rope.freq_base` (use the default 10000).
    DefaultBase,
    /// Gemma 3's: attend to every position on the local layers.
    NoWindow,
    /// Gemma 3's: skip the norms after attention and the MLP.
    NoPostNorm,
    /// Gemma 3's: embeddings not scaled by sqrt(C).
    NoEmbdScale,
    /// Gemma 3's: the local layers turn by `rope.freq_base` too.
    OneBase,
}

/// Whether layer `l` of `s` is a sliding-window layer (every layer but each third).
fn local(s: &Spec, l: usize) -> bool {
    s.swa > 0 && l % 3 < 2
}

/// x (T, K) W^T + b, W stored as N rows of K -> (T, N).
fn linear(x: &[f32], w: &[f32], b: Option<&[f32]>, k: usize) -> Vec<f32> {
    let n = w.len() / k;
    let mut y = Vec::with_capacity(x.len() / k * n);
    for xr in x.chunks(k) {
        for (j, wr) in w.chunks(k).enumerate() {
            let dot: f32 = xr.iter().zip(wr).map(|(a, b)| a * b).sum();
            y.push(dot + b.map_or(0.0, |b| b[j]));
        }
    }
    y
}

/// Rows of w.len(): x / sqrt(mean(x^2) + eps) * w.
fn rmsnorm(x: &[f32], w: &[f32], eps: f32) -> Vec<f32> {
    let mut out = Vec::with_capacity(x.len());
    for r in x.chunks(w.len()) {
        let ms = r.iter().map(|v| v * v).sum::<f32>() / w.len() as f32;
        out.extend(r.iter().zip(w).map(|(v, wi)| v / (ms + eps).sqrt() * wi));
    }
    out
}

fn layernorm(x: &[f32], w: &[f32], b: &[f32], eps: f32) -> Vec<f32> {
    let c = w.len() as f32;
    let mut out = Vec::with_capacity(x.len());
    for r in x.chunks(w.len()) {
        let mean = r.iter().sum::<f32>() / c;
        let var = r.iter().map(|v| (v - mean).powi(2)).sum::<f32>() / c;
        let inv = 1.0 / (var + eps).sqrt();
        out.extend((0..r.len()).map(|i| (r[i] - mean) * inv * w[i] + b[i]));
    }
    out
}

/// Rotate each head (D) of the row `x` for position `pos`: theta_i = pos * base^(-2i/D) / f_i.
fn rope(x: &mut [f32], d: usize, pos: usize, base: f32, neox: bool, ff: Option<&[f32]>) {
    for h in x.chunks_mut(d) {
        for i in 0..d / 2 {
            let f = ff.map_or(1.0, |f| f[i]) as f64;
            let theta = pos as f64 * (base as f64).powf(-2.0 * i as f64 / d as f64) / f;
            let (sin, cos) = (theta.sin() as f32, theta.cos() as f32);
            let (a, b) = if neox {
                (i, i + d / 2)
            } else {
                (2 * i, 2 * i + 1)
            };
            let (x0, x1) = (h[a], h[b]);
            h[a] = x0 * cos - x1 * sin;
            h[b] = x0 * sin + x1 * cos;
        }
    }
}

/// Causal softmax attention over the last `window` positions (all with 0): q (T, H*D), k, v
/// (T, Hkv*D) -> (T, H*D).
fn attention(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    s: &Spec,
    bug: Option<Bug>,
    window: usize,
) -> Vec<f32> {
    let (h, hkv, d) = (s.n_head, s.n_kv, s.d);
    let t = q.len() / (h * d);
    let mut out = vec![0f32; q.len()];
    for i in 0..t {
        for hd in 0..h {
            let g = if bug == Some(Bug::KvHeadModulo) {
                hd % hkv
            } else {
                hd / (h / hkv)
            };
            let qv = &q[(i * h + hd) * d..][..d];
            let kv_row = |m: &[f32], j: usize| m[(j * hkv + g) * d..][..d].to_vec();
            let first = if window > 0 {
                (i + 1).saturating_sub(window)
            } else {
                0
            };
            let sc: Vec<f32> = (first..=i)
                .map(|j| qv.iter().zip(kv_row(k, j)).map(|(a, b)| a * b).sum::<f32>())
                .map(|x| x / (d as f32).sqrt())
                .collect();
            let max = sc.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let e: Vec<f32> = sc.iter().map(|x| (x - max).exp()).collect();
            let sum: f32 = e.iter().sum();
            let o = &mut out[(i * h + hd) * d..][..d];
            for (j, ej) in (first..).zip(&e) {
                o.iter_mut()
                    .zip(kv_row(v, j))
                    .for_each(|(a, b)| *a += ej / sum * b);
            }
        }
    }
    out
}

fn add(x: &mut [f32], y: &[f32]) {
    x.iter_mut().zip(y).for_each(|(a, b)| *a += b);
}

/// All logits (T, V) of `tokens` from position 0, with `bug` planted if given.
pub fn reference(s: &Spec, w: &Tensors, tokens: &[u32], bug: Option<Bug>) -> Vec<f32> {
    let c = s.c;
    let p = |l: usize, n: &str| format!("blk.{l}.{n}");
    let emb = w.w("token_embd.weight");
    let mut x: Vec<f32> = tokens
        .iter()
        .flat_map(|&t| emb[t as usize * c..][..c].to_vec())
        .collect();
    let b = |name: String| w.get(&name).filter(|_| bug != Some(Bug::DropBias));
    if s.arch == "gpt2" {
        let n = x.len();
        add(&mut x, &w.w("position_embd.weight")[..n]);
        for l in 0..s.n_layer {
            let ln = |x: &[f32], n: &str| {
                let (wn, bn) = (p(l, &format!("{n}.weight")), p(l, &format!("{n}.bias")));
                layernorm(x, w.w(&wn), w.w(&bn), s.eps)
            };
            let lin = |x: &[f32], n: &str, k: usize| {
                linear(
                    x,
                    w.w(&p(l, &format!("{n}.weight"))),
                    b(p(l, &format!("{n}.bias"))),
                    k,
                )
            };
            let qkv = lin(&ln(&x, "attn_norm"), "attn_qkv", c);
            let part = |i: usize| -> Vec<f32> {
                qkv.chunks(3 * c)
                    .flat_map(|r| r[i * c..][..c].to_vec())
                    .collect()
            };
            let att = attention(&part(0), &part(1), &part(2), s, bug, 0);
            add(&mut x, &lin(&att, "attn_output", c));
            let mut a = lin(&ln(&x, "ffn_norm"), "ffn_up", c);
            for u in a.iter_mut() {
                *u = 0.5 * *u * (1.0 + (0.797_884_6 * *u * (1.0 + 0.044715 * *u * *u)).tanh());
            }
            add(&mut x, &lin(&a, "ffn_down", s.ff));
        }
        let h = layernorm(
            &x,
            w.w("output_norm.weight"),
            w.w("output_norm.bias"),
            s.eps,
        );
        return linear(&h, emb, None, c);
    }
    let (qd, kvd) = (s.n_head * s.d, s.n_kv * s.d);
    let freqs = w
        .get("rope_freqs.weight")
        .filter(|_| bug != Some(Bug::NoRopeFreqs));
    let neox = s.neox != (bug == Some(Bug::SwapRopeMode));
    let base = if bug == Some(Bug::DefaultBase) {
        10000.0
    } else {
        s.base
    };
    if s.swa > 0 && bug != Some(Bug::NoEmbdScale) {
        x.iter_mut().for_each(|v| *v *= (c as f32).sqrt());
    }
    let post = |l: usize, y: Vec<f32>, n: &str| match s.swa > 0 && bug != Some(Bug::NoPostNorm) {
        true => rmsnorm(&y, w.w(&p(l, &format!("{n}.weight"))), s.eps),
        false => y,
    };
    for l in 0..s.n_layer {
        let (base, window) = match local(s, l) {
            true if bug == Some(Bug::OneBase) => (base, s.swa),
            true => (10000.0, if bug == Some(Bug::NoWindow) { 0 } else { s.swa }),
            false => (base, 0),
        };
        let lin = |x: &[f32], n: &str, k: usize| {
            linear(
                x,
                w.w(&p(l, &format!("{n}.weight"))),
                b(p(l, &format!("{n}.bias"))),
                k,
            )
        };
        let h = rmsnorm(&x, w.w(&p(l, "attn_norm.weight")), s.eps);
        let (mut q, mut k, v) = (
            lin(&h, "attn_q", c),
            lin(&h, "attn_k", c),
            lin(&h, "attn_v", c),
        );
        if s.qk_norm && bug != Some(Bug::NoQkNorm) {
            q = rmsnorm(&q, w.w(&p(l, "attn_q_norm.weight")), s.eps);
            k = rmsnorm(&k, w.w(&p(l, "attn_k_norm.weight")), s.eps);
        }
        for i in 0..tokens.len() {
            rope(&mut q[i * qd..][..qd], s.d, i, base, neox, freqs);
            rope(&mut k[i * kvd..][..kvd], s.d, i, base, neox, freqs);
        }
        let att = attention(&q, &k, &v, s, bug, window);
        add(
            &mut x,
            &post(l, lin(&att, "attn_output", qd), "post_attention_norm"),
        );
        let h = rmsnorm(&x, w.w(&p(l, "ffn_norm.weight")), s.eps);
        let (g, u) = (lin(&h, "ffn_gate", c), lin(&h, "ffn_up", c));
        let a: Vec<f32> = g
            .iter()
            .zip(&u)
            .map(|(&g, u)| match s.swa > 0 {
                true => 0.5 * g * (1.0 + (0.797_884_6 * g * (1.0 + 0.044715 * g * g)).tanh()) * u,
                false => g / (1.0 + (-g).exp()) * u,
            })
            .collect();
        add(&mut x, &post(l, lin(&a, "ffn_down", s.ff), "post_ffw_norm"));
    }
    let h = rmsnorm(&x, w.w("output_norm.weight"), s.eps);
    linear(&h, w.get("output.weight").unwrap_or(emb), None, c)
}
