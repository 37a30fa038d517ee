//! Data-parallel ranks: the processes of one training run, as MPI starts them (`mpirun -np N`,
//! Slurm's `srun`) and as llm.c's `train_gpt2.cu` uses them. Every rank runs the same steps on
//! its share of each batch; what they exchange is sums (the loss, the gradient) and, at start,
//! proof that they run the same recipe and binary.
//!
//! Sums are added in rank order, 0 first, and give the same bits on every rank, whatever the
//! transport: an MPI reduction may add in any order, so none is used (see `mpi.rs`). One
//! process is [`Ranks::default`], a world of one whose collectives return their input.

mod local;
#[cfg(feature = "mpi")]
pub mod mpi;

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

pub use local::local_world;

/// What a world of ranks can do. Every rank calls the same collectives in the same order.
pub trait Collective: Send + Sync {
    fn rank(&self) -> usize;
    fn size(&self) -> usize;

    /// Every rank's `mine`, in rank order.
    fn all_gather(&self, mine: &[u8]) -> Vec<Vec<u8>>;

    /// `x` becomes the sum over ranks of `x`, added in rank order.
    fn sum_f32(&self, x: &mut [f32]) {
        let all = self.all_gather(&to_bytes(x));
        sum_in_order(x, all.iter().map(|b| from_bytes(b)));
    }

    /// Stops every rank of the world now (MPI_Abort), with exit code `code`.
    fn abort(&self, code: i32) -> !;
}

/// `acc` = parts[0] + parts[1] + ... element by element, in that order.
pub(crate) fn sum_in_order(acc: &mut [f32], mut parts: impl Iterator<Item = Vec<f32>>) {
    if let Some(first) = parts.next() {
        acc.copy_from_slice(&first);
    }
    for p in parts {
        for (a, b) in acc.iter_mut().zip(&p) {
            *a += *b;
        }
    }
}

fn to_bytes(x: &[f32]) -> Vec<u8> {
    x.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn from_bytes(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Nanoseconds this process has spent in the ranks' sums (waiting for the slowest rank
/// included).
static SUM_NANOS: AtomicU64 = AtomicU64::new(0);

/// Seconds this process has spent in the ranks' sums of losses and gradients, waiting for
/// the other ranks included: the data-parallel cost of a run.
pub fn seconds_in_sums() -> f64 {
    SUM_NANOS.load(Ordering::Relaxed) as f64 * 1e-9
}

fn timed<T>(f: impl FnOnce() -> T) -> T {
    let t0 = Instant::now();
    let r = f();
    SUM_NANOS.fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
    r
}

/// One process: the world of one rank.
struct One;

impl Collective for One {
    fn rank(&self) -> usize {
        0
    }
    fn size(&self) -> usize {
        1
    }
    fn all_gather(&self, mine: &[u8]) -> Vec<Vec<u8>> {
        vec![mine.to_vec()]
    }
    fn sum_f32(&self, _: &mut [f32]) {}
    fn abort(&self, code: i32) -> ! {
        std::process::exit(code)
    }
}

/// Why ranks refuse to go on together.
#[derive(Debug, thiserror::Error)]
pub enum RanksError {
    #[error("the ranks differ in their {what}: {detail}; start every rank with the same binary and recipe")]
    Differ { what: String, detail: String },
    #[error("the global batch of {batch} sequences does not divide among {ranks} ranks: give a batch that is a multiple of {ranks}, or start {ranks_hint}")]
    Batch {
        batch: usize,
        ranks: usize,
        ranks_hint: String,
    },
    #[error("{0} trains in one process: data-parallel ranks train language models (toy train, toy finetune)")]
    NotParallel(String),
}

/// A handle on this process's world (cheap to clone).
#[derive(Clone)]
pub struct Ranks(Arc<dyn Collective>);

impl Default for Ranks {
    fn default() -> Self {
        Self(Arc::new(One))
    }
}

impl fmt::Debug for Ranks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Ranks({} of {})", self.rank(), self.size())
    }
}

