//! What the tests on the real model share: where the model and the golden files are.
#![allow(dead_code)]

use std::path::PathBuf;

/// SmolLM2-135M-Instruct Q4_1 (`TOY_MODEL` overrides). A missing file fails the test with
/// the command that fetches it: these tests never skip.
pub fn model_path() -> PathBuf {
    let path = std::env::var_os("TOY_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../../models/SmolLM2-135M-Instruct.Q4_1.gguf")
        });
    assert!(
        path.exists(),
        "model not found at {}: run scripts/fetch-model.sh (or set TOY_MODEL)",
        path.display()
    );
    path
}

/// `../shared/golden/` beside the checkout (`TOY_GOLDEN` overrides).
pub fn golden_dir() -> PathBuf {
    let dir = std::env::var_os("TOY_GOLDEN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/golden")
        });
    assert!(
        dir.exists(),
        "golden files not found at {}: set TOY_GOLDEN",
        dir.display()
    );
    dir
}

/// The llama.cpp reference outputs on SmolLM2.
pub fn golden() -> serde_json::Value {
    let p = golden_dir().join("smollm2-135m-q4_1.llama.cpp.json");
    let text =
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()));
    serde_json::from_str(&text).expect("golden file is JSON")
}
