//! LoRA adapters as llama.cpp's GGUF (`src/llama-adapter.cpp` at 0c1e570): the file layout
//! byte for byte where it matters (keys, tensor names, ggml dims), round trips, merging
//! against a naive W + s·B·A on tiny random models (`common/synthetic.rs`), and the typed
//! errors on adapters that do not fit.

#[path = "common/synthetic.rs"]
mod synthetic;

use std::path::PathBuf;
use std::sync::Arc;
use synthetic::{gguf, load, weights, Rng, Tensors, LLAMA};
use tinynn::quant::{dequantize, GgmlType};
use toy::finetune::adapter::{AdapterError, LoraAdapter, LoraTensor};
use toy::finetune::merge::{merge_into, merged_gguf};
use toy::gguf::{GgufFile, GgufWriter, Value};
use toy::model::{Logits, Model};

const TOKENS: [u32; 8] = [3, 17, 42, 0, 49, 8, 23, 5];

/// A scratch file path unique to this process and test.
fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("toy-adapter-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir.join(name)
}

fn lora_tensor(r: &mut Rng, base: &str, n_in: usize, n_out: usize, rank: usize) -> LoraTensor {
    LoraTensor {
        base: base.into(),
        n_in,
        n_out,
        rank,
        a: (0..rank * n_in).map(|_| 0.3 * r.next()).collect(),
        // nonzero B (a fresh LoRA has B = 0 and changes nothing)
        b: (0..n_out * rank).map(|_| 0.3 * r.next()).collect(),
    }
}

/// A rank-4 adapter on q (32 -> 32), v (32 -> 16) of layer 0 and ffn_down (64 -> 32) of layer 1.
fn adapter(seed: u64, alpha: f32) -> LoraAdapter {
    let mut r = Rng(seed);
    LoraAdapter {
        arch: "llama".into(),
        alpha,
        tensors: vec![
            lora_tensor(&mut r, "blk.0.attn_q.weight", 32, 32, 4),
            lora_tensor(&mut r, "blk.0.attn_v.weight", 32, 16, 4),
            lora_tensor(&mut r, "blk.1.ffn_down.weight", 64, 32, 4),
        ],
    }
}

/// W += s · B A with plain loops in f64, independent of the library's kernel.
fn naive_merge(w: &mut Tensors, ad: &LoraAdapter, user: f32) {
    for t in &ad.tensors {
        let s = f64::from(user * ad.scale(t));
        let m = &mut w.0.iter_mut().find(|x| x.0 == t.base).expect("base").2;
        for o in 0..t.n_out {
            for i in 0..t.n_in {
                let d: f64 = (0..t.rank)
                    .map(|j| f64::from(t.b[o * t.rank + j]) * f64::from(t.a[j * t.n_in + i]))
                    .sum();
                m[o * t.n_in + i] += (s * d) as f32;
            }
        }
    }
}

fn logits(m: &Model) -> Vec<f32> {
    let mut s = m.new_state(16, 16);
    m.forward(&mut s, &TOKENS, Logits::All)
        .expect("forward")
        .to_vec()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()))
}

fn base_file(ty: GgmlType) -> GgufFile {
    GgufFile::from_bytes(gguf(&LLAMA, &weights(&LLAMA), ty)).expect("base gguf")
}

#[test]
fn adapter_round_trips_through_a_file() {
    let ad = adapter(7, 8.0);
    let p = tmp("round_trip.gguf");
    ad.write(&p).expect("write");
    let back = LoraAdapter::read(&p).expect("read");
    assert_eq!(back, ad);
    assert_eq!(back.scale(&back.tensors[0]), 2.0);
}

