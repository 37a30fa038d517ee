//! `GET /api/runs` and `GET /api/runs/{id}/events`: the run directories the page's runs view
//! draws, each with an `events.jsonl` (training steps, evals, serve requests). Events are
//! read from a byte offset, complete lines only, so the page polls with `next`.

use crate::error::ApiError;
use crate::AppState;
use axum::extract::{Path as UrlPath, Query, State};
use axum::Json;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

/// Most bytes of events one poll returns.
const MAX_CHUNK: u64 = 1 << 20;

fn runs_dir(state: &AppState, q: &HashMap<String, String>) -> PathBuf {
    q.get("dir")
        .filter(|d| !d.is_empty())
        .map_or_else(|| state.cfg.runs_dir.clone(), PathBuf::from)
}

/// A run id is one directory name: no separators, no `..`.
fn check_id(id: &str) -> Result<(), ApiError> {
    let ok = !id.is_empty()
        && id != "."
        && id != ".."
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid("id", format!("'{id}' is not a run id")))
    }
}

/// Summary of one run from its events: kind, last step and last loss.
fn summarize(id: &str, events: &Path) -> Option<Value> {
    let meta = std::fs::metadata(events).ok()?;
    let modified = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs());
    // the last step is near the end: read the tail only
    let mut f = std::fs::File::open(events).ok()?;
    let len = meta.len();
    let from = len.saturating_sub(64 * 1024);
    f.seek(SeekFrom::Start(from)).ok()?;
    let mut tail = String::new();
    f.take(64 * 1024).read_to_string(&mut tail).ok()?;
    let mut head = String::new();
    std::fs::File::open(events)
        .ok()?
        .take(4096)
        .read_to_string(&mut head)
        .ok();
    let first: Option<Value> = head
        .lines()
        .next()
        .and_then(|l| serde_json::from_str(l).ok());
    let first_type = first
        .as_ref()
        .and_then(|v| v["type"].as_str())
        .unwrap_or("");
    let last_step = tail
        .lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["type"] == "step");
    let kind = if id.starts_with("serve-") || first_type == "serve_start" {
        "serve"
    } else if first_type == "run_start" || last_step.is_some() {
        "train"
    } else {
        "other"
    };
    Some(json!({
        "id": id,
        "modified": modified,
        "kind": kind,
        "steps": last_step.as_ref().and_then(|v| v["step"].as_u64()).unwrap_or(0),
        "last_loss": last_step.as_ref().map_or(Value::Null, |v| v["loss"].clone()),
    }))
}

pub async fn list(
    State(state): State<AppState>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    let dir = runs_dir(&state, &q);
    let mut runs: Vec<Value> = match std::fs::read_dir(&dir) {
        Ok(rd) => rd
            .filter_map(Result::ok)
            .filter_map(|e| {
                let id = e.file_name().to_string_lossy().into_owned();
                check_id(&id).ok()?;
                summarize(&id, &e.path().join("events.jsonl"))
            })
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => {
            return Err(ApiError::internal(format!(
                "reading runs directory '{}': {e}",
                dir.display()
            )))
        }
    };
    runs.sort_by_key(|r| std::cmp::Reverse(r["modified"].as_u64().unwrap_or(0)));
    Ok(Json(json!({ "runs": runs })))
}

pub async fn events(
    State(state): State<AppState>,
    UrlPath(id): UrlPath<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    check_id(&id)?;
    let from: u64 = match q.get("from") {
        None => 0,
        Some(s) => s.parse().map_err(|_| {
            ApiError::invalid("from", format!("'from' must be a byte offset, got '{s}'"))
        })?,
    };
    let path = runs_dir(&state, &q).join(&id).join("events.jsonl");
    let mut f = std::fs::File::open(&path)
        .map_err(|_| ApiError::not_found(format!("no run '{id}' (no {})", path.display())))?;
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    if from >= len {
        return Ok(Json(json!({"events": [], "next": from.min(len)})));
    }
    f.seek(SeekFrom::Start(from))
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let mut buf = Vec::new();
    f.take(MAX_CHUNK)
        .read_to_end(&mut buf)
        .map_err(|e| ApiError::internal(e.to_string()))?;
    // complete lines only; a partial last line is read again next time
    let end = buf.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let events: Vec<Value> = String::from_utf8_lossy(&buf[..end])
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    Ok(Json(json!({"events": events, "next": from + end as u64})))
}

#[cfg(test)]
mod tests {
    use super::check_id;

    #[test]
    fn run_ids_cannot_leave_the_runs_directory() {
        assert!(check_id("serve-20260101-000000").is_ok());
        for bad in ["..", ".", "", "a/b", "..\\x", "a b"] {
            assert!(check_id(bad).is_err(), "{bad:?}");
        }
    }
}
