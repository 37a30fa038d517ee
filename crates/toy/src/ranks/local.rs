//! A world of ranks inside one process, one thread each: the collectives of `mod.rs` over a
//! shared table and a barrier, so tests check data-parallel training without MPI.

use super::{Collective, Ranks};
use std::sync::{Arc, Barrier, Mutex};

struct Shared {
    slots: Mutex<Vec<Vec<u8>>>,
    barrier: Barrier,
}

struct Local {
    rank: usize,
    shared: Arc<Shared>,
}

/// `n` ranks that talk through memory: give each to its own thread.
pub fn local_world(n: usize) -> Vec<Ranks> {
    let shared = Arc::new(Shared {
        slots: Mutex::new(vec![Vec::new(); n]),
        barrier: Barrier::new(n),
    });
    (0..n)
        .map(|rank| {
            let shared = shared.clone();
            Ranks::new(Arc::new(Local { rank, shared }))
        })
        .collect()
}

impl Collective for Local {
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.shared.barrier_len()
    }
    fn all_gather(&self, mine: &[u8]) -> Vec<Vec<u8>> {
        let s = &self.shared;
        s.lock()[self.rank] = mine.to_vec();
        s.barrier.wait();
        let all = s.lock().clone();
        // nobody writes the next round's slot before everyone has read this one
        s.barrier.wait();
        all
    }
    fn abort(&self, code: i32) -> ! {
        panic!("rank {} aborted the world with code {code}", self.rank)
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Vec<u8>>> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }
    fn barrier_len(&self) -> usize {
        self.lock().len()
    }
}
