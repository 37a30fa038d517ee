//! End-to-end tests of training with the `toy` binary: `toy data prepare`, `toy train` (and
//! `--resume`), `toy runs`, `toy plot`, and `toy generate` on the checkpoint, on a small
//! generated corpus and a model of a few thousand parameters.

mod common;

use common::*;
use std::path::{Path, PathBuf};

fn recipe(data: &Path) -> String {
    format!(
        r#"name = "clitest"
[model]
arch = "llama"
vocab = 300
d_model = 32
n_head = 4
d_ff = 64
n_layer = 2
ctx = 16
[data]
dir = "{}"
[train]
batch = 4
steps = 10
seed = 1
[optim]
lr = 3e-3
min_lr = 3e-4
warmup = 2
[eval]
interval = 5
batches = 2
sample_tokens = 8
[checkpoint]
interval = 5
"#,
        data.display()
    )
}

/// Data prepared in `tmp` and the recipe that trains on it, as a file.
fn prepared_recipe(tmp: &TempDir) -> PathBuf {
    let data = prepare(tmp);
    tmp.write("r.toml", recipe(Path::new(&data)))
}

fn prepare(tmp: &TempDir) -> String {
    let text = tmp.write("corpus.txt", corpus());
    let data = tmp.path("data");
    let out = toy_ok(&[
        "data",
        "prepare",
        &arg(&text),
        "--out",
        &arg(&data),
        "--vocab-size",
        "300",
    ]);
    assert!(
        out.contains("vocabulary 300") && out.contains("u16"),
        "{out}"
    );
    for f in ["train.bin", "val.bin", "meta.json", "tokenizer.gguf"] {
        assert!(data.join(f).is_file(), "{f} missing");
    }
    arg(&data)
}

fn only_run(runs: &Path) -> std::path::PathBuf {
    let dirs: Vec<_> = std::fs::read_dir(runs)
        .expect("runs dir")
        .map(|e| e.expect("entry").path())
        .collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    dirs[0].clone()
}

#[test]
fn prepare_train_runs_plot_generate() {
    let tmp = TempDir::new("train-e2e");
    let recipe_path = prepared_recipe(&tmp);
    let runs = tmp.path("runs");
    let out = toy_ok(&[
        "train",
        &arg(&recipe_path),
        "--runs-dir",
        &arg(&runs),
        "--set",
        "train.steps=10",
        "--checkpoint-start",
    ]);
    assert!(out.contains("after 10 steps"), "{out}");
    let run = only_run(&runs);
    for f in [
        "ckpt-000000.gguf",
        "ckpt-000000.state",
        "config.toml",
        "events.jsonl",
        "ckpt-000005.gguf",
        "ckpt-000005.state",
        "ckpt-000010.gguf",
        "ckpt-000010.state",
    ] {
        assert!(run.join(f).is_file(), "{f} missing in {}", run.display());
    }
    let events = std::fs::read_to_string(run.join("events.jsonl")).expect("events");
    let types: Vec<String> = events
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("each line is JSON");
            v["type"].as_str().expect("type").to_string()
        })
        .collect();
    assert_eq!(types.first().map(String::as_str), Some("run_start"));
    assert_eq!(types.last().map(String::as_str), Some("run_end"));
    assert_eq!(types.iter().filter(|t| *t == "step").count(), 10);
    assert_eq!(types.iter().filter(|t| *t == "eval").count(), 2);
    assert_eq!(types.iter().filter(|t| *t == "checkpoint").count(), 3);
    let step: serde_json::Value = serde_json::from_str(
        events
            .lines()
            .find(|l| l.contains("\"step\","))
            .expect("a step"),
    )
    .expect("json");
    for k in ["step", "loss", "lr", "grad_norm", "tok_s", "time"] {
        assert!(step.get(k).is_some(), "step event lacks {k}: {step}");
    }

    let list = toy_ok(&["runs", "--runs-dir", &arg(&runs)]);
    let id = run.file_name().expect("id").to_string_lossy().into_owned();
    let line = list
        .lines()
        .find(|l| l.starts_with(&id))
        .unwrap_or_else(|| panic!("{list}"));
    assert!(
        line.contains("llama") && line.contains("10/10") && line.contains("done"),
        "{line}"
    );

    let png = tmp.path("loss.png");
    toy_ok(&["plot", &arg(&run), "--out", &arg(&png)]);
    let bytes = std::fs::read(&png).expect("png written");
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    assert!(
        bytes.len() > 2_000,
        "a {} byte PNG is too small for a chart",
        bytes.len()
    );
    let (w, h) = (
        u32::from_be_bytes(bytes[16..20].try_into().expect("4")),
        u32::from_be_bytes(bytes[20..24].try_into().expect("4")),
    );
    assert_eq!((w, h), (900, 560));

    let ckpt = run.join("ckpt-000010.gguf");
    let text = toy_ok(&[
        "generate",
        "-m",
        &arg(&ckpt),
        "-p",
        "fn main",
        "-n",
        "8",
        "-c",
        "16",
    ]);
    assert!(
        text.starts_with("fn main") && text.len() > "fn main".len(),
        "{text}"
    );
}

