//! Recipes: the shipped `recipes/*.toml` parse with the shapes issue 4 names, `--set`
//! overrides reach nested keys, and mistakes are errors that say what was wrong.

use std::path::PathBuf;
use toy::train::recipe::Recipe;
use toy::train::Arch;

fn recipe_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../recipes")
        .join(name)
}

fn set(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[test]
fn shipped_recipes_have_the_issue_shapes() {
    let tiny = Recipe::load(&recipe_path("tiny.toml"), &[]).expect("tiny.toml");
    let m = &tiny.model;
    assert_eq!(
        (
            m.vocab,
            m.d_model,
            m.n_head,
            m.d_ff,
            m.n_layer,
            m.ctx,
            tiny.train.batch
        ),
        (627, 64, 4, 128, 2, 32, 16)
    );
    let small = Recipe::load(&recipe_path("small.toml"), &[]).expect("small.toml");
    let m = &small.model;
    assert_eq!(
        (
            m.vocab,
            m.d_model,
            m.n_head,
            m.d_ff,
            m.n_layer,
            m.ctx,
            small.train.batch
        ),
        (4096, 288, 6, 768, 6, 256, 8)
    );
    for r in [&tiny, &small] {
        assert_eq!(r.model.arch, Arch::Llama);
        // The resolved form written to a run folder parses back to the same recipe.
        let again = Recipe::parse(&r.to_toml(), "resolved", &[]).expect("resolved parses");
        assert_eq!(&again, r);
    }
}

#[test]
fn overrides_set_nested_values_of_any_type() {
    let r = Recipe::load(
        &recipe_path("tiny.toml"),
        &set(&[
            "model.arch=gpt2",
            "optim.lr=1e-3",
            "optim.min_lr=0",
            "train.steps=7",
            "model.depth_scale=true",
            "eval.prompt=\"struct\"",
            "data.dir=somewhere/else",
        ]),
    )
    .expect("overrides apply");
    assert_eq!(r.model.arch, Arch::Gpt2);
    assert_eq!(r.optim.lr, 1e-3);
    assert_eq!(r.optim.min_lr, 0.0);
    assert_eq!(r.train.steps, 7);
    assert!(r.model.depth_scale);
    assert_eq!(r.eval.prompt, "struct");
    assert_eq!(r.data.dir, PathBuf::from("somewhere/else"));
    let cfg = r.model_config().unwrap();
    assert!(cfg.tied, "gpt2 always ties its head");
}

#[test]
fn unknown_keys_and_bad_values_are_errors_naming_them() {
    let path = recipe_path("tiny.toml");
    let err = |o: &[&str]| {
        Recipe::load(&path, &set(o))
            .expect_err("must be rejected")
            .to_string()
    };
    let e = err(&["optim.lrr=1"]);
    assert!(e.contains("lrr"), "{e}");
    let e = err(&["nosuch.key=1"]);
    assert!(e.contains("nosuch"), "{e}");
    let e = err(&["model.arch=bert"]);
    assert!(e.contains("bert") || e.contains("variant"), "{e}");
    let e = err(&["train.steps=many"]);
    assert!(e.contains("steps") || e.contains("integer"), "{e}");
    let e = err(&["optim.lr"]);
    assert!(e.contains("key=value"), "{e}");
    let e = err(&["name.x=1"]);
    assert!(e.contains("name is a string, not a table"), "{e}");
    let e = err(&["model.n_head=5"]);
    assert!(e.contains("does not divide"), "{e}");
    let e = err(&["train.batch=0"]);
    assert!(e.contains("train.batch is 0"), "{e}");
    let e = Recipe::parse("name = \"x\"\n[model\n", "broken.toml", &[])
        .expect_err("bad TOML")
        .to_string();
    assert!(e.contains("broken.toml"), "{e}");
}

/// Every RoPE family trains from a recipe (`model.arch = "qwen2"`, `"qwen3"` with heads wider
/// than d_model / n_head), and its export loads in the inference engine as that family with
/// the trainer's logits.
#[test]
fn qwen2_and_qwen3_recipes_train_and_export_as_their_family() {
    use std::sync::Arc;
    use toy::gguf::GgufFile;
    use toy::model::{Logits, Model};
    use toy::train::TrainModel;
    for (arch, extra) in [("qwen2", false), ("qwen3", true)] {
        let mut sets = vec![
            format!("model.arch={arch}"),
            "model.vocab=40".into(),
            "model.d_model=32".into(),
            "model.n_head=4".into(),
            "model.n_kv_head=2".into(),
            "model.ctx=8".into(),
        ];
        if extra {
            sets.push("model.head_dim=12".into());
        }
        let r = Recipe::load(&recipe_path("tiny.toml"), &sets).expect(arch);
        let c = r.model_config().unwrap();
        assert_eq!(c.arch.name(), arch);
        assert_eq!(c.head_dim, if extra { 12 } else { 8 });
        let mut m = TrainModel::try_init(c.clone(), 1, 3).unwrap();
        // weights off their init, so biases and norms carry signal
        for (i, v) in m.params.iter_mut().enumerate() {
            *v += 0.05 * ((i * 7919 % 101) as f32 / 50.0 - 1.0);
        }
        let toks = [1u32, 5, 9, 2, 33, 7];
        let want = m.logits_last(&toks).to_vec();
        let mut bytes = Vec::new();
        toy::train::export::to_gguf(&m, &[], "t")
            .unwrap()
            .write_to(&mut bytes)
            .unwrap();
        let model = Model::from_gguf(Arc::new(GgufFile::from_bytes(bytes).unwrap())).unwrap();
        assert_eq!(model.cfg.arch.name(), arch);
        assert_eq!(model.cfg.head_dim, c.head_dim);
        let mut st = model.new_state(8, 8);
        let got = model.forward(&mut st, &toks, Logits::Last).unwrap();
        let err = want
            .iter()
            .zip(got)
            .fold(0f32, |a, (x, y)| a.max((x - y).abs()));
        assert!(err < 1e-2, "{arch}: exported logits off by {err}");
    }
}

/// `[model] inference_rounding = true` reaches the training pass of `toy train` (K/V rounded
/// to f16 as inference's cache holds them, GPT-2's GELU as ggml's table) and stays in the
/// resolved recipe a run folder keeps.
#[test]
fn inference_rounding_in_a_train_recipe_reaches_the_training_pass() {
    use toy::train::TrainModel;
    for arch in ["llama", "gpt2"] {
        let arch_set = format!("model.arch={arch}");
        let plain = Recipe::load(&recipe_path("tiny.toml"), &set(&[&arch_set])).unwrap();
        let rounded = Recipe::load(
            &recipe_path("tiny.toml"),
            &set(&[&arch_set, "model.inference_rounding=true"]),
        )
        .unwrap();
        let (c0, c1) = (
            plain.model_config().unwrap(),
            rounded.model_config().unwrap(),
        );
        assert!(!c0.inference_rounding && c1.inference_rounding);
        let again = Recipe::parse(&rounded.to_toml(), "resolved", &[]).unwrap();
        assert!(again.model_config().unwrap().inference_rounding, "{arch}");
        let (b, t) = (2, c0.ctx);
        let ids: Vec<u32> = (0..b * t).map(|i| (i * 7 % c0.vocab) as u32).collect();
        let ys: Vec<u32> = ids.iter().map(|&i| (i + 1) % c0.vocab as u32).collect();
        let l0 = TrainModel::init(c0, b, 9).forward_loss(&ids, &ys, b, t);
        let l1 = TrainModel::init(c1, b, 9).forward_loss(&ids, &ys, b, t);
        assert_ne!(l0, l1, "{arch}: rounding changed nothing");
        assert!((l0 - l1).abs() < 1e-3 * l0.abs(), "{arch}: {l0} vs {l1}");
    }
}
