//! A training checkpoint is a model: the GGUF a run writes (depth scaling folded into the
//! norms, tokenizer embedded) loads in toy's inference `Model`, gives the trainer's own
//! next-token logits, and generates text; its metadata is what llama.cpp reads.

mod train_common;

use toy::gguf::GgufFile;
use toy::infer::generate::{generate, GenerateOptions};
use toy::infer::sampler::SamplerConfig;
use toy::model::{Logits, Model};
use toy::tokenizer::Tokenizer;
use toy::train::checkpoint::{self, load_state};
use toy::train::run::RunDir;
use toy::train::trainer::{train, Hooks};
use toy::train::TrainModel;
use train_common::*;

#[test]
fn checkpoint_gguf_loads_matches_training_logits_and_generates() {
    let tmp = TempDir::new("export");
    let data = prepared_data(&tmp.0);
    for (arch, extra) in [
        (
            "llama",
            vec![
                "model.depth_scale=true",
                "model.tied=false",
                "model.n_kv_head=2",
            ],
        ),
        ("llama", vec![]),
        ("gpt2", vec!["model.depth_scale=true"]),
    ] {
        let recipe = tiny_recipe(&data, arch, &extra);
        let dir = RunDir::create(&tmp.path("runs"), &recipe).expect("run");
        train(&dir, &recipe, false, &Hooks::default(), &mut |_| {}).expect("train");
        let gguf_path = dir.path.join(checkpoint::gguf_name(12));
        let state = load_state(&dir.path.join(checkpoint::state_name(12))).expect("state");

        let f = GgufFile::open(&gguf_path).expect("gguf opens");
        assert_eq!(f.architecture(), Some(arch));
        assert_eq!(f.get_str("tokenizer.ggml.model"), Some("gpt2"));
        assert_eq!(f.get_str("tokenizer.ggml.pre"), Some("gpt-2"));
        let n_tokens = f
            .get("tokenizer.ggml.tokens")
            .and_then(|v| v.as_array())
            .map(|a| a.len());
        assert_eq!(
            n_tokens,
            Some(VOCAB),
            "llama.cpp needs one token per row of the embedding"
        );
        assert_eq!(f.get_u64(&format!("{arch}.context_length")), Some(16));

        let model = Model::open(&gguf_path).expect("checkpoint loads as a model");
        let mut trained = TrainModel::from_params(recipe.model_config().unwrap(), 1, state.params)
            .expect("params");
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
        assert!(
            err < 1e-3,
            "{arch} {extra:?}: inference logits differ by {err}"
        );

        let mut st = model.new_state(16, 16);
        let opts = GenerateOptions {
            max_tokens: 8,
            stop: vec![],
            sampler: SamplerConfig::greedy(),
        };
        let g = generate(&model, &mut st, &tok, &prompt, &opts, |_| {}).expect("generate");
        assert!(
            !g.tokens.is_empty() && !g.text.is_empty(),
            "{arch}: generated nothing"
        );
    }
}
