//! End-to-end tests of the `toy` binary on SmolLM2-135M-Instruct Q4_1, against llama.cpp's
//! reference outputs (`shared/golden/smollm2-135m-q4_1.llama.cpp.json`) where there are
//! some, and on bad input, which must fail with one `error: ...` line and never a panic.

mod common;

use common::*;
use serde_json::{json, Value};

/// toy's log-probabilities differ from llama.cpp's by up to ~0.15 nats on single steps
/// (different summation orders, amplified by llama.cpp's activation rounding), so greedy
/// choices are compared only until the first golden step whose top-1/top-2 gap is below this.
const NEAR_TIE: f64 = 0.3;

fn completions() -> Vec<Value> {
    golden()["completions"]
        .as_array()
        .expect("golden completions")
        .clone()
}

/// How many leading greedy tokens of a golden completion must be reproduced exactly: up to
/// the golden `first_step_with_gap_below_0.05` and the first step with a gap below NEAR_TIE.
fn reproducible_prefix(c: &Value) -> usize {
    let steps = c["steps"].as_array().expect("steps");
    let golden_limit = c["first_step_with_gap_below_0.05"]
        .as_u64()
        .map_or(steps.len(), |n| n as usize);
    let near_tie = steps
        .iter()
        .position(|s| s["top1_top2_logprob_gap"].as_f64().expect("gap") < NEAR_TIE)
        .unwrap_or(steps.len());
    golden_limit.min(near_tie)
}

/// `toy generate -m MODEL EXTRA... --json` on the default model.
fn generate(extra: &[&str]) -> Value {
    generate_with(&model(), extra)
}

fn generate_with(m: &str, extra: &[&str]) -> Value {
    let mut args = vec!["generate", "-m", m];
    args.extend_from_slice(extra);
    args.push("--json");
    toy_json(&args)
}

#[test]
fn tokenize_matches_llama_cpp_on_golden_prompts() {
    let m = model();
    for c in completions() {
        let prompt = c["prompt"].as_str().expect("prompt");
        let v = toy_json(&["tokenize", "-m", &m, "--json", prompt]);
        assert_eq!(v["ids"], c["prompt_tokens"], "ids of {prompt:?}");
        assert_eq!(v["pieces"], c["prompt_pieces"], "pieces of {prompt:?}");
    }
}

#[test]
fn score_matches_llama_cpp_logprobs() {
    let c = &completions()[0];
    let gen = &ids(&c["generated_token_ids"])[..8];
    let steps = c["steps"].as_array().expect("steps");
    let v = toy_json(&[
        "score",
        "-m",
        &model(),
        "--prompt-ids",
        &id_list(&ids(&c["prompt_tokens"])),
        "--continuation-ids",
        &id_list(gen),
        "--top",
        "5",
        "--json",
    ]);
    let tokens = v["tokens"].as_array().expect("{\"tokens\": [...]}");
    assert_eq!(tokens.len(), gen.len());
    let (mut diff_sum, mut top1_agree) = (0.0, 0);
    for (j, (t, step)) in tokens.iter().zip(steps).enumerate() {
        assert_eq!(t["id"].as_u64(), Some(gen[j] as u64), "step {j} id");
        let lp = t["logprob"].as_f64().expect("logprob is a number");
        let top = t["top"].as_array().expect("top");
        assert_eq!(top.len(), 5, "step {j}: top 5");
        let top_lp: Vec<f64> = top
            .iter()
            .map(|e| {
                assert!(e["id"].as_u64().is_some(), "top entry {e} has an id");
                e["logprob"].as_f64().expect("top logprob")
            })
            .collect();
        assert!(
            top_lp.windows(2).all(|w| w[0] >= w[1]),
            "step {j}: top not sorted {top_lp:?}"
        );
        assert!(lp <= top_lp[0] + 1e-9 && top_lp[0] <= 0.0, "step {j}: {lp}");
        let want = step["logprob"].as_f64().expect("golden logprob");
        // Per-step budget from the deviations seen on this model (max ~0.13 at -t 2); the
        // mean below is the tighter check.
        assert!(
            (lp - want).abs() < 0.2,
            "step {j}: logprob {lp:.4}, llama.cpp {want:.4}"
        );
        diff_sum += (lp - want).abs();
        top1_agree += (top[0]["id"] == step["top5"][0]["id"]) as usize;
    }
    let mean = diff_sum / gen.len() as f64;
    assert!(mean < 0.08, "mean |logprob diff| {mean:.4}");
    assert!(top1_agree >= 6, "top-1 agrees on only {top1_agree}/8 steps");
}

