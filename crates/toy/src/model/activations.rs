//! Squared activations at the input of every block matrix, for an importance matrix (what
//! llama.cpp's `llama-imatrix` collects, tools/imatrix/imatrix.cpp): while [`collect`] runs
//! a closure, each [`super::weights::Linear`] product adds `x_j^2` of every row of its input
//! to its weight's per-column sums and counts the rows, in f32 and row order as llama.cpp
//! does. The collection belongs to the calling thread (the one that runs the model's
//! forward pass); elsewhere, and when no collection runs, a product pays one thread-local
//! read.

use std::cell::RefCell;
use std::collections::BTreeMap;

/// Per-column sums of squares of one matrix's inputs, and how many rows (tokens) went in.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct InputStats {
    pub sums: Vec<f32>,
    pub rows: u64,
}

pub type Collected = BTreeMap<String, InputStats>;

thread_local! {
    static STATS: RefCell<Option<Collected>> = const { RefCell::new(None) };
}

/// Adds the rows of `x` (each `cols` wide), the input of weight `name`, where a collection
/// runs on this thread.
pub(crate) fn record(name: &str, x: &[f32], cols: usize) {
    STATS.with(|s| {
        let mut s = s.borrow_mut();
        let Some(map) = s.as_mut() else { return };
        let e = map.entry(name.to_string()).or_default();
        if e.sums.is_empty() {
            e.sums = vec![0.0; cols];
        }
        if e.sums.len() != cols || cols == 0 {
            return; // a matrix's input width never changes; nothing to add to otherwise
        }
        for row in x.chunks_exact(cols) {
            for (a, v) in e.sums.iter_mut().zip(row) {
                *a += v * v;
            }
            e.rows += 1;
        }
    })
}

/// Runs `f` with a collection on this thread and returns what it collected (added to
/// `into`, which may hold earlier chunks' sums).
pub fn collect<R>(into: Collected, f: impl FnOnce() -> R) -> (R, Collected) {
    let outer = STATS.with(|s| s.borrow_mut().replace(into));
    let r = f();
    let got = STATS.with(|s| std::mem::replace(&mut *s.borrow_mut(), outer));
    (r, got.unwrap_or_default())
}
