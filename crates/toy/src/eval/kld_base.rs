//! llama-perplexity's KL-divergence base file, the one `--kl-divergence-base FILE` writes
//! and `--kl-divergence` reads (tools/perplexity/perplexity.cpp of llama.cpp 0c1e570:
//! `perplexity`, `process_logits`, `log_softmax`, `kl_divergence`). All little-endian:
//!
//! ```text
//! "_logits_"                          8 bytes
//! n_ctx, n_vocab, n_chunk             i32 each
//! tokens                              i32 x n_chunk*n_ctx (the text's, before BOS substitution)
//! per chunk, per scored position      n_scored(n_ctx) = n_ctx - 1 - n_ctx/2 rows of
//!   scale, min_log_prob               f32 each (= 4 u16)
//!   q[0..n_vocab]                     u16, padded to an even count: nv = 2*((V+1)/2) + 4 u16
//! ```
//!
//! A row stores log p_i = scale*q_i + min_log_prob, quantized over [max-16, max] of the
//! logits (lower logits store 0), so log-probs below max-16 are not kept.

use crate::durable::{parent_dir, sync_parent_dir};
use crate::eval::perplexity::n_scored;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

pub const MAGIC: &[u8; 8] = b"_logits_";
const HEADER_BYTES: u64 = 8 + 3 * 4;
/// Bounds on header fields, checked before anything is allocated from them.
const MAX_CTX: usize = 1 << 20;
const MAX_VOCAB: usize = 1 << 24;

#[derive(Debug, thiserror::Error)]
pub enum KldBaseError {
    #[error("'{path}': {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("'{path}' is not a KL-divergence base: it starts with {seen:?}, expected \"_logits_\" (a file of `--save-base` or llama-perplexity --kl-divergence-base)")]
    NotABase { path: PathBuf, seen: String },
    #[error("'{path}': bad header: {why}")]
    BadHeader { path: PathBuf, why: String },
    #[error("'{path}' is truncated: {got} bytes, expected {expected} for {n_chunk} chunks of {n_ctx} tokens over {n_vocab} (only {complete} whole chunks of log-probs)")]
    Truncated {
        path: PathBuf,
        got: u64,
        expected: u128,
        n_chunk: usize,
        n_ctx: usize,
        n_vocab: usize,
        complete: u128,
    },
    #[error("'{path}' has {got} bytes, expected exactly {expected} for its header ({n_chunk} chunks of {n_ctx} tokens over {n_vocab})")]
    TrailingBytes {
        path: PathBuf,
        got: u64,
        expected: u128,
        n_chunk: usize,
        n_ctx: usize,
        n_vocab: usize,
    },
    #[error("base writer: {0}")]
    Usage(String),
}

/// What a base file says before its log-probs.
#[derive(Clone, Debug, PartialEq)]
pub struct BaseHeader {
    pub n_ctx: usize,
    pub n_vocab: usize,
    pub n_chunk: usize,
    /// n_chunk * n_ctx tokens.
    pub tokens: Vec<u32>,
}

impl BaseHeader {
    /// u16 per stored row: llama.cpp's `nv = 2*((n_vocab + 1)/2) + 4`.
    pub fn row_len(&self) -> usize {
        row_len(self.n_vocab)
    }

    /// u16 of one chunk's rows.
    pub fn chunk_len(&self) -> usize {
        n_scored(self.n_ctx) * self.row_len()
    }

    /// The exact size of a complete file with this header (u128: a bad header's product
    /// must not wrap before it is compared with the file's size).
    pub fn file_bytes(&self) -> u128 {
        let (n_chunk, n_ctx) = (self.n_chunk as u128, self.n_ctx as u128);
        u128::from(HEADER_BYTES) + 4 * n_chunk * n_ctx + 2 * n_chunk * self.chunk_len() as u128
    }
}

pub fn row_len(n_vocab: usize) -> usize {
    2 * n_vocab.div_ceil(2) + 4
}

/// One stored row: the base model's log-probabilities at one position.
#[derive(Clone, Copy)]
pub struct BaseRow<'a> {
    pub scale: f32,
    pub min_log_prob: f32,
    /// n_vocab quantized values.
    pub q: &'a [u16],
}

impl<'a> BaseRow<'a> {
    /// View a stored row (row_len(n_vocab) u16).
    pub fn new(row: &'a [u16], n_vocab: usize) -> Self {
        let f = |i: usize| f32::from_bits(u32::from(row[i]) | u32::from(row[i + 1]) << 16);
        Self {
            scale: f(0),
            min_log_prob: f(2),
            q: &row[4..4 + n_vocab],
        }
    }

    pub fn log_prob(&self, i: usize) -> f32 {
        self.scale * f32::from(self.q[i]) + self.min_log_prob
    }
}