#[test]
fn generate_greedy_is_coherent_and_follows_llama_cpp() {
    let cs = completions();
    let v = generate(&["-p", "Once upon a time", "-n", "32", "--temp", "0"]);
    let out = ids(&v["ids"]);
    assert!(
        out.len() == 32 || v["finish_reason"] == "stop",
        "{} tokens, finish {}",
        out.len(),
        v["finish_reason"]
    );
    assert_eq!(v["completion_tokens"].as_u64(), Some(out.len() as u64));
    assert_eq!(v["prompt_ids"], cs[0]["prompt_tokens"]);
    let text = v["text"].as_str().expect("text");
    let plain = text
        .chars()
        .filter(|c| c.is_ascii_alphabetic() || *c == ' ')
        .count();
    assert!(
        plain as f64 >= 0.85 * text.chars().count() as f64 && text.len() > 60,
        "not plain English: {text:?}"
    );
    let common_words = [" the ", " a ", " was ", " of ", " and ", " to "];
    let hits = common_words.iter().filter(|w| text.contains(*w)).count();
    assert!(hits >= 3, "only {hits} common words in {text:?}");

    // Each golden prompt: the greedy tokens equal llama.cpp's until the first near-tie.
    let mut compared = 0;
    for (i, c) in cs.iter().enumerate() {
        let want = ids(&c["generated_token_ids"]);
        let n = reproducible_prefix(c);
        let got = if i == 0 {
            out.clone()
        } else {
            let p = c["prompt"].as_str().expect("prompt");
            ids(&generate(&["-p", p, "-n", &n.max(1).to_string(), "--temp", "0"])["ids"])
        };
        assert!(got.len() >= n, "prompt {i}: only {} tokens", got.len());
        assert_eq!(got[..n], want[..n], "prompt {i}: first {n} greedy tokens");
        compared += n;
    }
    assert!(
        compared >= 8,
        "only {compared} golden tokens were comparable"
    );
}

/// Without `--seed` each run draws its own (issue 10: every `toy chat` gave the same reply
/// to the same question) and says which; passing that seed back repeats the run.
#[test]
fn generate_without_a_seed_draws_one_and_reports_it() {
    let args = ["-p", "Once upon a time", "-n", "16", "--temp", "1.0"];
    let runs: Vec<serde_json::Value> = (0..3).map(|_| generate(&args)).collect();
    let seeds: Vec<u64> = runs
        .iter()
        .map(|v| v["seed"].as_u64().expect("--json has the seed"))
        .collect();
    assert!(
        seeds[0] != seeds[1] && seeds[1] != seeds[2] && seeds[0] != seeds[2],
        "three runs drew seeds {seeds:?}"
    );
    assert!(
        runs.iter().any(|v| ids(&v["ids"]) != ids(&runs[0]["ids"])),
        "three unseeded runs gave the same tokens"
    );
    let seed = seeds[0].to_string();
    let mut again = args.to_vec();
    again.extend(["--seed", &seed]);
    let repeat = generate(&again);
    assert_eq!(
        ids(&repeat["ids"]),
        ids(&runs[0]["ids"]),
        "--seed {seed} repeats the run"
    );
    assert_eq!(repeat["seed"].as_u64(), Some(seeds[0]));
}