#[test]
fn interrupted_cli_run_resumes_to_the_same_weights() {
    let tmp = TempDir::new("train-resume");
    let recipe_path = prepared_recipe(&tmp);
    let (a, b) = (tmp.path("a"), tmp.path("b"));
    toy_ok(&["train", &arg(&recipe_path), "--runs-dir", &arg(&a)]);
    let out = toy_ok(&[
        "train",
        &arg(&recipe_path),
        "--runs-dir",
        &arg(&b),
        "--stop-after",
        "7",
    ]);
    assert!(out.contains("(stopped)"), "{out}");
    let run_b = only_run(&b);
    toy_ok(&["train", "--resume", &arg(&run_b)]);
    let state = |run: &Path| std::fs::read(run.join("ckpt-000010.state")).expect("state");
    assert!(
        state(&only_run(&a)) == state(&run_b),
        "resumed state differs from uninterrupted"
    );
}

#[test]
fn training_mistakes_are_one_line_errors() {
    let tmp = TempDir::new("train-errors");
    let recipe_path = prepared_recipe(&tmp);
    let runs = arg(&tmp.path("runs"));
    let e = toy_err(&[
        "train",
        &arg(&recipe_path),
        "--runs-dir",
        &runs,
        "--set",
        "optim.lrr=1",
    ]);
    assert!(e.contains("unknown field `lrr`"), "{e}");
    let e = toy_err(&[
        "train",
        &arg(&recipe_path),
        "--runs-dir",
        &runs,
        "--set",
        "model.vocab=512",
    ]);
    assert!(e.contains("vocabulary of 300") && e.contains("512"), "{e}");
    let e = toy_err(&["train", "--resume", &arg(&tmp.path("nope"))]);
    assert!(e.contains("not a run folder"), "{e}");
    let e = toy_err(&["data", "prepare", "--out", &arg(&tmp.path("x"))]);
    assert!(e.contains("--vocab-size"), "{e}");
    let e = toy_err(&[
        "data",
        "prepare",
        &arg(&tmp.path("missing.txt")),
        "--out",
        &arg(&tmp.path("x")),
        "--vocab-size",
        "300",
    ]);
    assert!(e.contains("missing.txt"), "{e}");
    let e = toy_err(&["plot", &arg(&tmp.path("nope"))]);
    assert!(e.contains("not a run folder"), "{e}");
}

