//! End-to-end tests of `toy eval kld` and `toy eval choice` on SmolLM2-135M-Instruct Q4_1:
//! a base written then read back, logging to a run, and bad input (a truncated base, a
//! mismatched --ctx or text, a bad JSON line), which must fail with one `error: ...` line.
//! The check that llama-perplexity reads toy's base is scripts/kld-llama-cpp.sh. Also the
//! `--device` flag of the commands that will run on a GPU (train, finetune, bench, eval ppl).

mod common;

use common::*;
use serde_json::Value;

/// The first 3000 bytes of gpl-3.txt (over 600 tokens).
fn short_text(dir: &TempDir) -> String {
    let full = std::fs::read_to_string(golden_dir().join("gpl-3.txt")).expect("gpl-3.txt");
    arg(&dir.write("gpl.txt", &full[..full.floor_char_boundary(3000)]))
}

#[test]
fn eval_kld_of_a_model_against_its_own_base() {
    let dir = TempDir::new("eval_kld_own_base");
    let (text, base, m) = (short_text(&dir), arg(&dir.path("b.bin")), model());
    let args = [
        "eval",
        "kld",
        "-m",
        &m,
        "-f",
        &text,
        "--ctx",
        "128",
        "--save-base",
        &base,
    ];
    let saved = toy_json(&[&args[..], &["--chunks", "2", "--json"]].concat());
    assert_eq!(
        (saved["chunks"].as_u64(), saved["n_vocab"].as_u64()),
        (Some(2), Some(49152))
    );
    // 20 header bytes, 2*128 tokens, 2 chunks of 63 rows of 49156 u16
    let len = std::fs::metadata(&base).expect("base").len();
    assert_eq!(len, 20 + 4 * 256 + 2 * 63 * 49156 * 2);
    let run = dir.path("run");
    std::fs::create_dir(&run).expect("run dir");
    let v = toy_json(&[
        "eval",
        "kld",
        "-m",
        &m,
        "--base",
        &base,
        "-f",
        &text,
        "--json",
        "--run",
        &arg(&run),
    ]);
    assert_eq!(
        (v["tokens"].as_u64(), v["chunks"].as_u64()),
        (Some(126), Some(2))
    );
    let kld = v["kld_mean"]["value"].as_f64().expect("kld");
    assert!(kld.abs() < 1e-5, "kld {kld}");
    assert_eq!(v["same_top_p"]["value"].as_f64(), Some(1.0));
    let ppl = saved["ppl"].as_f64().unwrap();
    let ppl_q = v["ppl_q"]["value"].as_f64().unwrap();
    assert!((ppl_q - ppl).abs() < 1e-6 * ppl, "{ppl_q} vs {ppl}");
    let events = std::fs::read_to_string(run.join("events.jsonl")).expect("events");
    let e: Value = serde_json::from_str(events.lines().last().unwrap()).unwrap();
    assert_eq!(
        (e["type"].as_str(), e["metrics"]["name"].as_str()),
        (Some("eval"), Some("kld"))
    );
    assert_eq!(e["metrics"]["results"]["kld_mean"], v["kld_mean"]);
    // the text form prints llama-perplexity's sections
    let out = toy_ok(&["eval", "kld", "-m", &m, "--base", &base]);
    for line in [
        "====== KL divergence statistics ======",
        "Mean    KLD:",
        "99.9%   KLD:",
        "RMS Δp    :",
        "Same top p: 100.000",
    ] {
        assert!(out.contains(line), "no {line:?} in\n{out}");
    }
}

#[test]
fn eval_kld_refuses_a_bad_base() {
    let dir = TempDir::new("eval_kld_bad_base");
    let (text, base, m) = (short_text(&dir), arg(&dir.path("b.bin")), model());
    toy_ok(&[
        "eval",
        "kld",
        "-m",
        &m,
        "-f",
        &text,
        "--ctx",
        "64",
        "--chunks",
        "1",
        "--save-base",
        &base,
    ]);
    let bytes = std::fs::read(&base).unwrap();
    let cut = dir.write("cut.bin", &bytes[..bytes.len() - 100]);
    let e = toy_err(&["eval", "kld", "-m", &m, "--base", &arg(&cut)]);
    assert!(e.contains("cut.bin") && e.contains("truncated"), "{e}");
    let e = toy_err(&["eval", "kld", "-m", &m, "--base", &base, "--ctx", "128"]);
    assert!(
        e.contains("--ctx 128 does not match") && e.contains("chunks of 64"),
        "{e}"
    );
    let other = arg(&dir.write(
        "other.txt",
        "Something else entirely, and long enough. ".repeat(40),
    ));
    let e = toy_err(&["eval", "kld", "-m", &m, "--base", &base, "-f", &other]);
    assert!(e.contains("is not the text of"), "{e}");
    let e = toy_err(&["eval", "kld", "-m", &m, "--base", &text]);
    assert!(e.contains("expected \"_logits_\""), "{e}");
    let e = toy_err(&["eval", "kld", "-m", &m, "-f", &text]);
    assert!(e.contains("--base"), "{e}");
}