#[test]
fn adapter_file_has_llama_cpp_keys_names_and_dims() {
    let ad = adapter(7, 16.0);
    let p = tmp("layout.gguf");
    ad.write(&p).expect("write");
    let f = GgufFile::open(&p).expect("gguf");
    assert_eq!(
        f.get("general.type"),
        Some(&Value::String("adapter".into()))
    );
    assert_eq!(f.get("adapter.type"), Some(&Value::String("lora".into())));
    assert_eq!(f.get("adapter.lora.alpha"), Some(&Value::F32(16.0)));
    assert_eq!(
        f.get("general.architecture"),
        Some(&Value::String("llama".into()))
    );
    let names: Vec<&str> = f.tensors.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "blk.0.attn_q.weight.lora_a",
            "blk.0.attn_q.weight.lora_b",
            "blk.0.attn_v.weight.lora_a",
            "blk.0.attn_v.weight.lora_b",
            "blk.1.ffn_down.weight.lora_a",
            "blk.1.ffn_down.weight.lora_b",
        ]
    );
    // llama.cpp: lora_a ne = [n_in, r], lora_b ne = [r, n_out], checked against W's ne
    let dims = |n: &str| f.tensor(n).expect(n).dims.clone();
    assert_eq!(dims("blk.0.attn_v.weight.lora_a"), [32, 4]);
    assert_eq!(dims("blk.0.attn_v.weight.lora_b"), [4, 16]);
    assert_eq!(dims("blk.1.ffn_down.weight.lora_a"), [64, 4]);
    assert_eq!(dims("blk.1.ffn_down.weight.lora_b"), [4, 32]);
    // f32, row-major: element (j, i) of A at j * n_in + i == ggml's [i + j * ne0]
    let t = f.tensor("blk.1.ffn_down.weight.lora_a").expect("a");
    assert_eq!(t.ty, GgmlType::F32);
    let mut a = vec![0f32; 64 * 4];
    dequantize(t.ty, f.tensor_data(t), &mut a).expect("f32");
    assert_eq!(a, ad.tensors[2].a);
}

#[test]
fn merged_model_equals_naive_merge_and_lora_at_load() {
    let ad = adapter(11, 8.0);
    let ad2 = adapter(12, 0.0); // alpha 0: scale 1, as llama.cpp
    let user = (0.7, 1.3);
    let mut w = weights(&LLAMA);
    naive_merge(&mut w, &ad, user.0);
    naive_merge(&mut w, &ad2, user.1);
    let reference = logits(&load(gguf(&LLAMA, &w, GgmlType::F32)).expect("reference"));

    let base = base_file(GgmlType::F32);
    let loras = [(&ad, user.0), (&ad2, user.1)];
    let at_load = Model::from_gguf(Arc::new(merged_gguf(&base, &loras).expect("merge")));
    let at_load = logits(&at_load.expect("model"));
    let d = max_diff(&at_load, &reference);
    assert!(d < 1e-4, "lora at load vs naive merge: max |diff| {d}");

    // the merged file written to disk loads to the same logits
    let p = tmp("merged.gguf");
    merge_into(&base, &loras)
        .expect("merge")
        .write_file(&p)
        .expect("write");
    let from_file = logits(&Model::open(&p).expect("merged model"));
    assert!(max_diff(&from_file, &at_load) < 1e-6);

    // and the adapter matters; at scale 0 it is the base model again
    let zero = merged_gguf(&base, &[(&ad, 0.0)]).expect("merge");
    let zero = logits(&Model::from_gguf(Arc::new(zero)).expect("model"));
    let plain = logits(&Model::from_gguf(Arc::new(base)).expect("base"));
    let d = max_diff(&plain, &reference);
    assert!(d > 1e-2, "adapter changes the logits by only {d}");
    assert_eq!(zero, plain);
}

#[test]
fn merge_on_a_quantized_base_adds_to_the_decoded_weights_and_keeps_the_rest() {
    let ad = adapter(5, 4.0);
    let base = base_file(GgmlType::Q8_0);
    let merged = merged_gguf(&base, &[(&ad, 1.0)]).expect("merge");
    let mut want = weights(&LLAMA).dequantized(GgmlType::Q8_0);
    naive_merge(&mut want, &ad, 1.0);
    for t in &base.tensors {
        let m = merged.tensor(&t.name).expect("tensor kept");
        assert_eq!(m.dims, t.dims, "{}", t.name);
        if ad.tensors.iter().any(|l| l.base == t.name) {
            assert_eq!(m.ty, GgmlType::F32, "{}", t.name);
            let mut got = vec![0f32; m.n_elements() as usize];
            dequantize(m.ty, merged.tensor_data(m), &mut got).expect("f32");
            let d = max_diff(&got, want.get(&t.name).expect("want"));
            assert!(d < 1e-5, "{}: max |diff| {d}", t.name);
        } else {
            assert_eq!(m.ty, t.ty, "{}", t.name);
            assert_eq!(merged.tensor_data(m), base.tensor_data(t), "{}", t.name);
        }
    }
}

