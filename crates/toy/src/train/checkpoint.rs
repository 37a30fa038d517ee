//! The optimizer-state file beside each checkpoint GGUF (`ckpt-NNNNNN.state`): everything a
//! resumed run needs to continue bit for bit (steps done, the exact f32 parameters, AdamW's
//! m, v and t, the batch generator's state), so resume never reads the (depth-folded) GGUF.
//!
//! Layout: `TOYSTATE`, u32 version, u32 header length, the header as JSON, then params, m and
//! v as little-endian f32, then an FNV-1a 64 checksum of all that. The GGUF is written first
//! and the state last, each to a temporary name, fsynced and renamed: a state file that
//! exists and checks out marks a complete checkpoint.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::dataset::{sync_dir, tmp_path, ShardError};

const MAGIC: &[u8; 8] = b"TOYSTATE";
const VERSION: u32 = 1;
/// Bound on a state file's parameter count before allocating (4 G floats).
const MAX_PARAMS: u64 = 1 << 32;

#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {why}")]
    Bad { path: PathBuf, why: String },
    #[error("simulated crash while writing {0} (fault injection)")]
    SimulatedCrash(PathBuf),
    #[error("no complete checkpoint in {0}")]
    NoCheckpoint(PathBuf),
}

impl From<ShardError> for CheckpointError {
    fn from(e: ShardError) -> Self {
        match e {
            ShardError::Io { path, source } => CheckpointError::Io { path, source },
            other => CheckpointError::Bad {
                path: PathBuf::new(),
                why: other.to_string(),
            },
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StateHeader {
    /// Optimizer steps done.
    pub step: usize,
    /// AdamW's step count.
    pub adam_t: u64,
    /// The training batch generator's state.
    pub data_rng: u64,
    pub n_params: u64,
    /// Fine-tuning's sample order: the epoch and the position in it (0 for `toy train`).
    #[serde(default)]
    pub data_epoch: usize,
    #[serde(default)]
    pub data_pos: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub struct TrainState {
    pub header: StateHeader,
    pub params: Vec<f32>,
    pub m: Vec<f32>,
    pub v: Vec<f32>,
}

/// How a save should fail, for the kill-during-checkpoint test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    None,
    /// Write part of the temporary file, then stop as a killed process would: no rename.
    CrashMidWrite,
}

pub fn gguf_name(step: usize) -> String {
    format!("ckpt-{step:06}.gguf")
}

pub fn state_name(step: usize) -> String {
    format!("ckpt-{step:06}.state")
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

fn fnv1a_from(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn fnv1a(bytes: &[u8]) -> u64 {
    fnv1a_from(FNV_OFFSET, bytes)
}

/// The state to save, borrowed from the live model and optimizer (no copy of the arrays).
pub struct StateView<'a> {
    pub header: StateHeader,
    pub params: &'a [f32],
    pub m: &'a [f32],
    pub v: &'a [f32],
}

/// Forwards writes and keeps the FNV-1a hash of everything written.
struct Hashing<W: Write> {
    inner: W,
    hash: u64,
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hash = fnv1a_from(self.hash, &buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

fn put_f32s(w: &mut impl Write, xs: &[f32]) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(4 * 4096);
    for chunk in xs.chunks(4096) {
        buf.clear();
        chunk
            .iter()
            .for_each(|x| buf.extend_from_slice(&x.to_le_bytes()));
        w.write_all(&buf)?;
    }
    Ok(())
}

/// Writes `s` to `path` atomically (temporary name, fsync, rename, fsync of the folder),
/// streaming the arrays rather than building the file in memory.
pub fn save_state(path: &Path, s: &StateView, fault: Fault) -> Result<(), CheckpointError> {
    let tmp = tmp_path(path);
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |source| CheckpointError::Io { path: p, source }
    };
    let header = serde_json::to_vec(&s.header).map_err(|e| CheckpointError::Bad {
        path: path.to_path_buf(),
        why: e.to_string(),
    })?;
    let file = std::fs::File::create(&tmp).map_err(io(&tmp))?;
    let mut w = Hashing {
        inner: std::io::BufWriter::new(file),
        hash: FNV_OFFSET,
    };
    let mut body = || -> std::io::Result<bool> {
        w.write_all(MAGIC)?;
        w.write_all(&VERSION.to_le_bytes())?;
        w.write_all(&(header.len() as u32).to_le_bytes())?;
        w.write_all(&header)?;
        put_f32s(&mut w, s.params)?;
        if fault == Fault::CrashMidWrite {
            // Stop as a killed process would: part of the file written, never renamed.
            w.flush()?;
            return Ok(false);
        }
        put_f32s(&mut w, s.m)?;
        put_f32s(&mut w, s.v)?;
        let sum = w.hash;
        w.write_all(&sum.to_le_bytes())?;
        w.flush()?;
        Ok(true)
    };
    if !body().map_err(io(&tmp))? {
        return Err(CheckpointError::SimulatedCrash(tmp));
    }
    let file = w.inner.into_inner().map_err(|e| io(&tmp)(e.into_error()))?;
    file.sync_all().map_err(io(&tmp))?;
    drop(file);
    std::fs::rename(&tmp, path).map_err(io(path))?;
    sync_dir(path)?;
    Ok(())
}

/// Reads and checks a state file.
pub fn load_state(path: &Path) -> Result<TrainState, CheckpointError> {
    let bad = |why: String| CheckpointError::Bad {
        path: path.to_path_buf(),
        why,
    };
    let bytes = std::fs::read(path).map_err(|source| CheckpointError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    if bytes.len() < 24 || &bytes[..8] != MAGIC {
        return Err(bad(
            "not a toy optimizer-state file (bad magic or too short)".into(),
        ));
    }
    let (body, sum) = bytes.split_at(bytes.len() - 8);
    let sum = u64::from_le_bytes(sum.try_into().expect("8 bytes"));
    if fnv1a(body) != sum {
        return Err(bad(
            "checksum mismatch: the file is truncated or corrupt".into()
        ));
    }
    let version = u32::from_le_bytes(body[8..12].try_into().expect("4 bytes"));
    if version != VERSION {
        return Err(bad(format!("version {version}, expected {VERSION}")));
    }
    let hlen = u32::from_le_bytes(body[12..16].try_into().expect("4 bytes")) as usize;
    let hend = 16usize.saturating_add(hlen);
    if hend > body.len() {
        return Err(bad(format!("header of {hlen} bytes runs past the end")));
    }
    let header: StateHeader =
        serde_json::from_slice(&body[16..hend]).map_err(|e| bad(format!("header: {e}")))?;
    let n = header.n_params;
    if n > MAX_PARAMS || (body.len() - hend) as u64 != 12 * n {
        return Err(bad(format!(
            "{} bytes of arrays, expected 3 x {n} f32",
            body.len() - hend
        )));
    }
    let n = n as usize;
    let floats = |k: usize| -> Vec<f32> {
        body[hend + 4 * n * k..hend + 4 * n * (k + 1)]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect()
    };
    Ok(TrainState {
        params: floats(0),
        m: floats(1),
        v: floats(2),
        header,
    })
}

/// The newest complete checkpoint in `dir`: the highest step whose state file checks out and
/// whose GGUF exists. Torn or temporary files are passed over.
pub fn latest(dir: &Path) -> Result<(usize, PathBuf), CheckpointError> {
    let mut steps: Vec<usize> = std::fs::read_dir(dir)
        .map_err(|source| CheckpointError::Io {
            path: dir.to_path_buf(),
            source,
        })?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            name.strip_prefix("ckpt-")?
                .strip_suffix(".state")?
                .parse()
                .ok()
        })
        .collect();
    steps.sort_unstable();
    for step in steps.into_iter().rev() {
        let state = dir.join(state_name(step));
        if dir.join(gguf_name(step)).is_file() && load_state(&state).is_ok() {
            return Ok((step, state));
        }
    }
    Err(CheckpointError::NoCheckpoint(dir.to_path_buf()))
}
