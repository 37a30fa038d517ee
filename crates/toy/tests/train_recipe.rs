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
    let cfg = r.model_config();
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
