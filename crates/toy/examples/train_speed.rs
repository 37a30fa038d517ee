//! Training throughput of the issue-4 shapes: full steps (zero_grad, forward_backward,
//! clip_grad_norm, AdamW) on random tokens, median tokens/s over the timed steps.
//!
//! `RAYON_NUM_THREADS=2 cargo run --release -p toy --example train_speed -- [tiny|small|all] [llama|gpt2] [steps]`

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;
use tinynn::optim::{clip_grad_norm, AdamW, AdamWConfig};
use toy::train::{Arch, ModelConfig, ModelSpec, TrainModel};

fn config(name: &str, arch: Arch) -> (ModelConfig, usize) {
    let (vocab, d_model, n_head, d_ff, n_layer, ctx, batch) = match name {
        "tiny" => (627, 64, 4, 128, 2, 32, 16),
        _ => (4096, 288, 6, 768, 6, 256, 8),
    };
    let cfg = ModelConfig::try_from(ModelSpec {
        arch,
        vocab,
        d_model,
        n_head,
        n_kv_head: n_head,
        d_ff,
        n_layer,
        ctx,
        norm_eps: 1e-5,
        rope_base: 10000.0,
        depth_scale: false,
        tied: true,
        hybrid: None,
        head_dim: None,
        rope_freqs: None,
        ctx_train: None,
        inference_rounding: false,
        swa: None,
    })
    .expect("a valid config");
    (cfg, batch)
}

/// xorshift tokens: the benchmark needs no particular data.
fn tokens(n: usize, vocab: usize, seed: u64) -> Vec<u32> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % vocab as u64) as u32
        })
        .collect()
}

/// Counts heap allocations in the timed steps. toy's layers make none once warmed up; the
/// `gemm` crate allocates its packing buffer and a small flag vector in each call (served
/// from malloc's free lists: no page faults).
struct Counting;
static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        System.alloc(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        System.realloc(p, l, n)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// CPU time of all this process's threads so far (ns), from /proc (Linux; 0 elsewhere):
/// unlike wall time, it is not inflated when other processes take the cores.
fn cpu_ns() -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    dir.filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

fn bench(name: &str, arch: Arch, steps: usize) {
    let (cfg, b) = config(name, arch);
    let t = cfg.ctx;
    let mut m = TrainModel::init(cfg.clone(), b, 1);
    let mut opt = AdamW::new(m.params.len(), AdamWConfig::default());
    let decay = m.decay_ranges();
    let warmup = (steps / 5).max(2);
    let mut times = Vec::with_capacity(steps);
    let mut loss = 0.0;
    let (mut cpu0, mut allocs) = (0, 0);
    for s in 0..warmup + steps {
        if s == warmup {
            cpu0 = cpu_ns();
        }
        let x = tokens(b * t, cfg.vocab, 2 * s as u64 + 1);
        let y = tokens(b * t, cfg.vocab, 2 * s as u64 + 2);
        let (t0, a0) = (Instant::now(), ALLOCS.load(Ordering::Relaxed));
        m.zero_grad();
        loss = m.forward_backward(&x, &y, b, t);
        clip_grad_norm(&mut m.grads, 1.0);
        opt.step(&mut m.params, &m.grads, 1e-3, &decay);
        if s >= warmup {
            times.push(t0.elapsed().as_secs_f64());
            allocs += ALLOCS.load(Ordering::Relaxed) - a0;
        }
    }
    let cpu_ms = (cpu_ns() - cpu0) as f64 / 1e6 / steps as f64;
    times.sort_by(|a, b| a.total_cmp(b));
    let med = times[times.len() / 2];
    println!(
        "{name:5} {:5} params {:>9}  {:>5} tok/step  median {:7.2} ms/step  {:>9.0} tok/s  (best {:.0}, loss {loss:.3}, {} threads, {cpu_ms:.2} CPU-ms/step, {} heap allocations/step)",
        arch.name(),
        m.params.len(),
        b * t,
        med * 1e3,
        (b * t) as f64 / med,
        (b * t) as f64 / times[0],
        rayon::current_num_threads(),
        allocs / steps as u64
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let which = args.first().map(String::as_str).unwrap_or("all");
    let arch = match args.get(1).map(String::as_str) {
        Some("gpt2") => Arch::Gpt2,
        _ => Arch::Llama,
    };
    let steps: Option<usize> = args.get(2).and_then(|s| s.parse().ok());
    if which == "tiny" || which == "all" {
        bench("tiny", arch, steps.unwrap_or(200));
    }
    if which == "small" || which == "all" {
        bench("small", arch, steps.unwrap_or(10));
    }
}
