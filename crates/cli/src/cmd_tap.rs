//! `toy tap`: activations at named points of one forward pass over a prompt
//! (`toy::model::tap`), as per-point statistics or `.npy` files (NumPy's format, by `npyz`).

use crate::common::{load, ModelArgs};
use anyhow::{bail, Context, Result};
use npyz::WriterBuilder;
use std::path::{Path, PathBuf};
use toy::model::tap::{stats, Capture, Taps, POINTS};
use toy::model::Logits;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    /// The text to run.
    #[arg(short = 'p', long)]
    prompt: String,
    /// Points to capture, comma-separated globs over `blk.N.{attn_norm,attn_out,ffn_out,
    /// resid,gdn_state}` and `logits`, e.g. `blk.*.resid,logits`.
    #[arg(long, default_value = "blk.*.resid")]
    at: String,
    /// Write each capture as DIR/<name>.npy (rows x cols, f32) instead of printing stats.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Print the result as one JSON object.
    #[arg(long)]
    json: bool,
}

fn write_npy(dir: &Path, c: &Capture) -> Result<PathBuf> {
    let path = dir.join(format!("{}.npy", c.name));
    let tmp = dir.join(format!(".{}.npy.tmp", c.name));
    let file =
        std::fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    let mut buf = std::io::BufWriter::new(file);
    let shape = [c.rows as u64, c.cols as u64];
    let mut w = npyz::WriteOptions::<f32>::new()
        .default_dtype()
        .shape(&shape)
        .writer(&mut buf)
        .begin_nd()?;
    w.extend(c.data.iter().copied())?;
    w.finish()?;
    let file = buf.into_inner().map_err(|e| e.into_error())?;
    file.sync_all()?;
    std::fs::rename(&tmp, &path)?;
    Ok(path)
}

pub fn run(a: Args) -> Result<()> {
    let (model, tok) = load(&a.model)?;
    let ids = tok.encode(&a.prompt, true)?;
    if ids.is_empty() {
        bail!("the prompt has no tokens");
    }
    let mut st = model.new_state(ids.len(), ids.len());
    let taps = Taps::new(&a.at);
    let per_block = POINTS.iter().any(|p| taps.wants(&format!("blk.0.{p}")))
        || (0..model.cfg.n_layer)
            .any(|l| POINTS.iter().any(|p| taps.wants(&format!("blk.{l}.{p}"))));
    if !per_block && !taps.wants("logits") {
        bail!(
            "--at {:?} names no point; expected globs over blk.N.{{{}}} (N < {}) or logits",
            a.at,
            POINTS.join(","),
            model.cfg.n_layer
        );
    }
    st.taps = Some(Box::new(taps));
    let logits = model.forward(&mut st, &ids, Logits::All)?.to_vec();
    let mut taps = *st.taps.take().expect("taps set above");
    let v = model.cfg.vocab;
    taps.take("logits", &logits, v);
    if let Some(dir) = &a.out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        for c in &taps.captured {
            let p = write_npy(dir, c)?;
            println!("{} ({} x {}) -> {}", c.name, c.rows, c.cols, p.display());
        }
        return Ok(());
    }
    let rows: Vec<_> = taps.captured.iter().map(|c| (c, stats(&c.data))).collect();
    if a.json {
        let j: Vec<_> = rows
            .iter()
            .map(
                |(c, s)| serde_json::json!({"name": c.name, "shape": [c.rows, c.cols], "stats": s}),
            )
            .collect();
        println!("{}", serde_json::to_string(&j)?);
        return Ok(());
    }
    println!("{} tokens", ids.len());
    println!(
        "{:<20} {:>12} {:>10} {:>10} {:>10} {:>10} {:>9}",
        "point", "shape", "mean", "rms", "max|x|", "kurtosis", ">6σ"
    );
    for (c, s) in rows {
        println!(
            "{:<20} {:>12} {:>10.4} {:>10.4} {:>10.3} {:>10.2} {:>8.4}%",
            c.name,
            format!("{}x{}", c.rows, c.cols),
            s.mean,
            s.rms,
            s.max_abs,
            s.kurtosis,
            100.0 * s.outliers_6sigma
        );
    }
    Ok(())
}