#[test]
fn eval_choice_on_the_easy_set_and_bad_lines() {
    let dir = TempDir::new("eval_choice");
    let set = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../data/choice/easy-40.jsonl"
    );
    let m = model();
    let run = dir.path("run");
    std::fs::create_dir(&run).expect("run dir");
    let v = toy_json(&[
        "eval",
        "choice",
        "-m",
        &m,
        "-f",
        set,
        "--json",
        "--run",
        &arg(&run),
    ]);
    assert_eq!(v["items"].as_u64(), Some(40));
    assert_eq!(v["per_item"].as_array().map(Vec::len), Some(40));
    assert!(v["accuracy"].as_f64().unwrap() > 0.5, "{v}");
    let events = std::fs::read_to_string(run.join("events.jsonl")).expect("events");
    assert!(events.contains("\"name\":\"choice\""), "{events}");
    let bad = dir.write(
        "bad.jsonl",
        "{\"context\": \"a\", \"endings\": [\"b\", \"c\"], \"label\": 0}\n{\"context\": 1}\n",
    );
    let e = toy_err(&["eval", "choice", "-m", &m, "-f", &arg(&bad)]);
    assert!(e.contains("bad.jsonl") && e.contains("line 2"), "{e}");
    let e = toy_err(&[
        "eval",
        "choice",
        "-m",
        &m,
        "-f",
        set,
        "--run",
        &arg(&dir.path("nope")),
    ]);
    assert!(e.contains("not found"), "{e}");
}

#[test]
fn lmc_and_drift_of_a_model_against_itself_log_flat_curves_to_a_run() {
    let dir = TempDir::new("eval_lmc_drift");
    let (text, m) = (short_text(&dir), model());
    let run = dir.path("run");
    std::fs::create_dir(&run).expect("run dir");
    let (png, run_arg) = (arg(&dir.path("lmc.png")), arg(&run));
    let lmc = toy_json(&[
        "eval", "lmc", &m, &m, "-f", &text, "--ctx", "128", "--alphas", "0,0.5,1", "--plot", &png,
        "--json", "--run", &run_arg,
    ]);
    let pts = lmc["points"].as_array().unwrap();
    assert_eq!(pts.len(), 3);
    assert!(pts
        .iter()
        .all(|p| (p["loss"].as_f64().unwrap() - pts[0]["loss"].as_f64().unwrap()).abs() < 1e-9));
    assert!(lmc["barrier"].as_f64().unwrap().abs() < 1e-9);
    assert!(
        std::fs::metadata(dir.path("lmc.png")).unwrap().len() > 1000,
        "a PNG"
    );
    let drift = toy_json(&[
        "eval", "drift", &m, &m, "-f", &text, "--ctx", "128", "--json", "--run", &run_arg,
    ]);
    assert_eq!(
        (drift["mean_kl"].as_f64(), drift["top1_agree"].as_f64()),
        (Some(0.0), Some(1.0))
    );
    let events = std::fs::read_to_string(run.join("events.jsonl")).expect("events");
    let names: Vec<String> = events
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["metrics"]["name"]
                .as_str()
                .unwrap_or("")
                .to_string()
        })
        .collect();
    assert_eq!(names, ["lmc", "drift"]);
    let err = toy_err(&["eval", "lmc", &m, &arg(&dir.path("none.gguf")), "-f", &text]);
    assert!(err.contains("none.gguf"), "{err}");
}

#[test]
fn device_flags_take_the_cpu_refuse_cuda_in_one_line_and_name_bad_devices() {
    // where there is no GPU (or the GPU path is not there yet) cuda is one clear error line
    let refuses = |args: &[&str], n: usize| {
        let e = toy_err(args);
        assert!(
            e.starts_with(&format!("error: asked for cuda:{n}, but "))
                || e.contains("is not built yet"),
            "{e}"
        );
    };
    refuses(
        &[
            "train",
            "recipes/tiny.toml",
            "--device",
            "cuda",
            "--runs-dir",
            "/nonexistent",
        ],
        0,
    );
    let e = toy_err(&[
        "bench", "--device", "metal", "-p", "8", "-n", "0", "-r", "1",
    ]);
    assert_eq!(
        e,
        "error: unknown device 'metal': expected cpu, cuda, cuda:N or auto"
    );
    refuses(
        &[
            "finetune",
            "recipes/sft-smollm2-lora.toml",
            "--device",
            "cuda:7",
        ],
        7,
    );
    // auto runs on the CPU and says so; an explicit cpu says nothing
    let text = TempDir::new("device-ppl");
    let f = text.write(
        "t.txt",
        "The quick brown fox jumps over the lazy dog. ".repeat(8),
    );
    for (device, note) in [("auto", true), ("cpu", false)] {
        let out = toy(&[
            "eval",
            "ppl",
            "-m",
            &model(),
            "-f",
            &arg(&f),
            "--ctx",
            "16",
            "--device",
            device,
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{device}: {stderr}");
        assert_eq!(
            stderr.contains("device: cpu (auto: "),
            note,
            "{device}: {stderr}"
        );
    }
}
