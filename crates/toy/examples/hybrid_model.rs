//! Writes a random Qwen3.5-style hybrid GGUF (llama.cpp's `qwen35`) the size of
//! SmolLM2-135M, with SmolLM2's tokenizer and chat template, for the hybrid benchmarks
//! (`bench/hybrid-depth.sh`): 30 layers of width 576, 3 GDN layers to 1 gated attention
//! layer (9 heads, 3 KV heads, head 64), GDN with 4 key heads, 8 value heads, 64x64 state,
//! MLP 1536. Weights are random (the speed of a model does not depend on its values).
//!
//! `cargo run --release -p toy --example hybrid_model -- SMOLLM2.gguf OUT.gguf`

#[path = "../tests/common/hybrid.rs"]
mod hybrid;
#[path = "../tests/common/synthetic.rs"]
mod synthetic;

use tinynn::quant::GgmlType;
use toy::gguf::GgufFile;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [smol, out] = args.as_slice() else {
        return Err("usage: hybrid_model SMOLLM2.gguf OUT.gguf".into());
    };
    let smol = GgufFile::open(std::path::Path::new(smol))?;
    let spec = hybrid::HybridSpec {
        recurrent: (0..30).map(|l| (l + 1) % 4 != 0).collect(),
        c: 576,
        n_head: 9,
        n_kv: 3,
        d: 64,
        rope_dim: 16,
        ff: 1536,
        vocab: 49152,
        ctx: 8192,
        hk: 4,
        hv: 8,
        dk: 64,
        dv: 64,
        kernel: 4,
    };
    let bytes = hybrid::chat_gguf(&spec, &smol, GgmlType::F32);
    let tmp = format!("{out}.part");
    std::fs::write(&tmp, &bytes)?;
    std::fs::rename(&tmp, out)?;
    eprintln!("wrote {out}: {} MB", bytes.len() >> 20);
    Ok(())
}
