//! Serve telemetry: `<runs_dir>/serve-<UTC timestamp>/events.jsonl`, one JSON line per
//! generation request (model, token counts, timings, status); the prompt and output text
//! only with `--log-prompts`. The same format as the training runs' `events.jsonl`, so the
//! page's runs view lists it.

use serde_json::{json, Value};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

pub struct Telemetry {
    file: Mutex<Option<File>>,
    pub dir: Option<PathBuf>,
    pub log_prompts: bool,
}

/// `YYYYMMDD-HHMMSS` of a unix time, UTC: the stamp training runs are named with.
pub fn timestamp(unix: u64) -> String {
    toy::train::run::utc_stamp(unix as f64)
}

impl Telemetry {
    /// Open a fresh run directory under `runs_dir`; on failure the server runs without
    /// telemetry and says so once.
    pub fn open(runs_dir: &Path, log_prompts: bool, models: &[String]) -> Self {
        let now = crate::models::unix_now();
        let base = format!("serve-{}", timestamp(now));
        let mut dir = runs_dir.join(&base);
        for i in 2.. {
            if !dir.exists() {
                break;
            }
            dir = runs_dir.join(format!("{base}-{i}"));
        }
        let opened = std::fs::create_dir_all(&dir).and_then(|()| {
            File::options()
                .create(true)
                .append(true)
                .open(dir.join("events.jsonl"))
        });
        let t = match opened {
            Ok(f) => Self {
                file: Mutex::new(Some(f)),
                dir: Some(dir),
                log_prompts,
            },
            Err(e) => {
                eprintln!(
                    "warning: no telemetry: cannot write under '{}': {e}",
                    runs_dir.display()
                );
                Self {
                    file: Mutex::new(None),
                    dir: None,
                    log_prompts,
                }
            }
        };
        t.write(json!({"type": "serve_start", "time": now, "models": models}));
        t
    }

    pub fn write(&self, mut line: Value) {
        if let Some(obj) = line.as_object_mut() {
            obj.entry("time")
                .or_insert(json!(crate::models::unix_now()));
        }
        if let Ok(mut f) = self.file.lock() {
            if let Some(f) = f.as_mut() {
                let _ = writeln!(f, "{line}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::timestamp;

    #[test]
    fn timestamps_are_utc_calendar_dates() {
        assert_eq!(timestamp(0), "19700101-000000");
        assert_eq!(timestamp(951_782_400 + 3661), "20000229-010101");
        assert_eq!(timestamp(1_798_761_599), "20261231-235959");
    }
}
