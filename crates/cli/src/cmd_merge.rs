//! `toy merge BASE ADAPTER OUT [--scale S] [--type T]`: a LoRA adapter (llama.cpp's GGUF)
//! merged into its base, as llama.cpp's `llama-export-lora`. The merged matrices are written
//! F32 and the rest as stored, or, with `--type`, everything re-quantized as `toy quantize`.

use crate::cmd_quantize::options;
use crate::common::open_gguf;
use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use toy::finetune::adapter::LoraAdapter;
use toy::finetune::merge::{merge_into, merged_gguf};
use toy::quantize::quantize_with;

#[derive(clap::Args)]
pub struct Args {
    /// Base model (GGUF).
    base: PathBuf,
    /// LoRA adapter (GGUF, as llama.cpp's `convert_lora_to_gguf.py` or toy writes it).
    adapter: PathBuf,
    /// File to write (atomically).
    output: PathBuf,
    /// The user's scale on the adapter (llama.cpp's `--lora-scaled`), times alpha / rank.
    #[arg(long, default_value_t = 1.0)]
    scale: f32,
    /// Re-quantize the merged model as `toy quantize --type` does (Q4_K_M, Q8_0, F16, ...).
    #[arg(long = "type")]
    ty: Option<String>,
}

pub fn run(a: Args) -> Result<()> {
    let ty = a.ty.as_deref().map(options).transpose()?;
    if a.output == a.base || a.output == a.adapter {
        bail!("the output '{}' is one of the inputs", a.output.display());
    }
    let base = open_gguf(&a.base)?;
    let adapter = LoraAdapter::read(&a.adapter)
        .with_context(|| format!("reading adapter '{}'", a.adapter.display()))?;
    adapter.check_base(&base).with_context(|| {
        let (p, m) = (a.adapter.display(), a.base.display());
        format!("adapter '{p}' does not fit model '{m}'")
    })?;
    let loras = [(&adapter, a.scale)];
    let written = match ty {
        None => merge_into(&base, &loras)?.write_file(&a.output),
        Some(o) => {
            let merged = merged_gguf(&base, &loras)?;
            quantize_with(&merged, &o)?.write_file(&a.output)
        }
    };
    written.with_context(|| format!("writing '{}'", a.output.display()))?;
    eprintln!(
        "wrote {}: {} matrices adapted (alpha {}, scale {})",
        a.output.display(),
        adapter.tensors.len(),
        adapter.alpha,
        a.scale
    );
    Ok(())
}