#[test]
fn adapter_for_another_arch_is_refused() {
    let ad = LoraAdapter {
        arch: "qwen2".into(),
        ..adapter(1, 8.0)
    };
    let e = ad.check_base(&base_file(GgmlType::F32)).unwrap_err();
    assert!(matches!(e, AdapterError::ArchMismatch { .. }), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("qwen2") && msg.contains("llama"), "{msg}");
    assert!(merged_gguf(&base_file(GgmlType::F32), &[(&ad, 1.0)]).is_err());
}

#[test]
fn adapter_on_a_missing_base_tensor_is_refused() {
    let mut ad = adapter(1, 8.0);
    ad.tensors[1].base = "blk.7.attn_v.weight".into();
    let e = ad.check_base(&base_file(GgmlType::F32)).unwrap_err();
    assert!(
        matches!(e, AdapterError::MissingBase(ref n) if n == "blk.7.attn_v.weight"),
        "{e}"
    );
}

#[test]
fn adapter_of_the_wrong_shape_names_the_tensor_and_both_shapes() {
    let mut r = Rng(3);
    let mut ad = adapter(1, 8.0);
    // attn_k is [32, 16] in the base
    ad.tensors[0] = lora_tensor(&mut r, "blk.0.attn_k.weight", 32, 48, 4);
    let e = ad.check_base(&base_file(GgmlType::F32)).unwrap_err();
    assert!(matches!(e, AdapterError::ShapeMismatch { .. }), "{e}");
    let msg = e.to_string();
    for part in ["blk.0.attn_k.weight", "[32, 16]", "[32, 48]"] {
        assert!(msg.contains(part), "{part} not in: {msg}");
    }
}

#[test]
fn truncated_adapter_file_is_an_error() {
    let p = tmp("truncated.gguf");
    adapter(1, 8.0).write(&p).expect("write");
    let bytes = std::fs::read(&p).expect("read");
    for cut in [bytes.len() - 8, bytes.len() / 2, 20] {
        std::fs::write(&p, &bytes[..cut]).expect("write");
        let e = LoraAdapter::read(&p).unwrap_err();
        assert!(matches!(e, AdapterError::Gguf(_)), "cut at {cut}: {e}");
    }
}

/// An adapter-shaped file, written by hand, with `tensors` (name, dims) of f32 zeros.
fn hand_written(kind: &str, tensors: &[(&str, [u64; 2])]) -> PathBuf {
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", Value::String("llama".into()));
    w.add_metadata("general.type", Value::String("adapter".into()));
    w.add_metadata("adapter.type", Value::String(kind.into()));
    w.add_metadata("adapter.lora.alpha", Value::F32(1.0));
    for (name, dims) in tensors {
        let n = (dims[0] * dims[1]) as usize;
        w.add_tensor(*name, dims.to_vec(), GgmlType::F32, vec![0u8; 4 * n])
            .expect("tensor");
    }
    let p = tmp(&format!("hand-{kind}-{}.gguf", tensors.len()));
    w.write_file(&p).expect("write");
    p
}

#[test]
fn files_that_are_not_lora_adapters_are_refused() {
    let model = tmp("model.gguf");
    std::fs::write(&model, gguf(&LLAMA, &weights(&LLAMA), GgmlType::F32)).expect("write");
    let e = LoraAdapter::read(&model).unwrap_err();
    assert!(matches!(e, AdapterError::NotAdapter { .. }), "{e}");

    let cvec = hand_written("control_vector", &[]);
    let e = LoraAdapter::read(&cvec).unwrap_err();
    assert!(
        matches!(e, AdapterError::NotLora { ref found } if found.contains("control_vector")),
        "{e}"
    );
}

#[test]
fn lora_a_without_lora_b_and_rank_mismatch_are_refused() {
    let p = hand_written("lora", &[("blk.0.attn_q.weight.lora_a", [32, 4])]);
    let e = LoraAdapter::read(&p).unwrap_err();
    assert!(
        matches!(e, AdapterError::MissingPair { ref missing, .. } if missing == "blk.0.attn_q.weight.lora_b"),
        "{e}"
    );
    let p = hand_written(
        "lora",
        &[
            ("blk.0.attn_q.weight.lora_a", [32, 4]),
            ("blk.0.attn_q.weight.lora_b", [3, 32]),
        ],
    );
    let e = LoraAdapter::read(&p).unwrap_err();
    assert!(
        matches!(e, AdapterError::RankMismatch { a: 4, b: 3, .. }),
        "{e}"
    );
}