#[test]
fn generate_sampling_is_reproducible_per_seed() {
    let run = |seed: &str| {
        let v = generate(&[
            "-p",
            "Once upon a time",
            "-n",
            "16",
            "--temp",
            "0.8",
            "--seed",
            seed,
        ]);
        (
            ids(&v["ids"]),
            v["text"].as_str().expect("text").to_string(),
        )
    };
    let a = run("7");
    assert_eq!(a, run("7"), "same seed, different output");
    let others = [run("8"), run("9")];
    assert!(
        others.iter().any(|o| o.0 != a.0),
        "three seeds gave the same tokens: {:?}",
        a.1
    );
}

#[test]
fn generate_stops_before_stop_string() {
    let greedy = generate(&["-p", "Once upon a time", "-n", "24", "--temp", "0"]);
    let text = greedy["text"].as_str().expect("text");
    // The first word of five or more letters past the opening, with its leading space.
    let word = text[10..]
        .split(' ')
        .find(|w| w.len() >= 5 && w.chars().all(|c| c.is_ascii_alphabetic()))
        .unwrap_or_else(|| panic!("no stop word in {text:?}"));
    let stop = format!(" {word}");
    let at = text.find(&stop).expect("stop word occurs");
    let v = generate(&[
        "-p",
        "Once upon a time",
        "-n",
        "24",
        "--temp",
        "0",
        "--stop",
        &stop,
    ]);
    let got = v["text"].as_str().expect("text");
    assert_eq!(v["finish_reason"], "stop", "{v}");
    assert!(!got.contains(&stop), "{got:?} contains {stop:?}");
    assert_eq!(got, &text[..at], "text before the stop string");
    assert!(ids(&v["ids"]).len() < 24);
}

#[test]
fn template_renders_golden_chat() {
    let chat = &golden()["chat"][0];
    let dir = TempDir::new("template_renders_golden_chat");
    let want = chat["rendered_prompt"].as_str().expect("rendered_prompt");
    let list = dir.write("list.json", chat["messages"].to_string());
    let wrapped = dir.write(
        "wrapped.json",
        json!({ "messages": chat["messages"] }).to_string(),
    );
    for f in [list, wrapped] {
        let got = toy_ok(&["template", "-m", &model(), "--messages", &arg(&f)]);
        assert_eq!(got, want, "{}", f.display());
    }
}

#[test]
fn inspect_shows_smollm2_structure() {
    let m = model();
    let v = toy_json(&["inspect", &m, "--json"]);
    assert_eq!(v["parameters"].as_u64(), Some(134_515_008));
    let tensors = v["tensors"].as_array().expect("tensors");
    assert_eq!(tensors.len(), 272);
    assert_eq!(v["metadata"]["general.architecture"], "llama");
    let q = tensors
        .iter()
        .find(|t| t["name"] == "blk.0.attn_q.weight")
        .expect("blk.0.attn_q.weight");
    assert_eq!(
        (&q["type"], &q["shape"]),
        (&json!("Q4_1"), &json!([576, 576]))
    );
    let flow: Vec<&str> = v["flow"]
        .as_array()
        .expect("flow")
        .iter()
        .map(|l| l.as_str().expect("flow line"))
        .collect();
    assert!(flow.iter().any(|l| l.starts_with("30 x blk.i")), "{flow:?}");
    assert!(
        flow.iter().any(|l| l.contains("9 heads, 3 kv heads")),
        "{flow:?}"
    );
    assert!(flow.iter().any(|l| l.contains("(T, 49152)")), "{flow:?}");

    let text = toy_ok(&["inspect", &m]);
    assert!(text.contains("blk.0.attn_q.weight"));
    assert!(
        text.contains("272 tensors") && text.contains("134.5 M"),
        "{text}"
    );
    assert!(text.contains("== flow"));
}