/// llama.cpp's `nearest_int`: round half to even (exact for |x| < 2^22).
fn nearest_int(x: f32) -> i32 {
    x.round_ties_even() as i32
}

/// Quantize the logits `row` (V) into `out` (row_len(V) u16) as llama.cpp's writer does;
/// returns the negative log-likelihood of `tok`, in llama.cpp's float arithmetic.
pub fn encode_row(row: &[f32], tok: usize, out: &mut [u16]) -> f64 {
    let (mut max, mut min) = (row[0], row[0]);
    for &l in &row[1..] {
        max = max.max(l);
        min = min.min(l);
    }
    let min = min.max(max - 16.0);
    let sum: f64 = row.iter().map(|&l| f64::from((l - max).exp())).sum();
    let lse = sum.ln() as f32;
    let min_log_prob = min - max - lse;
    let scale = (max - min) / 65535.0;
    let (s, m) = (scale.to_bits(), min_log_prob.to_bits());
    out[..4].copy_from_slice(&[s as u16, (s >> 16) as u16, m as u16, (m >> 16) as u16]);
    let q = &mut out[4..];
    if scale != 0.0 {
        let inv = 1.0 / scale;
        for (q, &l) in q.iter_mut().zip(row) {
            // llama.cpp stores the int in a uint16_t
            *q = if l > min {
                nearest_int(inv * (l - min)) as u16
            } else {
                0
            };
        }
    } else {
        q.fill(0);
    }
    f64::from(max + lse - row[tok])
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> KldBaseError + '_ {
    move |source| KldBaseError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Writes a base: to `<path>.tmp-<pid>`, fsynced and renamed over `path` by `finish`
/// (the temp file is removed when the writer is dropped unfinished).
pub struct BaseWriter {
    header: BaseHeader,
    path: PathBuf,
    tmp: PathBuf,
    out: Option<BufWriter<std::fs::File>>,
    chunks: usize,
    bytes: Vec<u8>,
}

impl BaseWriter {
    /// Start a base for `header` (its tokens are written now).
    pub fn create(path: &Path, header: BaseHeader) -> Result<Self, KldBaseError> {
        let h = &header;
        if h.tokens.len() != h.n_chunk * h.n_ctx || h.n_ctx < 4 || h.n_vocab == 0 {
            return Err(KldBaseError::Usage(format!(
                "{} tokens for {} chunks of {} over {}: expected n_chunk*n_ctx tokens, n_ctx >= 4, n_vocab > 0",
                h.tokens.len(), h.n_chunk, h.n_ctx, h.n_vocab
            )));
        }
        let as_i32 = |n: usize, what: &str| {
            i32::try_from(n).map_err(|_| KldBaseError::Usage(format!("{what} {n} overflows i32")))
        };
        let mut head = MAGIC.to_vec();
        for (n, what) in [
            (h.n_ctx, "n_ctx"),
            (h.n_vocab, "n_vocab"),
            (h.n_chunk, "n_chunk"),
        ] {
            head.extend_from_slice(&as_i32(n, what)?.to_le_bytes());
        }
        for &t in &h.tokens {
            head.extend_from_slice(&as_i32(t as usize, "token")?.to_le_bytes());
        }
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(format!(".tmp-{}", std::process::id()));
        let tmp = PathBuf::from(tmp);
        let file = std::fs::File::create(&tmp).map_err(io(&tmp))?;
        let mut w = Self {
            header,
            path: path.to_path_buf(),
            tmp,
            out: Some(BufWriter::with_capacity(1 << 20, file)),
            chunks: 0,
            bytes: Vec::new(),
        };
        w.write_bytes(&head)?;
        Ok(w)
    }

    fn write_bytes(&mut self, b: &[u8]) -> Result<(), KldBaseError> {
        let out = self
            .out
            .as_mut()
            .ok_or_else(|| KldBaseError::Usage("finished".into()))?;
        out.write_all(b).map_err(io(&self.tmp))
    }

    /// The next chunk's rows (header.chunk_len() u16, from [`encode_row`]).
    pub fn write_chunk(&mut self, rows: &[u16]) -> Result<(), KldBaseError> {
        let h = &self.header;
        if rows.len() != h.chunk_len() || self.chunks == h.n_chunk {
            return Err(KldBaseError::Usage(format!(
                "chunk {} of {} with {} values, expected {} chunks of {}",
                self.chunks + 1,
                h.n_chunk,
                rows.len(),
                h.n_chunk,
                h.chunk_len()
            )));
        }
        let mut bytes = std::mem::take(&mut self.bytes);
        bytes.clear();
        bytes.extend(rows.iter().flat_map(|v| v.to_le_bytes()));
        let r = self.write_bytes(&bytes);
        self.bytes = bytes;
        self.chunks += 1;
        r
    }

    /// Flush, fsync and rename into place, once every chunk is written.
    pub fn finish(mut self) -> Result<(), KldBaseError> {
        if self.chunks != self.header.n_chunk {
            return Err(KldBaseError::Usage(format!(
                "finished after {} of {} chunks",
                self.chunks, self.header.n_chunk
            )));
        }
        let out = self
            .out
            .take()
            .ok_or_else(|| KldBaseError::Usage("finished".into()))?;
        let file = out
            .into_inner()
            .map_err(|e| io(&self.tmp)(e.into_error()))?;
        file.sync_all().map_err(io(&self.tmp))?;
        drop(file);
        std::fs::rename(&self.tmp, &self.path).map_err(io(&self.path))?;
        sync_parent_dir(&self.path).map_err(io(parent_dir(&self.path)))
    }
}

impl Drop for BaseWriter {
    fn drop(&mut self) {
        if self.out.take().is_some() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Reads a base chunk by chunk; `open` checks the header and that the file is complete.
pub struct BaseReader {
    pub header: BaseHeader,
    path: PathBuf,
    input: BufReader<std::fs::File>,
    next: usize,
    bytes: Vec<u8>,
}

impl BaseReader {
    pub fn open(path: &Path) -> Result<Self, KldBaseError> {
        let file = std::fs::File::open(path).map_err(io(path))?;
        let got = file.metadata().map_err(io(path))?.len();
        let mut input = BufReader::with_capacity(1 << 20, file);
        let mut head = [0u8; HEADER_BYTES as usize];
        let n = read_full(&mut input, &mut head).map_err(io(path))?;
        if n < 8 || &head[..8] != MAGIC {
            return Err(KldBaseError::NotABase {
                path: path.to_path_buf(),
                seen: String::from_utf8_lossy(&head[..n.min(8)]).into_owned(),
            });
        }
        let bad = |why: String| KldBaseError::BadHeader {
            path: path.to_path_buf(),
            why,
        };
        if n < head.len() {
            return Err(bad(format!(
                "{got} bytes, too short for n_ctx, n_vocab and n_chunk"
            )));
        }
        let field = |i: usize| i32::from_le_bytes([head[i], head[i + 1], head[i + 2], head[i + 3]]);
        let (n_ctx, n_vocab, n_chunk) = (field(8), field(12), field(16));
        let check = |v: i32, what: &str, lo: i32, hi: usize| match usize::try_from(v) {
            Ok(u) if v >= lo && u <= hi => Ok(u),
            _ => Err(bad(format!("{what} is {v}, expected {lo} ..= {hi}"))),
        };
        let n_ctx = check(n_ctx, "n_ctx", 4, MAX_CTX)?;
        let n_vocab = check(n_vocab, "n_vocab", 1, MAX_VOCAB)?;
        let n_chunk = check(n_chunk, "n_chunk", 1, usize::MAX)?;
        let mut header = BaseHeader {
            n_ctx,
            n_vocab,
            n_chunk,
            tokens: Vec::new(),
        };
        let expected = header.file_bytes();
        let token_end = u128::from(HEADER_BYTES) + 4 * (n_chunk as u128) * (n_ctx as u128);
        if u128::from(got) < expected {
            let complete =
                u128::from(got).saturating_sub(token_end) / (2 * header.chunk_len() as u128);
            return Err(KldBaseError::Truncated {
                path: path.to_path_buf(),
                got,
                expected,
                n_chunk,
                n_ctx,
                n_vocab,
                complete,
            });
        }
        if u128::from(got) > expected {
            return Err(KldBaseError::TrailingBytes {
                path: path.to_path_buf(),
                got,
                expected,
                n_chunk,
                n_ctx,
                n_vocab,
            });
        }
        // the file is as long as the header says, so the token count is bounded by its size
        let mut raw = vec![0u8; 4 * n_chunk * n_ctx];
        input.read_exact(&mut raw).map_err(io(path))?;
        header.tokens = raw
            .chunks_exact(4)
            .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .map(|t| u32::try_from(t).map_err(|_| bad(format!("token id {t} is negative"))))
            .collect::<Result<_, _>>()?;
        Ok(Self {
            header,
            path: path.to_path_buf(),
            input,
            next: 0,
            bytes: Vec::new(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The next chunk's rows into `rows` (header.chunk_len() u16); false after the last.
    pub fn read_chunk(&mut self, rows: &mut Vec<u16>) -> Result<bool, KldBaseError> {
        if self.next == self.header.n_chunk {
            return Ok(false);
        }
        self.bytes.resize(2 * self.header.chunk_len(), 0);
        self.input
            .read_exact(&mut self.bytes)
            .map_err(io(&self.path))?;
        rows.clear();
        rows.extend(
            self.bytes
                .chunks_exact(2)
                .map(|b| u16::from_le_bytes([b[0], b[1]])),
        );
        self.next += 1;
        Ok(true)
    }
}

/// Read until `buf` is full or the input ends; how many bytes were read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}
