//! The ranks of an MPI job, on rsmpi over the system's MPI (OpenMPI on Debian). Only plain
//! copies go through MPI (all-to-all, all-gather), never an MPI reduction, whose order of
//! addition is the library's choice: the gradient's sum is a reduce-scatter by hand, each
//! rank adding its slice of every rank's gradient in rank order, then an all-gather of the
//! slices (the bytes moved are a ring all-reduce's; the bits are the same on every rank and
//! transport).

use super::{sum_in_order, Collective, Ranks};
use mpi::datatype::{Partition, PartitionMut};
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use mpi::Count;
use std::sync::{Arc, Mutex};

/// MPI stays initialised while this lives (drop it last: MPI_Finalize).
pub struct Universe(#[allow(dead_code)] mpi::environment::Universe);

struct Mpi {
    rank: usize,
    size: usize,
    /// Calls come one at a time (MPI_THREAD_SERIALIZED).
    world: Mutex<SimpleCommunicator>,
}

// SAFETY: the communicator is a handle to MPI_COMM_WORLD; every use is under the mutex, and
// MPI was initialised for serialized calls from any thread.
unsafe impl Send for Mpi {}
unsafe impl Sync for Mpi {}

/// Whether this process was started by an MPI launcher (mpirun, srun with PMI/PMIx).
pub fn launched() -> bool {
    ["OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"]
        .iter()
        .any(|k| std::env::var_os(k).is_some())
}

/// Joins the MPI job; also returns how many ranks share this machine.
pub fn init() -> Result<(Universe, Ranks, usize), String> {
    let (universe, _) = mpi::initialize_with_threading(mpi::Threading::Serialized)
        .ok_or("MPI was already initialised")?;
    let world = universe.world();
    let local = world.split_shared(world.rank()).size() as usize;
    let m = Mpi {
        rank: world.rank() as usize,
        size: world.size() as usize,
        world: Mutex::new(world),
    };
    Ok((Universe(universe), Ranks::new(Arc::new(m)), local.max(1)))
}

/// Slice `k` of `size` of a vector of `len`: counts and offsets.
fn slices(len: usize, size: usize) -> (Vec<Count>, Vec<Count>) {
    let at = |k: usize| (k * len / size) as Count;
    let displs: Vec<Count> = (0..size).map(at).collect();
    let counts = (0..size).map(|k| at(k + 1) - at(k)).collect();
    (counts, displs)
}

impl Mpi {
    fn lock(&self) -> std::sync::MutexGuard<'_, SimpleCommunicator> {
        self.world.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Collective for Mpi {
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }

    fn all_gather(&self, mine: &[u8]) -> Vec<Vec<u8>> {
        // a byte in front of each message: no buffer is empty (OpenMPI refuses two empty
        // buffers at one address as an in-place call)
        let mine = [&[1u8][..], mine].concat();
        let w = self.lock();
        let mut lens = vec![0u64; self.size];
        w.all_gather_into(&(mine.len() as u64), &mut lens[..]);
        let c: Vec<Count> = lens.iter().map(|&l| l as Count).collect();
        let d: Vec<Count> = c
            .iter()
            .scan(0, |s, &n| Some(std::mem::replace(s, *s + n)))
            .collect();
        let mut all = vec![0u8; lens.iter().sum::<u64>() as usize];
        let mut part = PartitionMut::new(&mut all[..], &c[..], &d[..]);
        w.all_gather_varcount_into(&mine[..], &mut part);
        (0..self.size)
            .map(|r| all[d[r] as usize + 1..(d[r] + c[r]) as usize].to_vec())
            .collect()
    }

    fn sum_f32(&self, x: &mut [f32]) {
        let (n, me) = (self.size, self.rank);
        if x.len() < n {
            // too short to give every rank a slice
            let all = self.all_gather(&super::to_bytes(x));
            return sum_in_order(x, all.iter().map(|b| super::from_bytes(b)));
        }
        let (c, d) = slices(x.len(), n);
        let mine = c[me] as usize;
        // every rank's slice `me`, one after another: (N, mine)
        let mut got = vec![0f32; n * mine];
        let rc: Vec<Count> = vec![mine as Count; n];
        let rd: Vec<Count> = (0..n).map(|r| (r * mine) as Count).collect();
        let w = self.lock();
        {
            let send = Partition::new(&x[..], &c[..], &d[..]);
            let mut recv = PartitionMut::new(&mut got[..], &rc[..], &rd[..]);
            w.all_to_all_varcount_into(&send, &mut recv);
        }
        let mut sum = vec![0f32; mine];
        sum_in_order(&mut sum, got.chunks_exact(mine).map(|p| p.to_vec()));
        let mut all = PartitionMut::new(x, &c[..], &d[..]);
        w.all_gather_varcount_into(&sum[..], &mut all);
    }

    fn abort(&self, code: i32) -> ! {
        self.lock().abort(code)
    }
}
