//! What the end-to-end tests share: where the model and golden files are, running the built
//! `toy` binary, and scratch directories that clean up after themselves.
#![allow(dead_code)]

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

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

/// The model path as a command-line argument.
pub fn model() -> String {
    model_path().to_string_lossy().into_owned()
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
pub fn golden() -> Value {
    let p = golden_dir().join("smollm2-135m-q4_1.llama.cpp.json");
    let text = std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("reading golden file {}: {e}", p.display()));
    serde_json::from_str(&text).expect("golden file is JSON")
}

/// A JSON array of token ids.
pub fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap_or_else(|| panic!("expected an array of ids, got {v}"))
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

/// "1,2,3", as `--prompt-ids` takes them.
pub fn id_list(ids: &[u32]) -> String {
    ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

/// Run `toy -t 2 ARGS...`.
pub fn toy<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_toy"))
        .args(["-t", "2"])
        .args(args)
        .output()
        .expect("run the toy binary")
}

fn describe(args: &[impl AsRef<std::ffi::OsStr>], out: &Output) -> String {
    let args: Vec<_> = args
        .iter()
        .map(|a| a.as_ref().to_string_lossy().into_owned())
        .collect();
    format!(
        "toy {}\nstatus: {}\nstdout: {}\nstderr: {}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Run `toy`, require success, return stdout.
pub fn toy_ok<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> String {
    let out = toy(args);
    assert!(out.status.success(), "{}", describe(args, &out));
    String::from_utf8(out.stdout).expect("stdout is UTF-8")
}

/// Run `toy`, require success, parse stdout as one JSON value.
pub fn toy_json<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Value {
    let s = toy_ok(args);
    serde_json::from_str(s.trim()).unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {s}"))
}

/// Run `toy`, require a clean failure: a non-zero exit (not a signal), no panic, and a
/// single `error: ...` line on stderr (clap may add its "For more information" hint).
/// Returns that line.
pub fn toy_err<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> String {
    let out = toy(args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let what = describe(args, &out);
    assert!(!out.status.success(), "expected failure:\n{what}");
    assert!(out.status.code().is_some(), "killed by a signal:\n{what}");
    assert!(!stderr.contains("panicked"), "panicked:\n{what}");
    let mut lines = stderr.lines().filter(|l| !l.trim().is_empty());
    let first = lines.next().unwrap_or_default().to_string();
    assert!(first.starts_with("error: "), "no 'error: ' line:\n{what}");
    for l in lines {
        assert!(
            l.starts_with("For more information"),
            "more than one error line:\n{what}"
        );
    }
    first
}

/// A scratch directory under the system temp dir, unique to this process and test, removed
/// on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(test: &str) -> Self {
        let p = std::env::temp_dir().join(format!("toy-cli-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("create temp dir");
        Self(p)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// Write `bytes` to `name` in this directory; returns the path.
    pub fn write(&self, name: &str, bytes: impl AsRef<[u8]>) -> PathBuf {
        let p = self.path(name);
        std::fs::write(&p, bytes).expect("write temp file");
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A path as a command-line argument.
pub fn arg(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// An IDX file (the MNIST format) of unsigned bytes with dimensions `dims`.
pub fn idx_bytes(dims: &[u32], data: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8, 0, 8, dims.len() as u8];
    dims.iter()
        .for_each(|d| b.extend_from_slice(&d.to_be_bytes()));
    b.extend_from_slice(data);
    b
}

/// About 40 KB of text with repeated structure, so a BPE learns merges and a model a little.
pub fn corpus() -> String {
    let words = [
        "the", "owner", "borrow", "value", "struct", "moves", "into", "a", "trait",
    ];
    let mut s = String::new();
    let mut x: u64 = 1;
    while s.len() < 40_000 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        if x >> 62 == 0 {
            s.push_str("fn main() {\n    let x = 5;\n    println!(\"{x}\");\n}\n");
        } else {
            for k in 0..6 {
                s.push_str(words[((x >> (8 * k)) % words.len() as u64) as usize]);
                s.push(' ');
            }
            s.push_str(".\n");
        }
    }
    s
}