#[test]
fn default_corpus_is_the_rust_book_or_a_clear_error() {
    let tmp = TempDir::new("rust-book");
    let out = toy(&[
        "data",
        "prepare",
        "--out",
        &arg(&tmp.path("book")),
        "--vocab-size",
        "300",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.success() {
        // The book has ~100 chapters and appendices and well over 100k tokens.
        let docs: usize = stdout
            .split(": ")
            .nth(1)
            .and_then(|s| s.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        assert!(docs >= 50, "{stdout}");
        let spec = std::fs::read(tmp.path("book/train.bin")).expect("train.bin");
        assert!(spec.len() > 200_000, "{} bytes of tokens", spec.len());
    } else {
        assert!(
            stderr.contains("rust-docs"),
            "absent docs must say how to get them: {stderr}"
        );
    }
}

#[test]
fn killed_mid_run_leaves_a_loadable_checkpoint_and_resumes_to_the_same_weights() {
    let tmp = TempDir::new("train-kill");
    // A checkpoint every step, so most of the run is spent writing checkpoints and the kill
    // most likely lands in the middle of one.
    let recipe_path = prepared_recipe(&tmp);
    let every_step = [
        "--set",
        "checkpoint.interval=1",
        "--set",
        "train.steps=60",
        "--set",
        "eval.interval=60",
    ];
    let (a, b) = (tmp.path("a"), tmp.path("b"));
    let mut args = vec![
        "train".to_string(),
        arg(&recipe_path),
        "--runs-dir".into(),
        arg(&a),
    ];
    args.extend(every_step.iter().map(|s| s.to_string()));
    toy_ok(&args);

    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_toy"))
        .args([
            "-t",
            "2",
            "train",
            &arg(&recipe_path),
            "--runs-dir",
            &arg(&b),
        ])
        .args(every_step)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start toy train");
    // Kill it once a few checkpoints exist (SIGKILL: no chance to clean up).
    let t0 = std::time::Instant::now();
    loop {
        let n = std::fs::read_dir(&b)
            .ok()
            .and_then(|mut d| d.next())
            .and_then(|e| e.ok())
            .map(|run| {
                std::fs::read_dir(run.path())
                    .map(|d| {
                        d.filter(|e| {
                            e.as_ref()
                                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "state"))
                        })
                        .count()
                    })
                    .unwrap_or(0)
            })
            .unwrap_or(0);
        if n >= 3 || child.try_wait().expect("poll").is_some() {
            break;
        }
        assert!(t0.elapsed().as_secs() < 300, "no checkpoints after 300 s");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let _ = child.kill();
    child.wait().expect("reap");
    let run_b = only_run(&b);
    // Whatever was torn, the newest complete checkpoint loads as a model...
    let out = toy_ok(&["runs", "--runs-dir", &arg(&b)]);
    assert!(out.contains("clitest"), "{out}");
    let mut states: Vec<_> = std::fs::read_dir(&run_b)
        .expect("run")
        .map(|e| e.expect("e").path())
        .filter(|p| p.extension().is_some_and(|x| x == "state"))
        .collect();
    states.sort();
    let newest = states.last().expect("a state file").with_extension("gguf");
    toy_ok(&[
        "generate",
        "-m",
        &arg(&newest),
        "-p",
        "fn",
        "-n",
        "2",
        "-c",
        "16",
    ]);
    // ...and the run resumes to the uninterrupted run's final state.
    toy_ok(&["train", "--resume", &arg(&run_b)]);
    let state = |run: &Path| std::fs::read(run.join("ckpt-000060.state")).expect("state");
    assert!(
        state(&only_run(&a)) == state(&run_b),
        "resumed state differs from uninterrupted"
    );
}

/// A 24-bit BMP of `w` x `h` grey pixels `v` (rows bottom-up, padded to 4 bytes).
fn bmp(w: u32, h: u32, v: u8) -> Vec<u8> {
    let row = (3 * w).div_ceil(4) * 4;
    let size = 54 + row * h;
    let mut b = b"BM".to_vec();
    for x in [size, 0, 54, 40, w, h] {
        b.extend_from_slice(&x.to_le_bytes());
    }
    b.extend_from_slice(&1u16.to_le_bytes());
    b.extend_from_slice(&24u16.to_le_bytes());
    for x in [0u32, row * h, 2835, 2835, 0, 0] {
        b.extend_from_slice(&x.to_le_bytes());
    }
    for _ in 0..h {
        let mut r = vec![v; (3 * w) as usize];
        r.resize(row as usize, 0);
        b.extend_from_slice(&r);
    }
    b
}

#[test]
fn a_vit_recipe_trains_then_eval_images_and_classify_use_its_checkpoint() {
    let dir = TempDir::new("vit");
    let idx = idx_bytes;
    // two classes: dark and bright 8x8 images
    let (mut px, mut lb) = (Vec::new(), Vec::new());
    for i in 0..200u32 {
        let c = (i % 2) as u8;
        px.extend((0..64).map(|j| 30 + 150 * c + ((i + j) % 40) as u8));
        lb.push(c);
    }
    let src = dir.path("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("train-images-idx3-ubyte"), idx(&[200, 8, 8], &px)).unwrap();
    std::fs::write(src.join("train-labels-idx1-ubyte"), idx(&[200], &lb)).unwrap();
    std::fs::write(
        src.join("t10k-images-idx3-ubyte"),
        idx(&[40, 8, 8], &px[..40 * 64]),
    )
    .unwrap();
    std::fs::write(src.join("t10k-labels-idx1-ubyte"), idx(&[40], &lb[..40])).unwrap();
    let shards = dir.path("shards");
    toy_ok(&["data", "images", &arg(&src), "--out", &arg(&shards)]);
    let recipe = dir.write(
        "vit.toml",
        format!(
            "name = \"tiny-vit\"\n[vit]\nimage = 8\npatch = 4\nchannels = 1\nclasses = 2\nwidth = 16\ndepth = 1\nheads = 2\nmlp = 32\n\
             [data]\ndir = \"{}\"\nmean = [0.4]\nstd = [0.3]\n\
             [train]\nbatch = 20\nsteps = 40\nlr = 3e-3\nwarmup = 4\nweight_decay = 0.0\neval_every = 20\n",
            shards.display()
        ),
    );
    let runs = dir.path("runs");
    let out = toy_ok(&["train", &arg(&recipe), "--runs-dir", &arg(&runs)]);
    let ckpt = out
        .lines()
        .find_map(|l| l.strip_prefix("checkpoint: "))
        .unwrap_or_else(|| panic!("no checkpoint line in {out}"))
        .to_string();
    // interrupted after 30 steps (checkpoints every 20 with --set), resumed: the same weights
    let runs2 = dir.path("runs2");
    let out = toy_ok(&[
        "train",
        &arg(&recipe),
        "--runs-dir",
        &arg(&runs2),
        "--set",
        "train.checkpoint_every=20",
        "--stop-after",
        "30",
    ]);
    assert!(
        out.contains("after 30 steps") && out.contains("(stopped)"),
        "{out}"
    );
    let run2 = out.split(" after ").next().unwrap().to_string();
    let out = toy_ok(&["train", "--resume", &run2]);
    assert!(out.contains("after 40 steps"), "{out}");
    let resumed = std::path::Path::new(&run2).join("model.gguf");
    assert!(
        std::fs::read(&resumed).unwrap() == std::fs::read(&ckpt).unwrap(),
        "the resumed run's model.gguf differs from the straight run's"
    );
    // `toy runs` lists image runs with their accuracy
    let listing = toy_ok(&["runs", "--runs-dir", &arg(&runs2)]);
    let line = listing
        .lines()
        .find(|l| l.contains("tiny-vit"))
        .unwrap_or("");
    assert!(
        line.contains(" vit ")
            && line.contains("40/40")
            && line.contains('%')
            && line.contains("done"),
        "{listing}"
    );
    let r = toy_json(&[
        "eval",
        "images",
        "-m",
        &ckpt,
        "--data",
        &arg(&shards),
        "--json",
    ]);
    assert_eq!(r["images"], 40);
    assert!(r["top1"].as_f64().unwrap() > 0.9, "{r}");
    assert_eq!(r["top5"], 1.0, "two classes: always in the top 5");
    assert_eq!(r["confusion"].as_array().unwrap().len(), 2);
    let img = dir.write("bright.bmp", bmp(8, 8, 200));
    let c = toy_json(&["classify", "-m", &ckpt, &arg(&img), "--top", "2", "--json"]);
    let top = c[0]["top"].as_array().unwrap();
    assert_eq!(top[0]["class"], "1", "a bright image is class 1: {c}");
    let p: f64 = top.iter().map(|t| t["probability"].as_f64().unwrap()).sum();
    assert!((p - 1.0).abs() < 1e-4, "{c}");
    let bad = dir.write("broken.png", b"\x89PNG\r\n\x1a\nnope");
    let err = toy_err(&["classify", "-m", &ckpt, &arg(&bad)]);
    assert!(
        err.contains("broken.png") && err.contains("cannot read the image"),
        "{err}"
    );
    let err = toy_err(&[
        "eval",
        "images",
        "-m",
        &arg(&recipe),
        "--data",
        &arg(&shards),
    ]);
    assert!(err.contains("vit.toml"), "{err}");
}

#[test]
fn data_images_writes_shards_from_idx_files_and_names_missing_data() {
    let dir = TempDir::new("images");
    let idx = idx_bytes;
    let src = dir.path("fashion-src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(
        src.join("train-images-idx3-ubyte"),
        idx(&[20, 3, 3], &[7; 180]),
    )
    .unwrap();
    std::fs::write(src.join("train-labels-idx1-ubyte"), idx(&[20], &[1; 20])).unwrap();
    std::fs::write(
        src.join("t10k-images-idx3-ubyte"),
        idx(&[5, 3, 3], &[9; 45]),
    )
    .unwrap();
    std::fs::write(src.join("t10k-labels-idx1-ubyte"), idx(&[5], &[0; 5])).unwrap();
    let out = dir.path("shards");
    let v = toy_json(&[
        "data",
        "images",
        &arg(&src),
        "--out",
        &arg(&out),
        "--val-fraction",
        "0.25",
        "--json",
    ]);
    assert_eq!(v["splits"]["train"]["images"], 15);
    assert_eq!(v["splits"]["val"]["images"], 5);
    assert_eq!(v["splits"]["test"]["images"], 5);
    assert_eq!(v["classes"][1], "Trouser", "Fashion-MNIST's names: {v}");
    assert!(out.join("train.img").exists() && out.join("meta.json").exists());
    std::fs::write(src.join("t10k-labels-idx1-ubyte"), idx(&[9], &[0; 3])).unwrap();
    let err = toy_err(&["data", "images", &arg(&src), "--out", &arg(&out)]);
    assert!(
        err.contains("t10k-labels-idx1-ubyte") && err.contains("truncated"),
        "{err}"
    );
    let err = toy_err(&["data", "images", "/no/such/dir", "--out", &arg(&out)]);
    assert!(err.contains("/no/such/dir"), "{err}");
}

/// `toy bench --train` trains the recipe a few steps and splits the step's time by kind of
/// work, in f32 and in bf16.
#[test]
fn bench_train_splits_the_step_time() {
    let tmp = TempDir::new("bench-train");
    let recipe = prepared_recipe(&tmp);
    for precision in ["f32", "bf16"] {
        let set = format!("train.precision=\"{precision}\"");
        let r = toy_json(&[
            "bench",
            "--train",
            &arg(&recipe),
            "--steps",
            "6",
            "--set",
            &set,
            "--json",
        ]);
        assert_eq!(r["steps_measured"], 4, "{r}");
        assert!(
            r["step_s"].as_f64().unwrap() > 0.0 && r["rate"].as_f64().unwrap() > 0.0,
            "{r}"
        );
        let split = r["split"].as_object().unwrap();
        for kind in ["products", "attention", "norms", "optimizer", "other"] {
            assert!(split[kind].as_f64().unwrap() >= 0.0, "{kind}: {r}");
        }
        // a share, not a speed: beside other processes any part can take most of a short
        // step (products 0.046 of a 0.3 ms step once), but the products' timer must count
        assert!(
            split["products"].as_f64().unwrap() > 0.0,
            "products took no time: {r}"
        );
        let sum: f64 = split.values().map(|v| v.as_f64().unwrap()).sum();
        assert!((sum - 1.0).abs() < 0.2, "shares sum to {sum}: {r}");
    }
}
