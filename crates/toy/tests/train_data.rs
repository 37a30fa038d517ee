//! `toy data prepare` as a library: a BPE trained on a small corpus, shards that read back,
//! the same data twice from the same inputs, JSONL and folder inputs, and batches that are
//! a function of the seed.

mod train_common;

use toy::tokenizer::Tokenizer;
use toy::train::bpe::{load_tokenizer, END_OF_TEXT};
use toy::train::data::{prepare, PrepareOptions, TokenizerChoice};
use toy::train::dataset::{write_shards, Batcher, Dataset, Meta};
use train_common::*;

#[test]
fn prepare_trains_a_bpe_of_the_requested_size_and_shards_read_back() {
    let dir = TempDir::new("prepare");
    let data = prepared_data(&dir.0);
    let ds = Dataset::open(&data).expect("open dataset");
    assert_eq!(ds.meta.vocab_size, VOCAB);
    assert_eq!(ds.meta.dtype, "u16");
    assert_eq!(ds.train.len(), ds.meta.train_tokens);
    assert_eq!(ds.val.len(), ds.meta.val_tokens);
    assert!(!ds.val.is_empty() && ds.train.len() > 5 * ds.val.len());

    let spec = load_tokenizer(&ds.tokenizer_path()).expect("tokenizer.gguf loads");
    assert_eq!(spec.tokens.len(), VOCAB);
    assert_eq!(spec.model, "gpt2");
    assert_eq!(spec.pre.as_deref(), Some("gpt-2"));
    assert!(spec.merges.len() > 10, "BPE learned merges");
    let eot = spec
        .tokens
        .iter()
        .position(|t| t == END_OF_TEXT)
        .expect("eot") as u32;
    assert_eq!(spec.eos, Some(eot));

    // The shards decode back to the corpus: the train split starts with its first block.
    let tok = Tokenizer::from_spec(spec).expect("tokenizer builds");
    let text = std::fs::read_to_string(dir.path("corpus.txt")).expect("corpus");
    let all: Vec<u32> = tok.encode(&text, false).expect("encode");
    let mut block = vec![0u32; 1024];
    ds.train.read(0, &mut block);
    let is_a_block = all.chunks(1024).any(|c| c == &block[..]);
    assert!(
        is_a_block,
        "the train split is made of the corpus's token blocks"
    );
    // 43 merges already compress: fewer tokens than bytes.
    assert!(
        all.len() * 4 < text.len() * 3,
        "{} tokens for {} bytes",
        all.len(),
        text.len()
    );
    assert_eq!(tok.decode(&all), text, "tokenizer round-trips the corpus");
}

#[test]
fn same_inputs_give_identical_data_files() {
    let dir = TempDir::new("determinism");
    let a = prepared_data(&dir.0);
    let b = dir.path("data-again");
    prepare(&PrepareOptions {
        inputs: vec![dir.path("corpus.txt")],
        out: b.clone(),
        tokenizer: TokenizerChoice::Train { vocab_size: VOCAB },
        val_fraction: 0.1,
        seed: 3,
    })
    .expect("prepare again");
    for f in ["train.bin", "val.bin", "tokenizer.gguf", "meta.json"] {
        let x = std::fs::read(a.join(f)).expect("read a");
        let y = std::fs::read(b.join(f)).expect("read b");
        assert!(
            x == y,
            "{f} differs between two prepares of the same corpus"
        );
    }
}

#[test]
fn batches_are_windows_determined_by_the_seed() {
    let dir = TempDir::new("batches");
    let ds = Dataset::open(&prepared_data(&dir.0)).expect("open");
    let (b, t) = (4, 16);
    let mut x = Batcher::new(42, b, t);
    let mut y = Batcher::new(42, b, t);
    let mut z = Batcher::new(43, b, t);
    let mut differs = false;
    for _ in 0..5 {
        x.next(&ds.train);
        y.next(&ds.train);
        z.next(&ds.train);
        assert_eq!(x.inputs, y.inputs);
        assert_eq!(x.targets, y.targets);
        differs |= x.inputs != z.inputs;
        // Targets are the inputs shifted by one.
        for row in 0..b {
            assert_eq!(
                x.inputs[row * t + 1..(row + 1) * t],
                x.targets[row * t..(row + 1) * t - 1]
            );
        }
    }
    assert!(differs, "another seed draws other windows");
    // A batcher restarted from a saved state continues the same stream.
    let mut resumed = Batcher::new(0, b, t);
    resumed.rng = x.rng;
    x.next(&ds.train);
    resumed.next(&ds.train);
    assert_eq!(x.inputs, resumed.inputs);
}

