//! What the training tests share: scratch folders, a small generated corpus, and a tiny
//! recipe over it (a model of a few thousand parameters, so each test takes a second or two).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use toy::train::data::{prepare, PrepareOptions, TokenizerChoice};
use toy::train::recipe::Recipe;
use toy::train::rng::SplitMix64;

/// A scratch folder under the system temp dir, unique to this process and test, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(test: &str) -> Self {
        let p = std::env::temp_dir().join(format!("toy-train-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("create temp dir");
        Self(p)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// About `n` bytes of Rust-book-like text, the same for the same seed.
pub fn corpus_text(seed: u64, n: usize) -> String {
    const WORDS: &[&str] = &[
        "the",
        "a",
        "value",
        "owner",
        "borrow",
        "reference",
        "struct",
        "enum",
        "trait",
        "function",
        "returns",
        "takes",
        "mutable",
        "string",
        "vector",
        "compiler",
        "checks",
        "lifetime",
        "ownership",
        "moves",
        "into",
        "of",
        "and",
        "is",
        "with",
        "type",
        "method",
        "closure",
    ];
    const CODE: &[&str] = &[
        "fn main() {\n    let x = 5;\n    println!(\"{x}\");\n}\n",
        "let mut v = Vec::new();\nv.push(1);\n",
        "struct Point {\n    x: i32,\n    y: i32,\n}\n",
        "impl Point {\n    fn new() -> Self { Point { x: 0, y: 0 } }\n}\n",
    ];
    let mut rng = SplitMix64::new(seed);
    let mut s = String::with_capacity(n + 100);
    while s.len() < n {
        if rng.below(4) == 0 {
            s.push_str(CODE[rng.below(CODE.len() as u64) as usize]);
        } else {
            let len = 4 + rng.below(10);
            for i in 0..len {
                let w = WORDS[rng.below(WORDS.len() as u64) as usize];
                if i == 0 {
                    let mut c = w.chars();
                    let first = c.next().map(|f| f.to_ascii_uppercase()).unwrap_or('A');
                    s.push(first);
                    s.push_str(c.as_str());
                } else {
                    s.push(' ');
                    s.push_str(w);
                }
            }
            s.push_str(".\n");
        }
    }
    s
}

pub const VOCAB: usize = 300;

/// Writes the corpus to `dir/corpus.txt` and prepares `dir/data` with a BPE of `VOCAB`.
pub fn prepared_data(dir: &Path) -> PathBuf {
    let text = dir.join("corpus.txt");
    std::fs::write(&text, corpus_text(1, 60_000)).expect("write corpus");
    let out = dir.join("data");
    prepare(&PrepareOptions {
        inputs: vec![text],
        out: out.clone(),
        tokenizer: TokenizerChoice::Train { vocab_size: VOCAB },
        val_fraction: 0.1,
        seed: 3,
    })
    .expect("prepare data");
    out
}

/// A tiny recipe over `data` with `extra` TOML overrides ("key=value").
pub fn tiny_recipe(data: &Path, arch: &str, extra: &[&str]) -> Recipe {
    let text = format!(
        r#"
name = "test"
[model]
arch = "{arch}"
vocab = {VOCAB}
d_model = 32
n_head = 4
d_ff = 64
n_layer = 2
ctx = 16
[data]
dir = "{}"
[train]
batch = 4
steps = 12
seed = 7
[optim]
lr = 3e-3
min_lr = 3e-4
warmup = 3
[eval]
interval = 4
batches = 2
sample_tokens = 8
[checkpoint]
interval = 4
"#,
        data.display()
    );
    let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
    Recipe::parse(&text, "test recipe", &extra).expect("tiny recipe parses")
}
