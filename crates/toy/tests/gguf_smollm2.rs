//! Reads the real SmolLM2-135M-Instruct Q4_1 GGUF (spec: ggml `docs/gguf.md`), checks known
//! metadata and tensors, and writes it back byte-identical with `GgufWriter::from_file`.
//!
//! The model path comes from `TOY_MODEL`, else `<workspace>/models/`. A missing model fails
//! the test (run `scripts/fetch-model.sh`) rather than skipping it silently.

mod common;

use common::model_path;
use tinynn::quant::GgmlType;
use toy::gguf::{GgufFile, GgufWriter, Value, ValueType};

#[test]
fn gguf_smollm2_metadata_and_tensors() {
    let f = GgufFile::open(&model_path()).expect("open model");
    assert_eq!(f.version, 3);
    assert_eq!(f.architecture(), Some("llama"));
    assert_eq!(f.alignment, 32);
    assert_eq!(f.tensors.len(), 272);
    assert_eq!(f.get_u64("llama.block_count"), Some(30));
    assert_eq!(f.get_u64("llama.embedding_length"), Some(576));
    assert_eq!(f.get_u64("llama.attention.head_count"), Some(9));
    assert_eq!(f.get_u64("llama.attention.head_count_kv"), Some(3));
    assert_eq!(f.get_u64("llama.context_length"), Some(8192));
    assert_eq!(f.get_f32("llama.rope.freq_base"), Some(100000.0));
    assert_eq!(f.get_str("tokenizer.ggml.model"), Some("gpt2"));
    match f.get("tokenizer.ggml.tokens") {
        Some(Value::Array(ValueType::String, tokens)) => {
            assert_eq!(tokens.len(), 49152);
            assert_eq!(tokens[0].as_str(), Some("<|endoftext|>"));
        }
        other => panic!("tokenizer.ggml.tokens: expected string array, got {other:?}"),
    }

    let emb = f.tensor("token_embd.weight").expect("token_embd.weight");
    assert_eq!(emb.dims, vec![576, 49152]);
    // llama.cpp's Q4_1 mix keeps the token embedding at Q8_0.
    assert_eq!(emb.ty, GgmlType::Q8_0);
    assert_eq!(f.tensor_data(emb).len() as u64, 576 / 32 * 34 * 49152);
    let q = f
        .tensor("blk.0.attn_q.weight")
        .expect("blk.0.attn_q.weight");
    assert_eq!(
        (q.dims.as_slice(), q.ty),
        (&[576u64, 576][..], GgmlType::Q4_1)
    );
    let count = |ty| f.tensors.iter().filter(|t| t.ty == ty).count();
    let counts = [GgmlType::F32, GgmlType::Q4_1, GgmlType::Q8_0].map(count);
    assert_eq!(counts, [61, 210, 1]);
    let norm = f
        .tensor("blk.0.attn_norm.weight")
        .expect("blk.0.attn_norm.weight");
    assert_eq!(
        (norm.dims.as_slice(), norm.ty),
        (&[576u64][..], GgmlType::F32)
    );
    for t in &f.tensors {
        assert_eq!(t.offset % f.alignment, 0, "{}", t.name);
        assert_eq!(f.tensor_data(t).len() as u64, t.n_bytes(), "{}", t.name);
    }
}

#[test]
fn gguf_smollm2_round_trip_is_byte_identical() {
    let f = GgufFile::open(&model_path()).expect("open model");
    let mut out = Vec::with_capacity(f.bytes().len());
    GgufWriter::from_file(&f).write_to(&mut out).expect("write");
    assert_eq!(out.len(), f.bytes().len(), "length differs");
    if let Some(i) = out.iter().zip(f.bytes()).position(|(a, b)| a != b) {
        panic!("first differing byte at offset {i}");
    }
}
