//! `GET /api/runs` and `GET /api/runs/{id}/events`: the run directories the page's runs view
//! draws, each with an `events.jsonl` (training steps, evals, serve requests). Events are
//! read from a byte offset, complete lines only, so the page polls with `next`.

use crate::error::ApiError;
use crate::AppState;
use axum::extract::{Path as UrlPath, Query, State};
use axum::Json;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::Path;
use std::time::UNIX_EPOCH;

/// Most bytes of events one poll returns.
const MAX_CHUNK: u64 = 1 << 20;

/// The runs API reads the server's `--runs-dir` only: a `dir` query (which once chose any
/// directory on disk, so any `events.jsonl` a client could name) is refused, not ignored.
fn check_query(q: &HashMap<String, String>) -> Result<(), ApiError> {
    if q.contains_key("dir") {
        return Err(ApiError::invalid(
            "dir",
            "'dir' is not accepted: the runs API serves only the server's --runs-dir",
        )
        .code("unsupported_parameter"));
    }
    Ok(())
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
    check_query(&q)?;
    let dir = &state.cfg.runs_dir;
    let mut runs: Vec<Value> = match std::fs::read_dir(dir) {
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
    check_query(&q)?;
    let from: u64 = match q.get("from") {
        None => 0,
        Some(s) => s.parse().map_err(|_| {
            ApiError::invalid("from", format!("'from' must be a byte offset, got '{s}'"))
        })?,
    };
    let path = state.cfg.runs_dir.join(&id).join("events.jsonl");
    let (events, next) = read_events(&path, from).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => {
            ApiError::not_found(format!("no run '{id}' (no {})", path.display()))
        }
        _ => ApiError::internal(format!("reading '{}': {e}", path.display())),
    })?;
    Ok(Json(json!({"events": events, "next": next})))
}

/// The events of `path` from byte `from`: its complete lines (each ending in `\n`), about
/// [`MAX_CHUNK`] bytes of them, parsed (a line that is not JSON is skipped), and the offset
/// just after the last of them, where the next poll resumes. A half-written last line is
/// never read: it comes whole in a later poll. An offset at or past the end of the complete
/// lines (inside the half-written line, past the end of a file written anew) gets no events
/// and the end of the complete lines, the one offset a client can resume from correctly.
fn read_events(path: &Path, from: u64) -> std::io::Result<(Vec<Value>, u64)> {
    let mut f = std::fs::File::open(path)?;
    let len = f.metadata()?.len();
    let complete = complete_end(&mut f, len)?;
    if from >= complete {
        return Ok((Vec::new(), complete));
    }
    f.seek(SeekFrom::Start(from))?;
    // whole lines until the chunk is full: one line longer than the chunk still comes
    // whole, so a poll always moves on
    let mut r = BufReader::new(f.take(complete - from));
    let mut buf = Vec::new();
    while (buf.len() as u64) < MAX_CHUNK && r.read_until(b'\n', &mut buf)? > 0 {}
    // the file may have shrunk since its length was read: still complete lines only
    let end = buf.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let events = String::from_utf8_lossy(&buf[..end])
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    Ok((events, from + end as u64))
}

/// The offset just after the last `\n` in the first `len` bytes of `f` (0 when none).
fn complete_end(f: &mut std::fs::File, len: u64) -> std::io::Result<u64> {
    const BLOCK: u64 = 64 * 1024;
    let mut block = Vec::new();
    let mut to = len;
    while to > 0 {
        let start = to.saturating_sub(BLOCK);
        f.seek(SeekFrom::Start(start))?;
        block.clear();
        f.by_ref().take(to - start).read_to_end(&mut block)?;
        if let Some(i) = block.iter().rposition(|&b| b == b'\n') {
            return Ok(start + i as u64 + 1);
        }
        to = start;
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::{check_id, read_events, MAX_CHUNK};
    use std::path::PathBuf;

    fn file(tag: &str, content: &[u8]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("toy-serve-runs-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("events.jsonl");
        std::fs::write(&p, content).unwrap();
        p
    }

    #[test]
    fn run_ids_cannot_leave_the_runs_directory() {
        assert!(check_id("serve-20260101-000000").is_ok());
        for bad in ["..", ".", "", "a/b", "..\\x", "a b"] {
            assert!(check_id(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn next_stops_before_a_half_written_last_line() {
        let a = "{\"type\":\"step\",\"step\":1}\n";
        let b = "{\"type\":\"step\",\"step\":2}\n";
        let half = "{\"type\":\"step\",\"st";
        let p = file("half", format!("{a}{b}{half}").as_bytes());
        let complete = (a.len() + b.len()) as u64;
        let (events, next) = read_events(&p, 0).unwrap();
        assert_eq!(events.len(), 2);
        assert_eq!(next, complete);
        // polling again while the line is still half-written: nothing, same offset
        assert_eq!(read_events(&p, next).unwrap(), (vec![], complete));
        // from the middle of a complete line: that line's rest is skipped, not the next
        let (events, next) = read_events(&p, 3).unwrap();
        assert_eq!((events.len(), next), (1, complete));
        // once the line is finished it comes whole from `next`
        std::fs::write(&p, format!("{a}{b}{half}ep\":3}}\n")).unwrap();
        let (events, next) = read_events(&p, complete).unwrap();
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(events[0]["step"], 3);
        assert_eq!(next, std::fs::metadata(&p).unwrap().len());
    }

    #[test]
    fn from_past_the_end_resumes_at_the_last_complete_line() {
        let a = "{\"type\":\"step\",\"step\":1}\n";
        let p = file("past", format!("{a}{{\"type\":\"st").as_bytes());
        let len = std::fs::metadata(&p).unwrap().len();
        let complete = a.len() as u64;
        // past the end of the file, at its end, inside the half-written line
        for from in [len + 1000, len, complete + 2] {
            assert_eq!(
                read_events(&p, from).unwrap(),
                (vec![], complete),
                "from {from}"
            );
        }
        // a file that ends with its newline: its length
        let p = file("past-whole", a.as_bytes());
        assert_eq!(read_events(&p, 1 << 40).unwrap(), (vec![], complete));
        // a file without any complete line yet: 0
        let p = file("past-none", b"{\"type\"");
        assert_eq!(read_events(&p, 5).unwrap(), (vec![], 0));
    }

    #[test]
    fn a_line_longer_than_a_chunk_still_moves_next_on() {
        let long = format!(
            "{{\"type\":\"eval\",\"sample\":\"{}\"}}\n",
            "x".repeat(MAX_CHUNK as usize + 10)
        );
        let short = "{\"type\":\"step\",\"step\":1}\n";
        let p = file("long", format!("{long}{short}").as_bytes());
        let (events, next) = read_events(&p, 0).unwrap();
        assert_eq!(events.len(), 1);
        assert_eq!(next, long.len() as u64);
        let (events, next) = read_events(&p, next).unwrap();
        assert_eq!(events[0]["step"], 1);
        assert_eq!(next, (long.len() + short.len()) as u64);
    }
}
