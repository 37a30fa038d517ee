//! Crash safety of training runs: an interrupted run resumed from its checkpoint ends bit for
//! bit where an uninterrupted one does; a crash while a checkpoint is written leaves the one
//! before it valid (and resumable); a NaN stops the run with a clear error and keeps the last
//! good checkpoint.

mod train_common;

use std::path::Path;
use toy::train::checkpoint::{self, load_state, TrainState};
use toy::train::events::{read_events, Event};
use toy::train::recipe::Recipe;
use toy::train::run::RunDir;
use toy::train::trainer::{train, Hooks, Outcome, TrainRunError};
use train_common::*;

fn run(runs: &Path, recipe: &Recipe, hooks: &Hooks) -> (RunDir, Result<Outcome, TrainRunError>) {
    let dir = RunDir::create(runs, recipe).expect("create run");
    let out = train(&dir, recipe, false, hooks, &mut |_| {});
    (dir, out)
}

fn resume(dir: &RunDir) -> Outcome {
    let (_, recipe) = RunDir::open(&dir.path).expect("open run");
    train(dir, &recipe, true, &Hooks::default(), &mut |_| {}).expect("resume")
}

fn final_state(dir: &RunDir, step: usize) -> TrainState {
    load_state(&dir.path.join(checkpoint::state_name(step))).expect("final state")
}

fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

fn assert_same_state(a: &TrainState, b: &TrainState) {
    assert_eq!(a.header, b.header);
    assert!(bits(&a.params) == bits(&b.params), "params differ");
    assert!(bits(&a.m) == bits(&b.m), "AdamW m differs");
    assert!(bits(&a.v) == bits(&b.v), "AdamW v differs");
}

fn step_losses(dir: &RunDir) -> Vec<(usize, u32)> {
    let mut out: Vec<(usize, u32)> = read_events(&dir.events_path())
        .expect("events")
        .into_iter()
        .filter_map(|e| match e {
            Event::Step { step, loss, .. } => Some((step, loss.to_bits())),
            _ => None,
        })
        .collect();
    // A resumed run logs the steps after its checkpoint again; keep the last of each.
    out.reverse();
    let mut seen = std::collections::HashSet::new();
    out.retain(|(s, _)| seen.insert(*s));
    out.reverse();
    out
}

#[test]
fn resumed_run_matches_uninterrupted_run_bit_for_bit() {
    let tmp = TempDir::new("resume");
    let data = prepared_data(&tmp.0);
    // qwen35: a hybrid of one GDN layer and one gated attention layer
    for (arch, kinds) in [
        ("llama", None),
        ("gpt2", None),
        ("qwen35", Some("model.full_attention_interval=2")),
    ] {
        // grad_accum 2 and clipping on: everything that carries state across steps is used.
        let mut set = vec!["train.grad_accum=2", "optim.grad_clip=0.5"];
        set.extend(kinds);
        let recipe = tiny_recipe(&data, arch, &set);
        let (whole, out) = run(&tmp.path(&format!("a-{arch}")), &recipe, &Hooks::default());
        let out = out.expect("uninterrupted run");
        assert!(out.finished && out.steps_done == 12);

        // Stopped after step 6: the newest checkpoint is step 4, so steps 5 and 6 run twice.
        let stop = Hooks {
            stop_after: Some(6),
            ..Hooks::default()
        };
        let (parts, out) = run(&tmp.path(&format!("b-{arch}")), &recipe, &stop);
        let out = out.expect("first part");
        assert!(!out.finished && out.steps_done == 6);
        assert_eq!(checkpoint::latest(&parts.path).expect("checkpoint").0, 4);
        let out = resume(&parts);
        assert!(out.finished && out.steps_done == 12);

        assert_same_state(&final_state(&whole, 12), &final_state(&parts, 12));
        assert_eq!(
            step_losses(&whole),
            step_losses(&parts),
            "{arch}: losses differ"
        );
        let first = step_losses(&whole)[0].1;
        let last = step_losses(&whole)[11].1;
        assert!(
            f32::from_bits(last) < f32::from_bits(first),
            "{arch}: loss falls"
        );
    }
}

