//! The data set: packed token shards, as llm.c and nanoGPT keep them: every document's tokens
//! followed by `<|endoftext|>`, concatenated, written as little-endian u16 (vocabularies up to
//! 65536) or u32, one file per split (`train.bin`, `val.bin`), memory-mapped for reading.
//! `meta.json` says the token type and counts; `tokenizer.gguf` holds the tokenizer.
//!
//! The train/validation split is by blocks of [`SPLIT_BLOCK`] tokens, each sent to validation
//! with probability `val_fraction` by a seeded generator, so even one long file is split.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::rng::SplitMix64;

/// Tokens per block of the train/validation split.
pub const SPLIT_BLOCK: usize = 1024;

#[derive(Debug, thiserror::Error)]
pub enum ShardError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {why}")]
    Bad { path: PathBuf, why: String },
    #[error("no prepared data in {0} (expected meta.json; run `toy data prepare --out {0}`)")]
    Missing(PathBuf),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ShardError + '_ {
    move |source| ShardError::Io {
        path: path.to_path_buf(),
        source,
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    pub vocab_size: usize,
    /// "u16" or "u32".
    pub dtype: String,
    pub train_tokens: usize,
    pub val_tokens: usize,
    pub documents: usize,
    /// The document separator's id.
    pub eot: Option<u32>,
    /// What the tokenizer was: "bpe trained on the corpus" or the model it came from.
    pub tokenizer_source: String,
    pub seed: u64,
    pub val_fraction: f64,
}

/// Splits `tokens` into train and validation streams and writes them with `meta.json`
/// into `dir` (created). Each file is written to a temporary name, fsynced and renamed.
pub fn write_shards(dir: &Path, tokens: &[u32], mut meta: Meta) -> Result<Meta, ShardError> {
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let mut rng = SplitMix64::new(meta.seed ^ 0x5EED_5EED);
    let (mut train, mut val) = (Vec::new(), Vec::new());
    let blocks: Vec<&[u32]> = tokens.chunks(SPLIT_BLOCK).collect();
    // Validation gets at least one block when asked for any and there are two or more.
    let forced_val = (meta.val_fraction > 0.0 && blocks.len() >= 2)
        .then(|| rng.below(blocks.len() as u64) as usize);
    for (i, b) in blocks.iter().enumerate() {
        if Some(i) == forced_val || rng.next_f64() < meta.val_fraction {
            val.extend_from_slice(b);
        } else {
            train.extend_from_slice(b);
        }
    }
    let wide = meta.vocab_size > 1 << 16;
    meta.dtype = if wide { "u32" } else { "u16" }.into();
    meta.train_tokens = train.len();
    meta.val_tokens = val.len();
    for (name, toks) in [("train.bin", &train), ("val.bin", &val)] {
        let mut bytes = Vec::with_capacity(toks.len() * 4);
        for &t in toks.iter() {
            if wide {
                bytes.extend_from_slice(&t.to_le_bytes());
            } else {
                bytes.extend_from_slice(&(t as u16).to_le_bytes());
            }
        }
        write_atomic(&dir.join(name), &bytes)?;
    }
    let json = serde_json::to_vec_pretty(&meta).map_err(|e| ShardError::Bad {
        path: dir.join("meta.json"),
        why: e.to_string(),
    })?;
    write_atomic(&dir.join("meta.json"), &json)?;
    Ok(meta)
}

/// Writes `bytes` to `path` so a crash leaves either the old file or the new one: a
/// temporary sibling, fsynced, renamed over `path`, then the folder fsynced.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), ShardError> {
    let tmp = tmp_path(path);
    let mut f = std::fs::File::create(&tmp).map_err(io(&tmp))?;
    f.write_all(bytes).map_err(io(&tmp))?;
    f.sync_all().map_err(io(&tmp))?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(io(path))?;
    sync_dir(path)
}

/// `<path>.tmp`: where [`write_atomic`] stages a file.
pub fn tmp_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".tmp");
    PathBuf::from(s)
}

/// Makes a rename in `path`'s folder durable.
pub fn sync_dir(path: &Path) -> Result<(), ShardError> {
    crate::durable::sync_parent_dir(path).map_err(io(crate::durable::parent_dir(path)))
}

/// One split's tokens, memory-mapped.
pub struct TokenShard {
    map: Option<memmap2::Mmap>,
    wide: bool,
    len: usize,
}

