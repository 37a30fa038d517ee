//! `toy quantize IN OUT --type T`: rewrite a model in llama-quantize's file type T, its
//! per-tensor mix included (`toy::quantize::mix`), optionally under an importance matrix.

use crate::common::open_gguf;
use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use tinynn::quant::GgmlType;
use toy::quantize::imatrix::Imatrix;
use toy::quantize::mix::FileType;
use toy::quantize::{plan, quantize_with_progress, QuantizeOptions};

#[derive(clap::Args)]
pub struct Args {
    /// Model to read.
    input: PathBuf,
    /// File to write (atomically).
    output: PathBuf,
    /// File type, by llama-quantize's names: Q4_K_M, Q4_K_S, Q5_K_M, Q5_K_S, Q6_K, Q3_K_L,
    /// Q3_K_M, Q3_K_S, Q2_K, IQ4_XS, IQ4_NL, IQ3_M, IQ3_S, Q8_0, Q5_1, Q5_0, Q4_1, Q4_0, BF16,
    /// F16, F32 (Q4_K, Q5_K, Q3_K: the _M mixes); with --imatrix also Q2_K_S, IQ3_XS,
    /// IQ3_XXS, IQ2_M, IQ2_S, IQ2_XS, IQ2_XXS.
    #[arg(long = "type")]
    ty: String,
    /// Importance matrix (`toy imatrix` or llama-imatrix, GGUF or legacy .dat) whose weights
    /// guide every type's scale search.
    #[arg(long)]
    imatrix: Option<PathBuf>,
    /// Type of the output head (and of a tied embedding), instead of the mix's.
    #[arg(long = "output-tensor-type", alias = "output-type")]
    output_type: Option<String>,
    /// Type of the token embedding, instead of the mix's.
    #[arg(long = "token-embedding-type", alias = "embedding-type")]
    token_embedding_type: Option<String>,
    /// Keep output.weight as it is.
    #[arg(long)]
    leave_output_tensor: bool,
    /// Every matrix in the file type's default type: no mix.
    #[arg(long)]
    pure: bool,
    /// Print each tensor's type and the sizes, write nothing.
    #[arg(long)]
    dry_run: bool,
}

/// A tensor type by ggml's name (`Q6_K`, `q8_0`).
fn tensor_type(s: &str) -> Result<GgmlType> {
    GgmlType::from_name(&s.to_ascii_uppercase()).with_context(|| {
        format!("unknown tensor type '{s}': expected a ggml type such as Q8_0, Q6_K, F16")
    })
}

pub fn options(ty: &str) -> Result<QuantizeOptions> {
    Ok(QuantizeOptions::new(FileType::parse(ty)?))
}

pub fn run(a: Args) -> Result<()> {
    let mut o = options(&a.ty)?;
    o.mix.output_type = a.output_type.as_deref().map(tensor_type).transpose()?;
    o.mix.token_embedding_type = a
        .token_embedding_type
        .as_deref()
        .map(tensor_type)
        .transpose()?;
    o.mix.leave_output = a.leave_output_tensor;
    o.mix.pure = a.pure;
    if let Some(p) = &a.imatrix {
        let m = Imatrix::read(p)?;
        eprintln!(
            "importance matrix '{}': {} entries, {} chunks",
            p.display(),
            m.entries.len(),
            m.chunks
        );
        o.imatrix = Some(m);
    }
    if a.input == a.output {
        bail!("input and output are the same file '{}'", a.input.display());
    }
    let src = open_gguf(&a.input)?;
    if a.dry_run {
        let types = plan(&src, &o)?;
        let mut total = 0u64;
        for (t, ty) in src.tensors.iter().zip(&types) {
            let bytes = ty.row_bytes(t.n_elements()).unwrap_or(0);
            total += bytes;
            println!(
                "{:<40} {:>6} -> {:<6} {:>10.3} MiB",
                t.name,
                t.ty.to_string(),
                ty.to_string(),
                bytes as f64 / 1048576.0
            );
        }
        println!(
            "{}: {:.1} MiB of tensors",
            o.mix.ftype.name(),
            total as f64 / 1048576.0
        );
        return Ok(());
    }
    let bar = indicatif::ProgressBar::new(100);
    let style = "{bar:30} {percent}% of the weights, eta {eta}";
    bar.set_style(
        indicatif::ProgressStyle::with_template(style)
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let w = quantize_with_progress(&src, &o, &|done, total| {
        bar.set_position(done * 100 / total.max(1))
    })?;
    bar.finish_and_clear();
    w.write_file(&a.output)
        .with_context(|| format!("writing '{}'", a.output.display()))?;
    let (before, after) = (
        std::fs::metadata(&a.input)?.len(),
        std::fs::metadata(&a.output)?.len(),
    );
    eprintln!(
        "wrote {} ({}): {:.1} MiB -> {:.1} MiB",
        a.output.display(),
        o.mix.ftype.name(),
        before as f64 / 1048576.0,
        after as f64 / 1048576.0
    );
    Ok(())
}
