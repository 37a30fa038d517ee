//! Run folders: `runs/<id>/` holds `config.toml` (the resolved recipe), `events.jsonl`, and
//! the checkpoints (`ckpt-NNNNNN.gguf` + `.state`). Ids are `<recipe name>-<UTC time>`, made
//! unique with a suffix when two runs start in the same second.

use std::path::{Path, PathBuf};

use super::dataset::write_atomic;
use super::events::{read_events, Event};
use super::recipe::{Recipe, RecipeError};

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0} is not a run folder (no config.toml)")]
    NotARun(PathBuf),
    #[error(transparent)]
    Recipe(#[from] RecipeError),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RunError + '_ {
    move |source| RunError::Io {
        path: path.to_path_buf(),
        source,
    }
}

#[derive(Clone, Debug)]
pub struct RunDir {
    pub id: String,
    pub path: PathBuf,
}

impl RunDir {
    pub fn config_path(&self) -> PathBuf {
        self.path.join("config.toml")
    }
    pub fn events_path(&self) -> PathBuf {
        self.path.join("events.jsonl")
    }

    /// A new, empty run folder under `runs_dir` with the resolved `recipe` in it.
    pub fn create(runs_dir: &Path, recipe: &Recipe) -> Result<Self, RunError> {
        Self::create_named(runs_dir, &recipe.name, &recipe.to_toml())
    }

    /// A new run folder `<name>-<UTC stamp>` holding `config` as its config.toml.
    pub fn create_named(runs_dir: &Path, name: &str, config: &str) -> Result<Self, RunError> {
        std::fs::create_dir_all(runs_dir).map_err(io(runs_dir))?;
        let base = format!("{}-{}", name, utc_stamp(super::events::now()));
        let mut id = base.clone();
        let mut n = 1;
        loop {
            let path = runs_dir.join(&id);
            match std::fs::create_dir(&path) {
                Ok(()) => break,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    n += 1;
                    id = format!("{base}-{n}");
                }
                Err(e) => return Err(io(&path)(e)),
            }
        }
        let run = Self {
            path: runs_dir.join(&id),
            id,
        };
        let cfg = run.config_path();
        write_atomic(&cfg, config.as_bytes()).map_err(|e| RunError::Io {
            path: cfg.clone(),
            source: std::io::Error::other(e.to_string()),
        })?;
        Ok(run)
    }

    /// An existing run and its recipe.
    pub fn open(path: &Path) -> Result<(Self, Recipe), RunError> {
        let cfg = path.join("config.toml");
        if !cfg.is_file() {
            return Err(RunError::NotARun(path.to_path_buf()));
        }
        let recipe = Recipe::load(&cfg, &[])?;
        let id = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        Ok((
            Self {
                id,
                path: path.to_path_buf(),
            },
            recipe,
        ))
    }
}

/// `YYYYmmdd-HHMMSS` in UTC for Unix time `t` (Hinnant's days-to-civil algorithm).
pub fn utc_stamp(t: f64) -> String {
    let secs = t.max(0.0) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let (hh, mm, ss) = (rem / 3600, rem % 3600 / 60, rem % 60);
    format!("{y:04}{m:02}{d:02}-{hh:02}{mm:02}{ss:02}")
}

/// One line of `toy runs`.
#[derive(Clone, Debug, PartialEq)]
pub struct RunSummary {
    pub id: String,
    pub arch: String,
    /// Steps done and planned.
    pub steps: usize,
    pub total_steps: usize,
    pub last_loss: Option<f32>,
    pub val_loss: Option<f32>,
    /// The newest validation accuracy (image classifiers).
    pub accuracy: Option<f32>,
    /// "running/stopped", "done", or "failed: ...".
    pub status: String,
}

/// The architecture and planned steps of the run in `dir`: a language-model recipe, or an
/// image classifier's (`[vit]`, `vision::recipe`), read as a plain table.
fn run_shape(dir: &Path) -> Option<(String, usize)> {
    if let Ok((_, recipe)) = RunDir::open(dir) {
        let arch = format!("{:?}", recipe.model.arch).to_lowercase();
        return Some((arch, recipe.train.steps));
    }
    let text = std::fs::read_to_string(dir.join("config.toml")).ok()?;
    let t: toml::Table = text.parse().ok()?;
    t.get("vit")?;
    let steps = t.get("train")?.get("steps")?.as_integer()?;
    Some(("vit".into(), steps as usize))
}

/// Every run folder under `runs_dir`, sorted by id.
pub fn list_runs(runs_dir: &Path) -> Result<Vec<RunSummary>, RunError> {
    let mut out = Vec::new();
    if !runs_dir.is_dir() {
        return Ok(out);
    }
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(runs_dir)
        .map_err(io(runs_dir))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("config.toml").is_file())
        .collect();
    dirs.sort();
    for d in dirs {
        let Some((arch, total_steps)) = run_shape(&d) else {
            continue;
        };
        let events = read_events(&d.join("events.jsonl")).unwrap_or_default();
        let mut s = RunSummary {
            id: d
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            arch,
            steps: 0,
            total_steps,
            last_loss: None,
            val_loss: None,
            accuracy: None,
            status: "incomplete".into(),
        };
        for e in events {
            match e {
                Event::Step { step, loss, .. } => {
                    s.steps = step;
                    s.last_loss = Some(loss);
                }
                Event::Eval {
                    val_loss,
                    metrics: None,
                    ..
                } => s.val_loss = Some(val_loss),
                // an image classifier's own evaluation: its validation loss and accuracy
                Event::Eval {
                    val_loss,
                    metrics: Some(m),
                    ..
                } if m.name == "accuracy" => {
                    s.val_loss = Some(val_loss);
                    s.accuracy = m.results["top1"].as_f64().map(|a| a as f32);
                }
                Event::Eval { .. } => {}
                Event::RunStart { .. } => s.status = "incomplete".into(),
                Event::RunEnd { status, .. } => s.status = status,
                Event::Checkpoint { .. } => {}
            }
        }
        out.push(s);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn utc_stamp_matches_known_dates() {
        assert_eq!(super::utc_stamp(0.0), "19700101-000000");
        assert_eq!(super::utc_stamp(1_709_210_096.0), "20240229-123456");
    }
}