#[test]
fn crash_while_writing_a_checkpoint_keeps_the_previous_one() {
    let tmp = TempDir::new("crash");
    let data = prepared_data(&tmp.0);
    let recipe = tiny_recipe(&data, "llama", &[]);
    let (whole, out) = run(&tmp.path("a"), &recipe, &Hooks::default());
    out.expect("uninterrupted run");

    let crash = Hooks {
        crash_checkpoint_at: Some(8),
        ..Hooks::default()
    };
    let (dir, out) = run(&tmp.path("b"), &recipe, &crash);
    let err = out.expect_err("the simulated crash stops the run");
    assert!(err.to_string().contains("simulated crash"), "{err}");
    // The torn state file is there under its temporary name, never under the real one.
    let torn = dir.path.join(format!("{}.tmp", checkpoint::state_name(8)));
    assert!(torn.is_file(), "the half-written temporary file exists");
    assert!(!dir.path.join(checkpoint::state_name(8)).exists());

    let (step, state) = checkpoint::latest(&dir.path).expect("a complete checkpoint remains");
    assert_eq!(step, 4);
    assert_eq!(load_state(&state).expect("loads").header.step, 4);
    let gguf = dir.path.join(checkpoint::gguf_name(4));
    toy::model::Model::open(&gguf).expect("the previous GGUF loads");

    // And the run resumes from it to the same end as the uninterrupted run.
    let out = resume(&dir);
    assert!(out.finished);
    assert_same_state(&final_state(&whole, 12), &final_state(&dir, 12));
}

#[test]
fn nan_loss_stops_with_a_clear_error_and_keeps_the_last_good_checkpoint() {
    let tmp = TempDir::new("nan");
    let data = prepared_data(&tmp.0);
    let recipe = tiny_recipe(&data, "llama", &[]);
    let poison = Hooks {
        poison_at: Some(6),
        ..Hooks::default()
    };
    let (dir, out) = run(&tmp.path("poison"), &recipe, &poison);
    let err = out.expect_err("a NaN weight stops the run");
    let msg = err.to_string();
    assert!(
        matches!(err, TrainRunError::NonFinite { step: 6, .. }),
        "{msg}"
    );
    assert!(msg.contains("NaN") && msg.contains("step 6"), "{msg}");
    assert!(
        msg.contains(&checkpoint::gguf_name(4)),
        "names the last good checkpoint: {msg}"
    );
    let (step, state) = checkpoint::latest(&dir.path).expect("checkpoint kept");
    assert_eq!(step, 4);
    let s = load_state(&state).expect("loads");
    assert!(s.params.iter().all(|p| p.is_finite()));
    let events = read_events(&dir.events_path()).expect("events");
    match events.last() {
        Some(Event::RunEnd { step: 6, status }) => {
            assert!(status.starts_with("failed"), "{status}")
        }
        other => panic!("expected a failed run_end, got {other:?}"),
    }

    // A learning rate of 1e30 blows the weights up: the run stops, and no checkpoint with
    // non-finite weights is ever written.
    let wild = tiny_recipe(
        &data,
        "llama",
        &["optim.lr=1e30", "optim.min_lr=1e30", "optim.warmup=0"],
    );
    let (dir, out) = run(&tmp.path("lr"), &wild, &Hooks::default());
    let err = out.expect_err("lr 1e30 diverges");
    assert!(matches!(err, TrainRunError::NonFinite { .. }), "{err}");
    for entry in std::fs::read_dir(&dir.path).expect("run dir") {
        let p = entry.expect("entry").path();
        if p.extension().is_some_and(|e| e == "state") {
            let s = load_state(&p).expect("state loads");
            assert!(
                s.params.iter().all(|x| x.is_finite()),
                "{} has non-finite params",
                p.display()
            );
        }
    }
}
