//! `toy bench`: prefill and decode speed in the manner of llama-bench (pp512 / tg128):
//! prefill is one batched forward of `-p` tokens, decode is `-n` single-token steps, from an
//! empty cache or one already holding `-d` tokens (llama-bench's depth); each is repeated `-r` times and reported as mean ± sd tokens/s, with the
//! peak resident memory and the kernels this CPU dispatched to. `--train RECIPE` measures a
//! training step instead (`cmd_bench_train.rs`).

use crate::common::{load, ModelArgs};
use anyhow::{bail, Result};
use std::time::Instant;
use tinynn::kernels::dot::simd_level;
use toy::model::Logits;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    device: crate::common::DeviceArgs,
    /// Prompt tokens per prefill run.
    #[arg(short = 'p', long = "n-prompt", default_value_t = 512)]
    n_prompt: usize,
    /// Tokens per decode run.
    #[arg(short = 'n', long = "n-gen", default_value_t = 128)]
    n_gen: usize,
    /// Repetitions of each test.
    #[arg(short = 'r', long, default_value_t = 5)]
    reps: usize,
    /// Context already in the cache when each test starts (llama-bench's `-d`): filled
    /// with this many tokens, untimed, before every prefill and decode run.
    #[arg(short = 'd', long, default_value_t = 0)]
    depth: usize,
    /// Print the result as one JSON object.
    #[arg(long)]
    json: bool,
    /// Round the activations of the integer products (the legacy types Q4_0, Q4_1, Q5_0, Q8_0
    /// and the k-quants Q4_K, Q5_K, Q6_K) to one 8-bit plane, as ggml does, instead of toy's
    /// two: half their integer work, at ggml's fidelity. For
    /// comparing kernels with llama.cpp and ik_llama.cpp like for like; toy's generate, serve
    /// and eval always take two planes (a speculative draft takes one).
    #[arg(long)]
    one_plane: bool,
    /// Instead: train this recipe for --steps steps and split the step time by kind of work.
    #[arg(long, value_name = "RECIPE")]
    train: Option<std::path::PathBuf>,
    /// Steps of --train.
    #[arg(long, default_value_t = 20)]
    steps: usize,
    /// Recipe overrides for --train, e.g. --set train.precision="bf16".
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
}

/// Mean and sample standard deviation.
fn stats(xs: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = if xs.len() > 1 {
        xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)
    } else {
        0.0
    };
    (mean, var.sqrt())
}

/// Which kernels this CPU dispatches to, per weight type and width of the model's matrices.
fn kernels_used(model: &toy::model::Model) -> serde_json::Value {
    use std::collections::BTreeMap;
    let mut by_type: BTreeMap<String, serde_json::Value> = BTreeMap::new();
    for t in &model.file.tensors {
        if t.dims.len() != 2 || !tinynn::quant::can_dequantize(t.ty) {
            continue;
        }
        let (k, n) = (t.dims[0] as usize, t.dims[1] as usize);
        let Ok(w) = tinynn::kernels::QMat::new(t.ty, n, k, model.file.tensor_data(t)) else {
            continue;
        };
        let (decode, prefill) = tinynn::kernels::qmatmul::kernel_names(&w);
        let key = format!("{} K={k}", t.ty.name());
        let e = by_type.entry(key).or_insert_with(
            || serde_json::json!({"matrices": 0, "decode": decode, "prefill": prefill}),
        );
        e["matrices"] = (e["matrices"].as_u64().unwrap_or(0) + 1).into();
    }
    serde_json::json!({
        "simd": format!("{:?}", simd_level()),
        "vnni": tinynn::kernels::qgemm::has_vnni(),
        "threads": rayon::current_num_threads(),
        "matrices": by_type,
    })
}

/// Add the parallel loops run since the reading `s0` of `team::sync_points` to `l`.
fn add_loops_since(l: &mut [usize; 3], s0: (usize, usize, usize)) {
    let s1 = tinynn::team::sync_points();
    for (l, d) in l.iter_mut().zip([s1.0 - s0.0, s1.1 - s0.1, s1.2 - s0.2]) {
        *l += d;
    }
}

/// Peak resident set size in MiB (VmHWM), where the OS reports it.
pub fn peak_rss_mib() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