#[test]
fn jsonl_and_folder_inputs_are_read() {
    let dir = TempDir::new("inputs");
    let sub = dir.path("docs/nested");
    std::fs::create_dir_all(&sub).expect("mkdir");
    std::fs::write(sub.join("a.md"), corpus_text(5, 20_000)).expect("write");
    std::fs::write(dir.path("docs/skip.bin"), [0xffu8, 0xfe, 0x00]).expect("write");
    let jsonl: String = (0..40)
        .map(|i| serde_json::json!({ "text": corpus_text(100 + i, 500) }).to_string() + "\n")
        .collect();
    std::fs::write(dir.path("docs.jsonl"), jsonl).expect("write");
    let meta = prepare(&PrepareOptions {
        inputs: vec![dir.path("docs"), dir.path("docs.jsonl")],
        out: dir.path("data"),
        tokenizer: TokenizerChoice::Train { vocab_size: 280 },
        val_fraction: 0.05,
        seed: 0,
    })
    .expect("prepare from folder + jsonl");
    assert_eq!(meta.documents, 41, "one markdown file and 40 JSONL records");

    std::fs::write(dir.path("bad.jsonl"), "{\"txt\": 1}\n").expect("write");
    let err = prepare(&PrepareOptions {
        inputs: vec![dir.path("bad.jsonl")],
        out: dir.path("bad"),
        tokenizer: TokenizerChoice::Train { vocab_size: 280 },
        val_fraction: 0.05,
        seed: 0,
    })
    .expect_err("a JSONL record without text is an error");
    let msg = err.to_string();
    assert!(
        msg.contains("bad.jsonl line 1") && msg.contains("\"text\""),
        "{msg}"
    );
}

#[test]
fn an_existing_models_tokenizer_can_be_used() {
    let model = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(model.exists(), "model missing: run scripts/fetch-model.sh");
    let dir = TempDir::new("model-tokenizer");
    std::fs::write(dir.path("c.txt"), corpus_text(9, 30_000)).expect("write");
    let meta = prepare(&PrepareOptions {
        inputs: vec![dir.path("c.txt")],
        out: dir.path("data"),
        tokenizer: TokenizerChoice::FromModel(model),
        val_fraction: 0.1,
        seed: 0,
    })
    .expect("prepare with SmolLM2's tokenizer");
    assert_eq!(meta.vocab_size, 49152);
    let ds = Dataset::open(&dir.path("data")).expect("open");
    let spec = load_tokenizer(&ds.tokenizer_path()).expect("tokenizer");
    let tok = Tokenizer::from_spec(spec).expect("build");
    let mut first = vec![0u32; 8];
    ds.train.read(0, &mut first);
    assert!(tok.decode(&first).len() > 8, "tokens decode to text");
}

#[test]
fn vocabularies_over_65536_use_u32_tokens() {
    let dir = TempDir::new("u32");
    let tokens: Vec<u32> = (0..5000u32).map(|i| 70_000 + i % 7).collect();
    let meta = Meta {
        vocab_size: 70_010,
        dtype: String::new(),
        train_tokens: 0,
        val_tokens: 0,
        documents: 1,
        eot: None,
        tokenizer_source: "test".into(),
        seed: 1,
        val_fraction: 0.2,
    };
    let meta = write_shards(&dir.0, &tokens, meta).expect("write");
    assert_eq!(meta.dtype, "u32");
    let ds = Dataset::open(&dir.0).expect("open");
    assert_eq!(ds.train.len() + ds.val.len(), 5000);
    assert!((0..ds.train.len()).all(|i| (70_000..70_007).contains(&ds.train.get(i))));
}