#[test]
fn eval_ppl_on_a_short_file() {
    let dir = TempDir::new("eval_ppl_on_a_short_file");
    let full = std::fs::read_to_string(golden_dir().join("gpl-3.txt")).expect("gpl-3.txt");
    let text = &full[..full.floor_char_boundary(3000)];
    let f = dir.write("gpl.txt", text);
    let m = model();
    let n_tokens = toy_json(&["tokenize", "-m", &m, "--json", text])["ids"]
        .as_array()
        .expect("ids")
        .len();
    let v = toy_json(&[
        "eval",
        "ppl",
        "-m",
        &m,
        "-f",
        &arg(&f),
        "--ctx",
        "128",
        "--json",
    ]);
    let ppl = v["ppl"].as_f64().expect("ppl");
    assert!((5.0..60.0).contains(&ppl), "ppl {ppl}");
    assert!(v["stderr"].as_f64().expect("stderr") > 0.0);
    let chunks = v["chunks"].as_u64().expect("chunks") as usize;
    assert_eq!(chunks, n_tokens / 128, "{n_tokens} tokens");
    assert_eq!(v["tokens"].as_u64(), Some((chunks * 128) as u64));
}

/// Quantize (with `--pure`: every matrix in the type), then check the types written and that
/// the new file still generates.
fn quantize_and_run(test: &str, ty: &str, expect_type: impl Fn(u64) -> &'static str) {
    let dir = TempDir::new(test);
    let out = dir.path("out.gguf");
    toy_ok(&["quantize", &model(), &arg(&out), "--type", ty, "--pure"]);
    let v = toy_json(&["inspect", &arg(&out), "--json"]);
    let mut matrices = 0;
    for t in v["tensors"].as_array().expect("tensors") {
        let shape = t["shape"].as_array().expect("shape");
        if shape.len() == 2 {
            matrices += 1;
            let cols = shape[0].as_u64().expect("dim");
            assert_eq!(t["type"], expect_type(cols), "{t}");
        } else {
            assert_eq!(t["type"], "F32", "vectors stay F32: {t}");
        }
    }
    assert_eq!(matrices, 211, "30 x 7 matrices + token_embd");
    let g = generate_with(
        &arg(&out),
        &["-p", "Once upon a time", "-n", "8", "--temp", "0"],
    );
    let got = ids(&g["ids"]);
    assert_eq!(got.len(), 8, "{g}");
    // The first step is far from a tie (gap 4.1), so any sane quantization keeps it.
    assert_eq!(got[0], ids(&completions()[0]["generated_token_ids"])[0]);
}

#[test]
fn quantize_q8_0_and_run() {
    quantize_and_run("quantize_q8_0_and_run", "Q8_0", |_| "Q8_0");
}

#[test]
fn quantize_q4_k_falls_back_to_q5_0_on_576_wide_rows() {
    // Q4_K blocks are 256 wide: 576-wide rows take Q5_0, as llama.cpp does; 1536 is fine.
    quantize_and_run("quantize_q4_k", "Q4_K", |cols| {
        if cols % 256 == 0 {
            "Q4_K"
        } else {
            "Q5_0"
        }
    });
}

