//! `toy quantize IN OUT --type T`: rewrite a model's matrices in another weight type.

use crate::common::open_gguf;
use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use tinynn::quant::GgmlType;
use toy::quantize::quantize_model;

#[derive(clap::Args)]
pub struct Args {
    /// Model to read.
    input: PathBuf,
    /// File to write (atomically).
    output: PathBuf,
    /// Target type: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K (also Q4_K_M, Q4_K_S), Q6_K.
    #[arg(long = "type")]
    ty: String,
}

/// A target type by llama-quantize's name ("Q4_K_M" is Q4_K).
pub fn parse_type(s: &str) -> Result<GgmlType> {
    let name = s.to_ascii_uppercase();
    let base = name
        .strip_suffix("_M")
        .or_else(|| name.strip_suffix("_S"))
        .filter(|b| b.ends_with("_K"))
        .unwrap_or(&name);
    let Some(ty) = GgmlType::from_name(base) else {
        bail!("unknown type '{s}': expected one of F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K");
    };
    Ok(ty)
}

pub fn run(a: Args) -> Result<()> {
    let ty = parse_type(&a.ty)?;
    if a.input == a.output {
        bail!("input and output are the same file '{}'", a.input.display());
    }
    let src = open_gguf(&a.input)?;
    let w = quantize_model(&src, ty)?;
    w.write_file(&a.output)
        .with_context(|| format!("writing '{}'", a.output.display()))?;
    let (before, after) = (
        std::fs::metadata(&a.input)?.len(),
        std::fs::metadata(&a.output)?.len(),
    );
    eprintln!(
        "wrote {} ({ty}): {:.1} MiB -> {:.1} MiB",
        a.output.display(),
        before as f64 / 1048576.0,
        after as f64 / 1048576.0
    );
    Ok(())
}
