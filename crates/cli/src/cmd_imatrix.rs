//! `toy imatrix -m MODEL -f TEXT -o imatrix.gguf`: the importance matrix of a model over a
//! text, as llama.cpp's `llama-imatrix` makes it (`toy::quantize::imatrix`), for
//! `toy quantize --imatrix` or llama-quantize.

use crate::cmd_eval::{chunk_bar, read_tokens, too_short};
use crate::common::{load_with_lora, LoraArgs, ModelArgs};
use anyhow::{Context, Result};
use std::path::PathBuf;
use toy::quantize::imatrix::{compute, write_gguf};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    /// Text to run through the model.
    #[arg(short = 'f', long)]
    file: PathBuf,
    /// File to write (llama-imatrix's GGUF format, atomically).
    #[arg(short = 'o', long, default_value = "imatrix.gguf")]
    output: PathBuf,
    /// Chunk size in tokens (each chunk from an empty cache, as llama-imatrix's -c).
    #[arg(short = 'c', long, default_value_t = 512)]
    ctx: usize,
    /// Use at most this many chunks (default: every whole chunk of the text).
    #[arg(long)]
    chunks: Option<usize>,
}

pub fn run(a: Args) -> Result<()> {
    let (model, tok) = load_with_lora(&a.model, &LoraArgs::default())?;
    let mut ids = read_tokens(&tok, &a.file)?;
    if let Some(n) = a.chunks {
        ids.truncate(n.saturating_mul(a.ctx));
    }
    let bar = chunk_bar(ids.len() / a.ctx.max(1), "chunks");
    let (stats, chunks) = compute(&model, &ids, a.ctx, tok.start_bos(), |done, _| {
        bar.set_position(done as u64)
    })
    .with_context(|| too_short(&a.file, ids.len(), a.ctx))?;
    bar.finish_and_clear();
    let dataset = a.file.display().to_string();
    write_gguf(&a.output, &stats, &dataset, chunks, a.ctx)
        .with_context(|| format!("writing '{}'", a.output.display()))?;
    eprintln!(
        "wrote {}: {} matrices over {chunks} chunks of {} tokens",
        a.output.display(),
        stats.len(),
        a.ctx
    );
    Ok(())
}
