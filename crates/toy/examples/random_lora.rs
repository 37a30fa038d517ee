//! A random LoRA adapter for a base GGUF, written with toy's adapter API in llama.cpp's
//! format (`src/llama-adapter.cpp`): for checking that llama.cpp loads what toy writes and
//! computes what `toy --lora` computes (`scripts/lora-llama-cpp.py`). A and B are uniform
//! in [-amp, amp) from a fixed seed; B is nonzero so the adapter changes the output.
//!
//! `cargo run -p toy --example random_lora -- BASE OUT [RANK] [ALPHA] [AMP]`

use std::path::Path;
use toy::finetune::adapter::{LoraAdapter, LoraTensor};
use toy::gguf::GgufFile;

/// The matrices of each block the adapter targets (those llama.cpp runs through
/// `build_lora_mm`).
const TARGETS: [&str; 4] = ["attn_q", "attn_v", "ffn_up", "ffn_down"];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 2 {
        return Err("usage: random_lora BASE OUT [RANK] [ALPHA] [AMP]".into());
    }
    let rank: usize = args.get(2).map_or(Ok(8), |s| s.parse())?;
    let alpha: f32 = args.get(3).map_or(Ok(16.0), |s| s.parse())?;
    let amp: f32 = args.get(4).map_or(Ok(0.05), |s| s.parse())?;
    let base = GgufFile::open(Path::new(&args[0]))?;
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        amp * ((seed >> 40) as f32 / (1u64 << 23) as f32 - 1.0)
    };
    let mut tensors = Vec::new();
    for t in &base.tensors {
        let Some(rest) = t.name.strip_prefix("blk.") else {
            continue;
        };
        let targeted = TARGETS
            .iter()
            .any(|m| rest.ends_with(&format!(".{m}.weight")));
        if !targeted || t.dims.len() != 2 {
            continue;
        }
        let (n_in, n_out) = (t.dims[0] as usize, t.dims[1] as usize);
        tensors.push(LoraTensor {
            base: t.name.clone(),
            n_in,
            n_out,
            rank,
            a: (0..rank * n_in).map(|_| next()).collect(),
            b: (0..n_out * rank).map(|_| next()).collect(),
        });
    }
    let arch = base
        .architecture()
        .ok_or("base has no general.architecture")?;
    let adapter = LoraAdapter {
        arch: arch.into(),
        alpha,
        tensors,
    };
    adapter.check_base(&base)?;
    adapter.write(Path::new(&args[1]))?;
    eprintln!(
        "wrote {}: {} matrices, rank {rank}, alpha {alpha}",
        args[1],
        adapter.tensors.len()
    );
    Ok(())
}
