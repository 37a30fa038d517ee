//! Qwen3.5-style hybrid training end to end: the shipped `recipes/hybrid-*.toml` parse to 3:1
//! GDN / attention stacks, the qwen35 keys have defaults and their mistakes are errors that
//! name the key (and the layer), and a trained run's checkpoint is a `qwen35` GGUF with the
//! keys llama.cpp requires that toy's inference loads with the trainer's own logits.

mod train_common;

use std::path::PathBuf;
use toy::gguf::GgufFile;
use toy::model::{Logits, Model};
use toy::tokenizer::Tokenizer;
use toy::train::checkpoint::{self, load_state};
use toy::train::recipe::Recipe;
use toy::train::run::RunDir;
use toy::train::trainer::{train, Hooks};
use toy::train::{Arch, LayerKind, TrainModel};
use train_common::*;

use LayerKind::{Attention as Attn, Gdn};

fn recipe_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../recipes")
        .join(name)
}

fn set(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[test]
fn shipped_hybrid_recipes_are_three_gdn_to_one_attention() {
    let tiny = Recipe::load(&recipe_path("hybrid-tiny.toml"), &[]).expect("hybrid-tiny");
    let c = tiny.model_config().unwrap();
    assert_eq!(c.arch, Arch::Qwen35);
    assert_eq!(
        (c.vocab, c.d_model, c.ctx, tiny.train.batch),
        (627, 64, 32, 16)
    );
    let h = c.hybrid().expect("hybrid shape");
    assert_eq!(h.layers, [Gdn, Gdn, Gdn, Attn]);
    TrainModel::try_init(c, 2, 0).expect("hybrid-tiny builds");

    let small = Recipe::load(&recipe_path("hybrid-small.toml"), &[]).expect("hybrid-small");
    let c = small.model_config().unwrap();
    assert_eq!((c.vocab, c.d_model, c.ctx), (4096, 288, 256));
    let h = c.hybrid().expect("hybrid shape");
    assert_eq!(h.layers, [Gdn, Gdn, Gdn, Attn, Gdn, Gdn, Gdn, Attn]);
    assert_eq!((h.head_dim, h.rope_dim), (48, 12));
    // the resolved recipe a run folder keeps parses back to the same one
    for r in [&tiny, &small] {
        let back = Recipe::parse(&r.to_toml(), "resolved", &[]).expect("resolved parses");
        assert_eq!(&back, r);
    }
}

#[test]
fn qwen35_keys_default_as_qwen35_does() {
    let r = Recipe::load(
        &recipe_path("tiny.toml"),
        &set(&["model.arch=qwen35", "model.n_layer=8"]),
    )
    .expect("qwen35 from the tiny shape");
    let h = r.model_config().unwrap().hybrid().expect("hybrid shape");
    // every 4th layer attends; head d_model / n_head, a quarter of it rotated
    assert_eq!(h.layers, [Gdn, Gdn, Gdn, Attn, Gdn, Gdn, Gdn, Attn]);
    assert_eq!((h.head_dim, h.rope_dim, h.conv_kernel), (16, 4, 4));
    assert_eq!((h.gdn_key_heads, h.gdn_value_heads), (4, 4));
    assert_eq!((h.gdn_key_dim, h.gdn_value_dim), (16, 16));
}

#[test]
fn hybrid_recipe_mistakes_name_the_key_and_layer() {
    let tiny = recipe_path("hybrid-tiny.toml");
    let err = |sets: &[&str]| -> String {
        match Recipe::load(&tiny, &set(sets)) {
            Ok(_) => panic!("{sets:?} must be rejected"),
            Err(e) => e.to_string(),
        }
    };
    let e = err(&[r#"model.layers=["gdn", "mamba", "gdn", "attn"]"#]);
    assert!(
        e.contains("model.layers[1]") && e.contains("mamba") && e.contains("\"gdn\" or \"attn\""),
        "{e}"
    );
    let e = err(&[r#"model.layers=["gdn", "attn"]"#]);
    assert!(e.contains("2 entries") && e.contains("n_layer = 4"), "{e}");
    let e = err(&["model.full_attention_interval=2"]);
    assert!(e.contains("not both"), "{e}");
    let e = err(&["model.gdn_value_heads=3"]);
    assert!(
        e.contains("gdn_key_heads 2 must divide gdn_value_heads 3"),
        "{e}"
    );
    let e = err(&["model.rope_dim=5"]);
    assert!(e.contains("rope_dim 5"), "{e}");
    let e = err(&["model.gdn_value_dim=8"]);
    assert!(e.contains("llama.cpp"), "{e}");
    // the other families take none of these keys
    let e = Recipe::load(&recipe_path("tiny.toml"), &set(&["model.gdn_key_heads=2"]))
        .expect_err("gdn keys on llama")
        .to_string();
    assert!(
        e.contains("model.gdn_key_heads") && e.contains("qwen35"),
        "{e}"
    );
}

#[test]
fn hybrid_checkpoint_is_a_qwen35_gguf_with_the_training_logits() {
    let tmp = TempDir::new("hybrid-export");
    let data = prepared_data(&tmp.0);
    let extra = [
        "model.n_layer=4",
        "model.gdn_key_heads=2",
        "model.depth_scale=true",
    ];
    let recipe = tiny_recipe(&data, "qwen35", &extra);
    let dir = RunDir::create(&tmp.path("runs"), &recipe).expect("run");
    train(&dir, &recipe, false, &Hooks::default(), &mut |_| {}).expect("train");
    let gguf_path = dir.path.join(checkpoint::gguf_name(12));
    let state = load_state(&dir.path.join(checkpoint::state_name(12))).expect("state");

    let f = GgufFile::open(&gguf_path).expect("gguf opens");
    assert_eq!(f.architecture(), Some("qwen35"));
    let rec: Vec<bool> = f
        .get("qwen35.attention.recurrent_layers")
        .and_then(|v| v.as_array())
        .map(|a| a.iter().filter_map(|x| x.as_bool()).collect())
        .unwrap_or_default();
    assert_eq!(rec, [true, true, true, false]);
    let sections = f
        .get("qwen35.rope.dimension_sections")
        .and_then(|v| v.as_array())
        .map(|a| a.len());
    assert_eq!(
        sections,
        Some(4),
        "llama.cpp requires rope.dimension_sections"
    );
    for (k, v) in [
        ("ssm.conv_kernel", 4),
        ("ssm.state_size", 8),
        ("ssm.group_count", 2),
        ("ssm.time_step_rank", 4),
        ("ssm.inner_size", 32),
        ("attention.key_length", 8),
        ("rope.dimension_count", 2),
        ("full_attention_interval", 4),
    ] {
        assert_eq!(f.get_u64(&format!("qwen35.{k}")), Some(v), "qwen35.{k}");
    }

    let model = Model::open(&gguf_path).expect("checkpoint loads as a model");
    let mut trained =
        TrainModel::from_params(recipe.model_config().unwrap(), 1, state.params).expect("params");
    let tok = Tokenizer::from_gguf(&f).expect("embedded tokenizer");
    let prompt = tok.encode("fn main() {\n    let", false).expect("encode");
    let want = trained.logits_last(&prompt).to_vec();
    let mut st = model.new_state(16, 16);
    let got = model
        .forward(&mut st, &prompt, Logits::Last)
        .expect("forward");
    let err = want
        .iter()
        .zip(got)
        .fold(0f32, |a, (x, y)| a.max((x - y).abs()));
    assert!(err < 1e-3, "inference logits differ by {err}");
}