impl TokenShard {
    fn open(path: &Path, wide: bool, vocab: usize) -> Result<Self, ShardError> {
        let f = std::fs::File::open(path).map_err(io(path))?;
        let n = f.metadata().map_err(io(path))?.len() as usize;
        let width = if wide { 4 } else { 2 };
        if !n.is_multiple_of(width) {
            return Err(ShardError::Bad {
                path: path.to_path_buf(),
                why: format!("{n} bytes is not a whole number of {width}-byte tokens"),
            });
        }
        // SAFETY: the shards are written once by `write_shards` and only read afterwards;
        // a concurrent writer replaces them by rename, which leaves this mapping intact.
        let map = if n == 0 {
            None
        } else {
            Some(unsafe { memmap2::Mmap::map(&f) }.map_err(io(path))?)
        };
        let shard = Self {
            map,
            wide,
            len: n / width,
        };
        if let Some(i) = (0..shard.len).find(|&i| shard.get(i) as usize >= vocab) {
            return Err(ShardError::Bad {
                path: path.to_path_buf(),
                why: format!(
                    "token {} at {i} is outside the vocabulary of {vocab}",
                    shard.get(i)
                ),
            });
        }
        Ok(shard)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn get(&self, i: usize) -> u32 {
        let b = self.map.as_deref().unwrap_or(&[]);
        if self.wide {
            u32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]])
        } else {
            u32::from(u16::from_le_bytes([b[2 * i], b[2 * i + 1]]))
        }
    }

    /// Tokens `start..start + out.len()` into `out`.
    pub fn read(&self, start: usize, out: &mut [u32]) {
        for (k, o) in out.iter_mut().enumerate() {
            *o = self.get(start + k);
        }
    }
}

/// A prepared data folder: meta, both splits and the tokenizer's path.
pub struct Dataset {
    pub dir: PathBuf,
    pub meta: Meta,
    pub train: TokenShard,
    pub val: TokenShard,
}

impl Dataset {
    pub fn open(dir: &Path) -> Result<Self, ShardError> {
        let meta_path = dir.join("meta.json");
        if !meta_path.is_file() {
            return Err(ShardError::Missing(dir.to_path_buf()));
        }
        let text = std::fs::read_to_string(&meta_path).map_err(io(&meta_path))?;
        let meta: Meta = serde_json::from_str(&text).map_err(|e| ShardError::Bad {
            path: meta_path.clone(),
            why: e.to_string(),
        })?;
        let wide = match meta.dtype.as_str() {
            "u16" => false,
            "u32" => true,
            other => {
                return Err(ShardError::Bad {
                    path: meta_path,
                    why: format!("dtype {other:?}, expected \"u16\" or \"u32\""),
                })
            }
        };
        let train = TokenShard::open(&dir.join("train.bin"), wide, meta.vocab_size)?;
        let val = TokenShard::open(&dir.join("val.bin"), wide, meta.vocab_size)?;
        Ok(Self {
            dir: dir.to_path_buf(),
            meta,
            train,
            val,
        })
    }

    pub fn tokenizer_path(&self) -> PathBuf {
        self.dir.join("tokenizer.gguf")
    }
}

/// Random windows of `t + 1` tokens, `b` per batch, drawn from a seeded generator whose
/// state is one u64 (saved in checkpoints, so a resumed run sees the same batches).
pub struct Batcher {
    pub rng: SplitMix64,
    pub b: usize,
    pub t: usize,
    pub inputs: Vec<u32>,
    pub targets: Vec<u32>,
    window: Vec<u32>,
}

impl Batcher {
    pub fn new(seed: u64, b: usize, t: usize) -> Self {
        Self {
            rng: SplitMix64::new(seed),
            b,
            t,
            inputs: vec![0; b * t],
            targets: vec![0; b * t],
            window: vec![0; t + 1],
        }
    }

    /// Fills `inputs` and `targets` (B, T) from `shard`, which must hold at least T + 1 tokens.
    pub fn next(&mut self, shard: &TokenShard) {
        let t = self.t;
        let starts = (shard.len() + 1).saturating_sub(t + 1).max(1) as u64;
        for row in 0..self.b {
            let s = self.rng.below(starts) as usize;
            shard.read(s, &mut self.window);
            self.inputs[row * t..(row + 1) * t].copy_from_slice(&self.window[..t]);
            self.targets[row * t..(row + 1) * t].copy_from_slice(&self.window[1..]);
        }
    }
}
