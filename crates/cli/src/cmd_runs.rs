//! `toy runs`: the runs under a folder, one line each (id, arch, steps, losses, the
//! validation accuracy of image classifiers, status).

use anyhow::Result;
use std::path::PathBuf;
use toy::train::run::list_runs;

#[derive(clap::Args)]
pub struct Args {
    /// Folder holding the runs.
    #[arg(long, default_value = "runs")]
    runs_dir: PathBuf,
}

pub fn run(a: Args) -> Result<()> {
    let runs = list_runs(&a.runs_dir)?;
    if runs.is_empty() {
        println!("no runs in {}", a.runs_dir.display());
        return Ok(());
    }
    let f = |x: Option<f32>| x.map_or("-".to_string(), |v| format!("{v:.4}"));
    let w = runs.iter().map(|r| r.id.len()).max().unwrap_or(2).max(2);
    println!(
        "{:<w$}  {:<5}  {:>13}  {:>9}  {:>9}  {:>8}  status",
        "id", "arch", "steps", "loss", "val loss", "val acc"
    );
    for r in runs {
        let steps = format!("{}/{}", r.steps, r.total_steps);
        println!(
            "{:<w$}  {:<5}  {:>13}  {:>9}  {:>9}  {:>8}  {}",
            r.id,
            r.arch,
            steps,
            f(r.last_loss),
            f(r.val_loss),
            r.accuracy
                .map_or("-".to_string(), |a| format!("{:.2}%", 100.0 * a)),
            r.status
        );
    }
    Ok(())
}