#[test]
fn quantize_q4_k_m_mixes_types_as_llama_quantize() {
    // the tied embedding (576 wide: no 256-blocks) in Q8_0; FFN down (1536 wide) in Q6_K on
    // the first and last eighth of the layers and every third between, Q4_K elsewhere
    let dir = TempDir::new("quantize_q4_k_m");
    let out = dir.path("out.gguf");
    toy_ok(&["quantize", &model(), &arg(&out), "--type", "Q4_K_M"]);
    let v = toy_json(&["inspect", &arg(&out), "--json"]);
    let ty = |name: &str| {
        let t = v["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name);
        t.unwrap_or_else(|| panic!("{name}"))["type"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(ty("token_embd.weight"), "Q8_0");
    assert_eq!(ty("blk.0.ffn_down.weight"), "Q6_K");
    assert_eq!(ty("blk.4.ffn_down.weight"), "Q4_K");
    assert_eq!(ty("blk.5.ffn_down.weight"), "Q6_K");
    assert_eq!(ty("blk.29.ffn_down.weight"), "Q6_K");
    assert_eq!(ty("blk.4.attn_q.weight"), "Q5_0");
    let plan = toy_ok(&[
        "quantize",
        &model(),
        &arg(&out),
        "--type",
        "Q4_K_M",
        "--dry-run",
    ]);
    assert!(
        plan.contains("token_embd.weight") && plan.contains("Q4_K_M: "),
        "{plan}"
    );
}

#[test]
fn quantize_rejects_unknown_type() {
    let dir = TempDir::new("quantize_rejects_unknown_type");
    let out = dir.path("out.gguf");
    let e = toy_err(&["quantize", &model(), &arg(&out), "--type", "BOGUS"]);
    for t in ["BOGUS", "Q8_0", "Q4_0", "Q4_K", "Q6_K", "F16"] {
        assert!(e.contains(t), "{e}");
    }
    assert!(!out.exists());
}

// ---- bad input: one clear error line, never a panic ----

#[test]
fn missing_model_names_the_path() {
    let dir = TempDir::new("missing_model");
    let p = arg(&dir.path("no-such-model.gguf"));
    let e = toy_err(&["generate", "-m", &p, "-p", "hi"]);
    assert!(e.contains(&p) && e.contains("not found"), "{e}");
}

#[test]
fn truncated_gguf_names_the_offset() {
    let dir = TempDir::new("truncated_gguf");
    let bytes = std::fs::read(model_path()).expect("read model");
    let f = arg(&dir.write("trunc.gguf", &bytes[..1000]));
    for cmd in [vec!["generate", "-m", &f, "-p", "hi"], vec!["inspect", &f]] {
        let e = toy_err(&cmd);
        assert!(e.contains(&f), "{e}");
        assert!(e.contains("offset") || e.contains("truncated"), "{e}");
    }
}

#[test]
fn non_gguf_file_is_rejected() {
    let dir = TempDir::new("non_gguf");
    let f = arg(&dir.write("text.gguf", "hello, this is not a model\n"));
    let e = toy_err(&["tokenize", "-m", &f, "hi"]);
    assert!(e.contains("magic") && e.contains("GGUF"), "{e}");
}

#[test]
fn malformed_messages_json_says_json() {
    let dir = TempDir::new("malformed_messages");
    let f = arg(&dir.write("m.json", "[{\"role\": \"user\", \"content\": "));
    let e = toy_err(&["template", "-m", &model(), "--messages", &f]);
    assert!(e.contains("JSON") && e.contains(&f), "{e}");
}

#[test]
fn messages_with_wrong_types_are_rejected() {
    let dir = TempDir::new("messages_wrong_types");
    let m = model();
    for (name, body) in [
        ("num.json", r#"[{"role": 1, "content": 2}]"#),
        ("obj.json", r#"{"role": "user", "content": "hi"}"#),
        ("missing.json", r#"[{"role": "user"}]"#),
    ] {
        let f = arg(&dir.write(name, body));
        let e = toy_err(&["template", "-m", &m, "--messages", &f]);
        assert!(e.contains("role") && e.contains("content"), "{body}: {e}");
    }
}

#[test]
fn prompt_ids_with_a_non_number_name_it() {
    let e = toy_err(&[
        "score",
        "-m",
        &model(),
        "--prompt-ids",
        "1,x,3",
        "--continuation-ids",
        "5",
    ]);
    assert!(e.contains("'x'"), "{e}");
}

#[test]
fn score_rejects_token_ids_outside_the_vocabulary() {
    // The last continuation id is never fed to the model: it once scored as a silent -inf.
    let m = model();
    for (p, c) in [("1,2", "50000"), ("1,2", "50000,5"), ("1,50000", "5")] {
        let e = toy_err(&[
            "score",
            "-m",
            &m,
            "--prompt-ids",
            p,
            "--continuation-ids",
            c,
        ]);
        assert!(e.contains("50000") && e.contains("49152"), "{p} / {c}: {e}");
    }
}

#[test]
fn prompt_longer_than_context_names_both_sizes() {
    let m = model();
    let prompt = "one two three four five six seven eight nine ten eleven twelve";
    let n = toy_json(&["tokenize", "-m", &m, "--json", prompt])["ids"]
        .as_array()
        .expect("ids")
        .len();
    assert!(n > 8);
    let e = toy_err(&["generate", "-m", &m, "-c", "8", "-p", prompt, "-n", "4"]);
    // The prompt plus the first generated token must fit.
    let names_len = e.contains(&format!("{n} tokens")) || e.contains(&format!("{} tokens", n + 1));
    assert!(names_len && e.contains("context of 8"), "{n} tokens: {e}");
}

#[test]
fn malformed_logit_bias_is_rejected() {
    let m = model();
    for (bias, says) in [("12", "TOKEN_ID=BIAS"), ("12=abc", "'abc'"), ("x=1", "'x'")] {
        let e = toy_err(&["generate", "-m", &m, "-p", "hi", "--logit-bias", bias]);
        assert!(
            e.contains("--logit-bias") && e.contains(says),
            "{bias}: {e}"
        );
    }
}

/// DRY and `--samplers` on the command line: a greedy run that repeats itself stops
/// repeating under DRY, an order of letters or names is taken, a wrong one is named.
#[test]
fn dry_and_the_sampler_order_work_from_the_command_line() {
    let p = "one two three one two three one two three one two three one two";
    let greedy = generate(&["-p", p, "-n", "6", "--temp", "0"]);
    let dry = generate(&["-p", p, "-n", "6", "--temp", "0", "--dry-multiplier", "4"]);
    assert_ne!(
        greedy["ids"], dry["ids"],
        "DRY must change a repeating greedy run"
    );
    for order in ["kt", "top_k;temperature", "penalties,dry,min_p,temp"] {
        let v = generate(&["-p", "Hi", "-n", "2", "--seed", "1", "--samplers", order]);
        assert!(
            v["ids"].as_array().is_some_and(|a| !a.is_empty()),
            "{order}: {v}"
        );
    }
    let m = model();
    let e = toy_err(&[
        "generate",
        "-m",
        &m,
        "-p",
        "hi",
        "--samplers",
        "top_k;bogus",
    ]);
    assert!(e.contains("--samplers") && e.contains("\"bogus\""), "{e}");
}

/// `toy bench -d`: the tests start from a cache already holding that context (llama-bench's
/// depth), so a decode at depth reads a longer cache than one from empty.
#[test]
fn bench_runs_at_a_depth_and_says_so() {
    let m = model();
    let v: serde_json::Value = serde_json::from_str(&toy_ok(&[
        "bench", "-m", &m, "-p", "8", "-n", "4", "-r", "1", "-d", "300", "--json",
    ]))
    .expect("json");
    assert_eq!(v["depth"], 300);
    for k in ["prefill_tok_s", "decode_tok_s"] {
        assert!(v[k]["mean"].as_f64().unwrap() > 0.0, "{k}: {v}");
    }
    let text = toy_ok(&[
        "bench", "-m", &m, "-p", "8", "-n", "4", "-r", "1", "-d", "100",
    ]);
    assert!(text.contains("tg4     @ d100"), "{text}");
}

/// Regression: `toy inspect MODEL | head -1` panicked in println! once head had gone; a
/// reader that stops early now ends toy quietly, as it ends any Unix tool. The output here
/// (every log-prob of two positions, megabytes) cannot fit in the pipe.
#[test]
fn a_reader_that_stops_early_ends_toy_without_a_panic() {
    use std::io::Read;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_toy"))
        .args([
            "score",
            "-m",
            &model(),
            "--prompt-ids",
            "1",
            "--continuation-ids",
            "2,3",
        ])
        .args(["--top", "49152", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("toy score starts");
    let mut first = [0u8; 64];
    child
        .stdout
        .take()
        .expect("stdout")
        .read_exact(&mut first)
        .expect("the start of the output");
    // the reader is gone (dropped): the rest has nowhere to go
    let out = child.wait_with_output().expect("toy ends");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(String::from_utf8_lossy(&first).starts_with('{'));
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn tap_captures_every_point_inspect_names_and_bad_patterns_are_errors() {
    let m = model();
    let v: Value = serde_json::from_str(&toy_ok(&["inspect", &m, "--json"])).unwrap();
    let mut names: Vec<String> = Vec::new();
    for line in v["flow"].as_array().unwrap() {
        let l = line.as_str().unwrap();
        if let Some(t) = l.split("[tap ").nth(1) {
            let t = t.trim_end_matches(']');
            names.extend(t.split(", ").map(|n| n.replace("blk.i.", "blk.29.")));
        }
    }
    assert!(names.len() >= 5, "{names:?}");
    let at = names.join(",");
    let out = toy_ok(&[
        "tap",
        "-m",
        &m,
        "-p",
        "The sky is blue.",
        "--at",
        &at,
        "--json",
    ]);
    let got: Vec<Value> = serde_json::from_str(&out).unwrap();
    let got_names: Vec<&str> = got.iter().map(|c| c["name"].as_str().unwrap()).collect();
    for n in &names {
        assert!(
            got_names.contains(&n.as_str()),
            "{n} not captured: {got_names:?}"
        );
    }
    let logits = got.iter().find(|c| c["name"] == "logits").unwrap();
    assert_eq!(logits["shape"][1], 49152);
    let resid = got.iter().find(|c| c["name"] == "blk.29.resid").unwrap();
    assert!(resid["stats"]["rms"].as_f64().unwrap() > 0.0);
    let err = toy_err(&["tap", "-m", &m, "-p", "hi", "--at", "blk.99.resid"]);
    assert!(err.contains("names no point"), "{err}");
}

/// Every main command's help ends with examples that use its own name.
#[test]
fn help_ends_with_examples() {
    for cmd in [
        "generate", "chat", "inspect", "tokenize", "score", "tap", "template", "quantize",
        "finetune", "merge", "bench", "train", "runs", "plot", "serve",
    ] {
        let out = toy_ok(&[cmd, "--help"]);
        let ex = out
            .split("Examples:\n")
            .nth(1)
            .unwrap_or_else(|| panic!("{cmd}: {out}"));
        assert!(ex.contains(&format!("toy {cmd}")), "{cmd}: {ex}");
    }
}

#[test]
fn devices_lists_the_cpu_and_says_why_there_is_no_gpu() {
    let out: Value = serde_json::from_str(&toy_ok(&["devices", "--json"])).unwrap();
    assert!(out["cpu"]["threads"].as_u64().unwrap() >= 1, "{out}");
    assert!(out["cpu"]["features"].is_array(), "{out}");
    // this binary is built without the cuda feature (scripts/build.sh), so it says so; one
    // built with it lists the GPUs or names what is missing (tinynn::device's tests)
    match out["gpus"].as_array().unwrap().is_empty() {
        true => assert!(
            out["no_gpu"].as_str().unwrap().contains("without CUDA"),
            "{out}"
        ),
        false => assert!(out["gpus"][0]["name"].is_string(), "{out}"),
    }
    let text = toy_ok(&["devices"]);
    assert!(
        text.starts_with("cpu: ") && text.contains("no GPU: "),
        "{text}"
    );
}
