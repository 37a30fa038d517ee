//! `toy plot runs/<id>`: a PNG of the run's training and validation loss curves.

use anyhow::{Context, Result};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// The run folder.
    run: PathBuf,
    /// Output PNG (default: <run>/loss.png).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Width and height in pixels.
    #[arg(long, default_value_t = 900)]
    width: u32,
    #[arg(long, default_value_t = 560)]
    height: u32,
}

pub fn run(a: Args) -> Result<()> {
    let events = a.run.join("events.jsonl");
    anyhow::ensure!(
        events.is_file(),
        "{} is not a run folder (no events.jsonl)",
        a.run.display()
    );
    let out = a.out.unwrap_or_else(|| a.run.join("loss.png"));
    let title = a
        .run
        .file_name()
        .map(|n| format!("{} loss", n.to_string_lossy()))
        .unwrap_or_else(|| "loss".into());
    toy::train::plot::plot_run(&events, &title, &out, a.width, a.height)
        .with_context(|| format!("plotting {}", a.run.display()))?;
    println!("{}", out.display());
    Ok(())
}
