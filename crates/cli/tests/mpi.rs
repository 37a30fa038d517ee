//! `mpirun -np N toy train|finetune` (built with `--features mpi`, run by scripts/mpi-test.sh
//! with OpenMPI): ranks train as one process does, bit for bit on two ranks; rank 0 alone
//! writes one run folder; a run of two ranks resumes in one process; TCP and shared memory
//! give the same bits; a dead rank stops the job and leaves the last checkpoint whole; bad
//! starts are refused with one line.
#![cfg(feature = "mpi")]

mod common;

use common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;

/// The ranks take both cores: one job at a time.
static ONE_JOB: Mutex<()> = Mutex::new(());

const TINY: [&str; 9] = [
    "recipes/tiny.toml",
    "--set",
    "train.steps=30",
    "--set",
    "eval.interval=10",
    "--set",
    "checkpoint.interval=10",
    "--set",
    "eval.batches=4",
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `mpirun [mpi_args] -np N toy ARGS` from the repository root (one thread per rank).
fn mpirun(n: usize, mpi_args: &[&str], args: &[String]) -> Output {
    Command::new("mpirun")
        .current_dir(repo())
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .args(["--oversubscribe", "--bind-to", "none"])
        .args(mpi_args)
        .args(["-np", &n.to_string(), env!("CARGO_BIN_EXE_toy")])
        .args(args)
        .output()
        .expect("run mpirun (OpenMPI: scripts/mpi-test.sh installs it)")
}

fn mpirun_ok(n: usize, mpi_args: &[&str], args: &[String]) -> String {
    let out = mpirun(n, mpi_args, args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "mpirun -np {n} {args:?}\n{err}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// One process, from the repository root.
fn one(args: &[String]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_toy"))
        .current_dir(repo())
        .args(["-t", "2"])
        .args(args)
        .output()
        .expect("run toy");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "toy {args:?}\n{err}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Token shards for `recipes/tiny.toml` (vocabulary 627) from a generated corpus, made once:
/// the recipe's default, the Rust book, needs the rust-docs component.
fn tiny_data() -> &'static Path {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("toy-mpi-data-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("data dir");
        let text = dir.join("corpus.txt");
        std::fs::write(&text, corpus().repeat(3)).expect("corpus");
        let out = dir.join("shards");
        let (t, o) = (text.display().to_string(), out.display().to_string());
        one(&[
            "data".into(),
            "prepare".into(),
            t,
            "--out".into(),
            o,
            "--vocab-size".into(),
            "627".into(),
        ]);
        out
    })
}

fn args(cmd: &str, base: &[&str], runs: &Path, extra: &[&str]) -> Vec<String> {
    let mut v = vec![cmd.to_string()];
    v.extend(base.iter().map(|s| s.to_string()));
    if base.first() == Some(&"recipes/tiny.toml") {
        v.extend([
            "--set".into(),
            format!("data.dir={}", tiny_data().display()),
        ]);
    }
    v.extend(["--runs-dir".to_string(), runs.display().to_string()]);
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

fn only_run(runs: &Path) -> PathBuf {
    let dirs: Vec<_> = std::fs::read_dir(runs)
        .expect("runs dir")
        .map(|e| e.expect("entry").path())
        .collect();
    assert_eq!(dirs.len(), 1, "one run folder: {dirs:?}");
    dirs[0].clone()
}

/// The (step, loss bits, grad-norm bits) of every step event, and every validation loss.
fn losses(run: &Path) -> (Vec<(u64, u32, u32)>, Vec<u32>) {
    let text = std::fs::read_to_string(run.join("events.jsonl")).expect("events");
    let (mut steps, mut evals) = (Vec::new(), Vec::new());
    for e in text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("json"))
    {
        let f = |k: &str| (e[k].as_f64().expect(k) as f32).to_bits();
        match e["type"].as_str() {
            Some("step") => {
                steps.push((e["step"].as_u64().expect("step"), f("loss"), f("grad_norm")))
            }
            Some("eval") => evals.push(f("val_loss")),
            _ => {}
        }
    }
    (steps, evals)
}

fn state(run: &Path, step: usize) -> Vec<u8> {
    std::fs::read(run.join(format!("ckpt-{step:06}.state"))).expect("a checkpoint's state")
}

#[test]
fn two_ranks_train_tiny_as_one_process_bit_for_bit_and_resume_in_one() {
    let _one = ONE_JOB.lock().unwrap_or_else(|p| p.into_inner());
    let tmp = TempDir::new("mpi-tiny");
    let (a, b, c) = (tmp.path("one"), tmp.path("two"), tmp.path("stopped"));
    one(&args("train", &TINY, &a, &[]));
    let out = mpirun_ok(2, &[], &args("train", &TINY, &b, &[]));
    assert_eq!(
        out.matches("after 30 steps").count(),
        1,
        "rank 0 alone reports: {out}"
    );
    let (ra, rb) = (only_run(&a), only_run(&b));
    let (la, lb) = (losses(&ra), losses(&rb));
    assert_eq!(la.0.len(), 30);
    assert_eq!(la, lb, "two ranks' losses (bits) differ from one process's");
    assert_eq!(
        state(&ra, 30),
        state(&rb, 30),
        "final weights and optimizer state"
    );
    // the checkpoint scores as the one-process one does
    let score = |run: &Path| {
        let m = run.join("ckpt-000030.gguf").display().to_string();
        one(&[
            "score".into(),
            "-m".into(),
            m,
            "--prompt".into(),
            "fn main".into(),
            "--continuation".into(),
            "() {}".into(),
        ])
    };
    assert_eq!(score(&ra), score(&rb));
    // two ranks stopped at step 20 resume in one process onto the same run
    let out = mpirun_ok(2, &[], &args("train", &TINY, &c, &["--stop-after", "20"]));
    assert!(out.contains("(stopped)"), "{out}");
    let rc = only_run(&c);
    one(&["train".into(), "--resume".into(), rc.display().to_string()]);
    assert_eq!(state(&ra, 30), state(&rc, 30), "resumed in one process");
    let steps: Vec<u64> = losses(&rc).0.iter().map(|s| s.0).collect();
    assert_eq!(steps, (1..=30).collect::<Vec<_>>());
    assert_eq!(losses(&rc).0, la.0);
}

#[test]
fn tcp_gives_the_bits_of_shared_memory_and_four_ranks_resume_on_two() {
    let _one = ONE_JOB.lock().unwrap_or_else(|p| p.into_inner());
    let tmp = TempDir::new("mpi-tcp");
    let (shm, tcp, four) = (tmp.path("shm"), tmp.path("tcp"), tmp.path("four"));
    mpirun_ok(
        2,
        &["--mca", "btl", "vader,self"],
        &args("train", &TINY, &shm, &[]),
    );
    mpirun_ok(
        2,
        &["--mca", "btl", "tcp,self"],
        &args("train", &TINY, &tcp, &[]),
    );
    let (rs, rt) = (only_run(&shm), only_run(&tcp));
    assert_eq!(losses(&rs), losses(&rt));
    assert_eq!(state(&rs, 30), state(&rt, 30));
    // four ranks add four partial gradients: the same run within float rounding; stopped
    // at step 20, the run goes on with two ranks
    mpirun_ok(
        4,
        &[],
        &args("train", &TINY, &four, &["--stop-after", "20"]),
    );
    let r4 = only_run(&four);
    let resume = [
        "train".to_string(),
        "--resume".into(),
        r4.display().to_string(),
    ];
    mpirun_ok(2, &[], &resume);
    let (l2, l4) = (losses(&rs).0, losses(&r4).0);
    assert_eq!(
        l4.iter().map(|s| s.0).collect::<Vec<_>>(),
        (1..=30).collect::<Vec<_>>()
    );
    for (x, y) in l2.iter().zip(&l4) {
        let (x, y) = (f32::from_bits(x.1), f32::from_bits(y.1));
        assert!((x - y).abs() <= 1e-4 * x.abs(), "step loss {x} vs {y}");
    }
}

#[test]
fn a_dead_rank_stops_the_job_and_leaves_the_checkpoint_whole() {
    let _one = ONE_JOB.lock().unwrap_or_else(|p| p.into_inner());
    let tmp = TempDir::new("mpi-dead");
    let (a, b) = (tmp.path("one"), tmp.path("dead"));
    one(&args("train", &TINY, &a, &[]));
    let out = mpirun(2, &[], &args("train", &TINY, &b, &["--die-at", "1:15"]));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the job must fail: {err}");
    assert!(err.contains("rank 1"), "the error names the rank: {err}");
    let rb = only_run(&b);
    assert!(
        !rb.join("ckpt-000020.state").exists(),
        "no step past the death"
    );
    // the last checkpoint (step 10) is whole: the run resumes from it to the same end
    one(&["train".into(), "--resume".into(), rb.display().to_string()]);
    assert_eq!(state(&only_run(&a), 30), state(&rb, 30));
}

#[test]
fn bad_starts_are_refused_with_a_named_reason() {
    let _one = ONE_JOB.lock().unwrap_or_else(|p| p.into_inner());
    let tmp = TempDir::new("mpi-refuse");
    let runs = tmp.path("runs");
    let out = mpirun(3, &[], &args("train", &TINY, &runs, &[]));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("batch of 16") && err.contains("3 ranks"),
        "{err}"
    );
    // two ranks with different recipes (MPMD: one -np per command)
    let exe = env!("CARGO_BIN_EXE_toy");
    let mut a = args("train", &TINY, &runs, &[]);
    a.insert(0, exe.to_string());
    let mut cmd = vec!["-np".to_string(), "1".into()];
    cmd.extend(a.clone());
    cmd.extend([":".into(), "-np".into(), "1".into()]);
    cmd.extend(a);
    cmd.extend(["--set".into(), "optim.lr=1e-3".into()]);
    let out = Command::new("mpirun")
        .current_dir(repo())
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .args(["--oversubscribe"])
        .args(&cmd)
        .output()
        .expect("mpirun");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("differ in their recipes") && err.contains("rank 1"),
        "{err}"
    );
    assert!(
        !runs.exists() || std::fs::read_dir(&runs).map_or(0, |d| d.count()) == 0,
        "no run folder"
    );
}

