//! A run's log, `events.jsonl`: one JSON object per line with a `"type"` field
//! (`run_start`, `step`, `eval`, `checkpoint`, `run_end`), appended and flushed as it
//! happens, so a killed run still has everything up to its last step. Times are seconds
//! since the Unix epoch.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    RunStart {
        /// The resolved recipe.
        config: serde_json::Value,
        time: f64,
        /// The step a resumed run starts from (0 for a fresh run).
        #[serde(default)]
        start_step: usize,
    },
    Step {
        /// Optimizer steps done, counting this one (1-based).
        step: usize,
        loss: f32,
        lr: f32,
        grad_norm: f32,
        tok_s: f64,
        time: f64,
    },
    Eval {
        step: usize,
        val_loss: f32,
        sample: String,
        /// Set by the `toy eval` commands' `--run`; absent on training's own evaluations.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        metrics: Option<EvalMetrics>,
    },
    Checkpoint {
        step: usize,
        path: String,
    },
    RunEnd {
        step: usize,
        /// "done", or "failed: <why>".
        status: String,
    },
}

/// What one `toy eval` command measured, logged into a run (`--run`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvalMetrics {
    /// The evaluation: "kld", "choice".
    pub name: String,
    /// The model evaluated and the data it was evaluated on.
    pub model: String,
    pub data: String,
    /// Every statistic the command prints with `--json`.
    pub results: serde_json::Value,
    pub time: f64,
}

/// Log `metrics` into the run folder `run` (its `events.jsonl`, created if missing) as an
/// `eval` event at the run's last step, with `val_loss` the evaluation's own loss (ln PPL(Q)
/// for kld, the labelled endings' mean NLL for choice).
pub fn log_eval(run: &Path, val_loss: f32, metrics: EvalMetrics) -> std::io::Result<PathBuf> {
    if !run.is_dir() {
        let why = format!("run folder '{}' not found", run.display());
        return Err(std::io::Error::new(std::io::ErrorKind::NotFound, why));
    }
    let path = run.join("events.jsonl");
    let step = match read_events(&path) {
        Ok(evs) => evs.iter().fold(0, |m, e| match e {
            Event::Step { step, .. } => m.max(*step),
            _ => m,
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
        Err(e) => return Err(e),
    };
    let mut log = EventLog::append(&path)?;
    log.write(&Event::Eval {
        step,
        val_loss,
        sample: String::new(),
        metrics: Some(metrics),
    })?;
    log.file.sync_all()?;
    Ok(path)
}

pub fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Appends events to a run's `events.jsonl`.
pub struct EventLog {
    path: PathBuf,
    file: std::fs::File,
}

impl EventLog {
    pub fn append(path: &Path) -> std::io::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(Self {
            path: path.to_path_buf(),
            file,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn write(&mut self, e: &Event) -> std::io::Result<()> {
        let mut line = serde_json::to_string(e).map_err(std::io::Error::other)?;
        line.push('\n');
        self.file.write_all(line.as_bytes())
    }
}

/// Every event of `path`; a torn last line (the run was killed mid-write) is skipped.
pub fn read_events(path: &Path) -> std::io::Result<Vec<Event>> {
    let text = std::fs::read_to_string(path)?;
    Ok(text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect())
}
