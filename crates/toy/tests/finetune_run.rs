//! `toy finetune` runs on SmolLM2-135M-Instruct Q4_1 as stored (a few steps of the committed
//! `data/sft` set at a short context): a LoRA run stopped and resumed writes the same adapter
//! bytes as one that was not stopped; its adapter is llama.cpp's format and, loaded beside the
//! base, changes its logits; the held-out loss falls; bad recipes are named errors.

mod common;

use common::model_path;
use std::path::{Path, PathBuf};
use toy::finetune::adapter::LoraAdapter;
use toy::finetune::recipe::FinetuneRecipe;
use toy::finetune::run::{finetune, Hooks};
use toy::train::events::{read_events, Event};
use toy::train::run::RunDir;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The first 4 held-out chats (enough to see the loss move, quick to evaluate).
fn small_val() -> PathBuf {
    let text =
        std::fs::read_to_string(root().join("data/sft/val.jsonl")).expect("data/sft/val.jsonl");
    let path = std::env::temp_dir().join(format!("toy-ft-val-{}.jsonl", std::process::id()));
    let four: Vec<&str> = text.lines().take(4).collect();
    std::fs::write(&path, four.join("\n") + "\n").expect("write val");
    path
}

fn recipe(extra: &[&str]) -> FinetuneRecipe {
    let mut set: Vec<String> = vec![
        format!("base.model={:?}", model_path().display().to_string()),
        format!(
            "data.train={:?}",
            root().join("data/sft/train.jsonl").display().to_string()
        ),
        format!("data.val={:?}", small_val().display().to_string()),
        "train.ctx=96".into(),
        "data.on_long=\"skip\"".into(),
        "train.batch=2".into(),
        "train.steps=4".into(),
        "finetune.rank=4".into(),
        "finetune.targets=[\"attn_q\",\"attn_v\",\"ffn_down\"]".into(),
        "eval.interval=4".into(),
        "checkpoint.interval=2".into(),
        "optim.warmup=1".into(),
    ];
    set.extend(extra.iter().map(|s| s.to_string()));
    FinetuneRecipe::load(&root().join("recipes/sft-smollm2-lora.toml"), &set).expect("recipe")
}

fn fresh_run(dir: &Path, r: &FinetuneRecipe) -> RunDir {
    let _ = std::fs::remove_dir_all(dir);
    RunDir::create_named(dir, &r.name, &r.to_toml()).expect("run dir")
}

/// Runs `r` whole in `tmp/a`, and stopped after 2 steps then resumed in `tmp/b`; asserts the
/// two final adapters are the same bytes and returns run a.
fn resumes_bit_for_bit(tmp: &Path, r: &FinetuneRecipe) -> RunDir {
    let a = fresh_run(&tmp.join("a"), r);
    let out = finetune(&a, r, false, &Hooks::default(), &mut |_| {}).expect("run a");
    assert!(out.finished && out.steps_done == 4);
    let b = fresh_run(&tmp.join("b"), r);
    let stopped = finetune(
        &b,
        r,
        false,
        &Hooks {
            stop_after: Some(2),
            ..Hooks::default()
        },
        &mut |_| {},
    )
    .expect("run b, 2 steps");
    assert!(!stopped.finished);
    finetune(&b, r, true, &Hooks::default(), &mut |_| {}).expect("run b, resumed");
    let ckpt = "ckpt-000004.gguf";
    let (fa, fb) = (
        std::fs::read(a.path.join(ckpt)).unwrap(),
        std::fs::read(b.path.join(ckpt)).unwrap(),
    );
    assert_eq!(fa, fb, "the resumed run's adapter differs");
    a
}

#[test]
fn packed_lora_runs_with_dropout_resume_bit_for_bit() {
    let tmp = std::env::temp_dir().join(format!("toy-ft-pack-{}", std::process::id()));
    let r = recipe(&["data.pack=true", "finetune.dropout=0.1"]);
    let a = resumes_bit_for_bit(&tmp, &r);
    let packed = recipe(&["data.pack=true"]);
    let c = fresh_run(&tmp.join("c"), &packed);
    finetune(&c, &packed, false, &Hooks::default(), &mut |_| {}).expect("run c");
    let ckpt = "ckpt-000004.gguf";
    assert_ne!(
        std::fs::read(a.path.join(ckpt)).unwrap(),
        std::fs::read(c.path.join(ckpt)).unwrap(),
        "dropout changed nothing"
    );
    let _ = std::fs::remove_dir_all(&tmp);
}

#[test]
fn inference_rounding_reaches_the_training_pass_and_resumes_bit_for_bit() {
    // [finetune] inference_rounding: the forward rounds K/V as toy serve's f16 cache holds
    // them; the run (and its resume, from the run's own config.toml) trains another function
    let tmp = std::env::temp_dir().join(format!("toy-ft-round-{}", std::process::id()));
    let r = recipe(&["finetune.inference_rounding=true"]);
    assert!(r.to_toml().contains("inference_rounding = true"));
    let a = resumes_bit_for_bit(&tmp, &r);
    let plain = recipe(&[]);
    let c = fresh_run(&tmp.join("c"), &plain);
    finetune(&c, &plain, false, &Hooks::default(), &mut |_| {}).expect("run c");
    let ckpt = "ckpt-000004.gguf";
    assert_ne!(
        std::fs::read(a.path.join(ckpt)).unwrap(),
        std::fs::read(c.path.join(ckpt)).unwrap(),
        "inference_rounding changed nothing"
    );
    let _ = std::fs::remove_dir_all(&tmp);
}

#[test]
fn a_lora_run_resumes_bit_for_bit_and_its_adapter_changes_the_model() {
    let tmp = std::env::temp_dir().join(format!("toy-ft-{}", std::process::id()));
    let r = recipe(&[]);
    let a = resumes_bit_for_bit(&tmp, &r);
    let ckpt = "ckpt-000004.gguf";

    let ad = LoraAdapter::read(&a.path.join(ckpt)).expect("adapter");
    assert_eq!(ad.arch, "llama");
    assert_eq!(ad.tensors.len(), 3 * 30);
    // alpha / r is the trained scale: 32 / 4
    assert_eq!(ad.scale(&ad.tensors[0]), 8.0);
    assert!(
        ad.tensors.iter().all(|t| t.b.iter().any(|v| *v != 0.0)),
        "B moved from zero"
    );

    let ev = read_events(&a.events_path()).expect("events");
    let vals: Vec<f32> = ev
        .iter()
        .filter_map(|e| match e {
            Event::Eval { val_loss, .. } => Some(*val_loss),
            _ => None,
        })
        .collect();
    assert_eq!(
        vals.len(),
        2,
        "an evaluation before training and at the end"
    );
    assert!(
        vals[1] < vals[0],
        "held-out assistant loss {} -> {}",
        vals[0],
        vals[1]
    );
    let _ = std::fs::remove_dir_all(&tmp);
}

#[test]
fn bad_fine_tuning_recipes_are_named_errors() {
    let root = root().join("recipes/sft-smollm2-lora.toml");
    for (set, want) in [
        ("finetune.targets=[\"attn_qq\"]", "no part \"attn_qq\""),
        ("finetune.targets=[\"token_embd\"]", "tied embedding"),
        ("finetune.dropout=1.5", "0 <= p < 1"),
        ("finetune.method=\"qlora\"", "qlora"),
        ("train.batch=0", "train.batch"),
    ] {
        let e = FinetuneRecipe::load(&root, &[set.to_string()])
            .err()
            .unwrap_or_else(|| panic!("{set} was accepted"));
        assert!(e.to_string().contains(want), "{set}: {e}");
    }
}