#[test]
fn two_ranks_fine_tune_lora_on_smollm2_as_one_process() {
    let _one = ONE_JOB.lock().unwrap_or_else(|p| p.into_inner());
    let model = model();
    let tmp = TempDir::new("mpi-lora");
    let (a, b) = (tmp.path("one"), tmp.path("two"));
    let base = format!("base.model={model}");
    let recipe = [
        "recipes/sft-smollm2-lora.toml",
        "--set",
        &base,
        "--set",
        "train.steps=4",
        "--set",
        "train.ctx=128",
        "--set",
        "data.on_long=skip",
        "--set",
        "eval.interval=4",
        "--set",
        "checkpoint.interval=4",
    ];
    one(&args("finetune", &recipe, &a, &[]));
    mpirun_ok(2, &[], &args("finetune", &recipe, &b, &[]));
    let (ra, rb) = (only_run(&a), only_run(&b));
    let (la, lb) = (losses(&ra), losses(&rb));
    assert_eq!(la.0.len(), 4);
    assert_eq!(
        la, lb,
        "two ranks' LoRA losses (bits) differ from one process's"
    );
    assert_eq!(state(&ra, 4), state(&rb, 4));
}

#[test]
fn bf16_with_gradient_accumulation_on_two_ranks_is_one_process() {
    let _one = ONE_JOB.lock().unwrap_or_else(|p| p.into_inner());
    let tmp = TempDir::new("mpi-bf16");
    let (a, b) = (tmp.path("one"), tmp.path("two"));
    let extra = [
        "--set",
        "train.precision=bf16",
        "--set",
        "train.grad_accum=3",
        "--set",
        "train.steps=12",
    ];
    one(&args("train", &TINY, &a, &extra));
    mpirun_ok(2, &[], &args("train", &TINY, &b, &extra));
    let (ra, rb) = (only_run(&a), only_run(&b));
    assert_eq!(losses(&ra).0.len(), 12);
    assert_eq!(losses(&ra), losses(&rb));
    assert_eq!(state(&ra, 12), state(&rb, 12));
}