pub fn run(a: Args) -> Result<()> {
    a.device.cpu_only("toy bench")?;
    if let Some(recipe) = &a.train {
        return crate::cmd_bench_train::run(recipe, a.steps, &a.set, a.json);
    }
    if a.reps == 0 || (a.n_prompt == 0 && a.n_gen == 0) {
        bail!("nothing to measure: give -r >= 1 and -p or -n > 0");
    }
    let (model, _tok) = load(&a.model)?;
    let vocab = model.cfg.vocab as u32;
    let ctx = a.depth + a.n_prompt.max(a.n_gen + 1);
    let mut state = model.new_state(ctx, a.n_prompt.max(1).max(a.depth.min(512)));
    // Deterministic pseudo-random tokens, as llama-bench feeds random ids.
    let ids = |n: usize, salt: u32| -> Vec<u32> {
        (0..n as u32)
            .map(|i| (i.wrapping_add(salt).wrapping_mul(2654435761) >> 7) % vocab)
            .collect()
    };
    let prompt = ids(a.n_prompt, 0);
    let context = ids(a.depth, 7919);
    // the cache at depth `a.depth`, untimed
    let fill = |state: &mut toy::model::State| -> Result<()> {
        state.reset();
        if !context.is_empty() {
            model.forward(state, &context, Logits::Last)?;
        }
        Ok(())
    };
    let one_plane = a.one_plane;
    // one forward pass, to the greedy next token
    let forward = |state: &mut toy::model::State, ids: &[u32]| {
        let logits = if one_plane {
            tinynn::kernels::coarse_activations(|| model.forward(state, ids, Logits::Last))
        } else {
            model.forward(state, ids, Logits::Last)
        };
        logits.map(toy::infer::sampler::argmax)
    };
    let (mut pp, mut tg) = (Vec::new(), Vec::new());
    // parallel loops (the synchronisation points) of the prefill runs and the decode runs
    let (mut pp_loops, mut tg_loops) = ([0usize; 3], [0usize; 3]);
    // One warm-up run of each (page in the weights), as llama-bench does.
    for rep in 0..=a.reps {
        if a.n_prompt > 0 {
            fill(&mut state)?;
            let s0 = tinynn::team::sync_points();
            let t = Instant::now();
            forward(&mut state, &prompt)?;
            if rep > 0 {
                pp.push(a.n_prompt as f64 / t.elapsed().as_secs_f64());
                add_loops_since(&mut pp_loops, s0);
            }
        }
        if a.n_gen > 0 {
            fill(&mut state)?;
            let mut id = prompt.first().copied().unwrap_or(1);
            let mut pool = tinynn::pool::Adaptive::new();
            let s0 = tinynn::team::sync_points();
            let t = Instant::now();
            for _ in 0..a.n_gen {
                id = pool.run(|| forward(&mut state, &[id]))?;
            }
            if rep > 0 {
                tg.push(a.n_gen as f64 / t.elapsed().as_secs_f64());
                add_loops_since(&mut tg_loops, s0);
            }
        }
    }
    let ((ppm, pps), (tgm, tgs)) = (stats(&pp), stats(&tg));
    let kernels = kernels_used(&model);
    let rss = peak_rss_mib();
    let per = |l: [usize; 3], n: usize| {
        let n = n.max(1) as f64;
        serde_json::json!({
            "team": l[0] as f64 / n, "rayon": l[1] as f64 / n, "serial": l[2] as f64 / n,
        })
    };
    let loops = serde_json::json!({
        "prefill_per_run": per(pp_loops, a.reps),
        "decode_per_token": per(tg_loops, a.reps * a.n_gen),
    });
    if a.json {
        println!(
            "{}",
            serde_json::json!({
                "model": a.model.model.display().to_string(),
                "n_prompt": a.n_prompt, "n_gen": a.n_gen, "reps": a.reps, "depth": a.depth,
                "one_plane": a.one_plane,
                "prefill_tok_s": {"mean": ppm, "sd": pps},
                "decode_tok_s": {"mean": tgm, "sd": tgs},
                "peak_rss_mib": rss,
                "parallel_loops": loops,
                "kernels": kernels,
            })
        );
    } else {
        println!(
            "model {}  threads {}  simd {:?}",
            a.model.model.display(),
            rayon::current_num_threads(),
            simd_level()
        );
        let at = if a.depth > 0 {
            format!(" @ d{}", a.depth)
        } else {
            String::new()
        };
        let show = |what: &str, l: &serde_json::Value| {
            println!(
                "  parallel loops {what}: {} through the polling workers, {} on rayon, {} on one thread",
                l["team"], l["rayon"], l["serial"]
            )
        };
        if a.n_prompt > 0 {
            println!("pp{:<5}{at} {:>9.1} ± {:.1} tok/s", a.n_prompt, ppm, pps);
            show("per run", &loops["prefill_per_run"]);
        }
        if a.n_gen > 0 {
            println!("tg{:<5}{at} {:>9.1} ± {:.1} tok/s", a.n_gen, tgm, tgs);
            show("per token", &loops["decode_per_token"]);
        }
        println!("peak RSS {:.1} MiB", rss.unwrap_or(f64::NAN));
        if let Some(m) = kernels["matrices"].as_object() {
            for (k, v) in m {
                println!(
                    "  {k:<14} x{:<4} decode: {}; prefill: {}",
                    v["matrices"],
                    v["decode"].as_str().unwrap_or(""),
                    v["prefill"].as_str().unwrap_or("")
                );
            }
        }
    }
    Ok(())
}