impl Ranks {
    pub fn new(c: Arc<dyn Collective>) -> Self {
        Self(c)
    }
    pub fn rank(&self) -> usize {
        self.0.rank()
    }
    pub fn size(&self) -> usize {
        self.0.size()
    }
    /// Rank 0: the one that writes the run folder, the events and checkpoints, and talks.
    pub fn is_root(&self) -> bool {
        self.rank() == 0
    }
    /// Whether there is more than one rank.
    pub fn parallel(&self) -> bool {
        self.size() > 1
    }
    pub fn sum_f32(&self, x: &mut [f32]) {
        if self.parallel() {
            timed(|| self.0.sum_f32(x))
        }
    }
    /// The sum over ranks of `x`, in rank order.
    pub fn sum_f64(&self, x: f64) -> f64 {
        if !self.parallel() {
            return x;
        }
        let all = timed(|| self.0.all_gather(&x.to_le_bytes()));
        all.iter().fold(0.0, |acc, b| {
            acc + f64::from_le_bytes(b[..8].try_into().unwrap_or([0; 8]))
        })
    }
    /// Rank 0's `text` on every rank.
    pub fn broadcast(&self, text: &str) -> String {
        if !self.parallel() {
            return text.to_string();
        }
        let all = self
            .0
            .all_gather(if self.is_root() { text.as_bytes() } else { &[] });
        String::from_utf8_lossy(&all[0]).into_owned()
    }
    /// Waits until every rank is here.
    pub fn barrier(&self) {
        if self.parallel() {
            self.0.all_gather(&[]);
        }
    }
    /// Refuses to go on unless every rank has the same `bytes` (a resolved recipe, the
    /// binary): each rank's FNV-1a hash is compared; the error names the ranks that differ
    /// from rank 0.
    pub fn check_same(&self, what: &str, bytes: &[u8]) -> Result<(), RanksError> {
        if !self.parallel() {
            return Ok(());
        }
        let all = self.0.all_gather(&fnv1a(bytes).to_le_bytes());
        let odd: Vec<String> = (1..all.len())
            .filter(|&r| all[r] != all[0])
            .map(|r| r.to_string())
            .collect();
        match odd.is_empty() {
            true => Ok(()),
            false => Err(RanksError::Differ {
                what: what.to_string(),
                detail: format!("rank {} against rank 0", odd.join(", ")),
            }),
        }
    }
    /// The global batch must split evenly: each rank takes `batch / size` of its rows.
    pub fn check_batch(&self, batch: usize) -> Result<(), RanksError> {
        let n = self.size();
        if batch.is_multiple_of(n) {
            return Ok(());
        }
        let divisors: Vec<String> = (1..=batch)
            .filter(|d| batch.is_multiple_of(*d))
            .map(|d| d.to_string())
            .collect();
        Err(RanksError::Batch {
            batch,
            ranks: n,
            ranks_hint: format!(
                "a number of ranks that divides it ({})",
                divisors.join(", ")
            ),
        })
    }
    /// Rows `lo..hi` of a batch of `b` rows that this rank runs: `ceil(b / size)` each, in
    /// rank order (two ranks split as one process splits its two shards).
    pub fn rows(&self, b: usize) -> std::ops::Range<usize> {
        let each = b.div_ceil(self.size());
        let lo = (self.rank() * each).min(b);
        lo..(lo + each).min(b)
    }
    /// Stops every rank now.
    pub fn abort(&self, code: i32) -> ! {
        self.0.abort(code)
    }
}

/// FNV-1a, 64 bits: the same on every machine and build.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_split_as_two_shards_and_cover_the_batch() {
        for n in 1..=5 {
            for b in 0..=13 {
                let world = local_world(n);
                let mut next = 0;
                for r in &world {
                    let rows = r.rows(b);
                    assert_eq!(rows.start, next.min(b), "n={n} b={b}");
                    next = rows.end;
                }
                assert_eq!(next, b);
            }
        }
        // two ranks: the first takes ceil(b / 2), as the first of a model's two shards
        let two = local_world(2);
        assert_eq!(two[0].rows(7), 0..4);
        assert_eq!(two[1].rows(7), 4..7);
    }

    #[test]
    fn batch_that_does_not_divide_names_both() {
        let three = local_world(3);
        let e = three[0].check_batch(16).unwrap_err().to_string();
        assert!(e.contains("16") && e.contains("3 ranks"), "{e}");
        assert!(three[0].check_batch(15).is_ok());
        assert!(Ranks::default().check_batch(7).is_ok());
    }
}
