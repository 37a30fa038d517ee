//! Every command the README and docs/ show in a ```sh block runs as written: from the
//! repository root, with the built `toy` first on the PATH and the default model in models/.
//! (```bash and ```text blocks are shown, not run: servers, long jobs, other models.) A
//! command that stops working, or a block that holds something other than `toy` commands,
//! fails here with the file, the line and what it printed.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The README and every page under docs/.
fn pages() -> Vec<PathBuf> {
    let mut v = vec![root().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    v.extend(docs);
    v
}

/// (line number, command) of every line in the page's ```sh blocks, comments left out.
fn sh_commands(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut inside = false;
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        if let Some(info) = t.strip_prefix("```") {
            inside = !inside && info.trim() == "sh";
            continue;
        }
        if inside && !t.is_empty() && !t.starts_with('#') {
            out.push((i + 1, t.to_string()));
        }
    }
    out
}

#[test]
fn the_fences_are_read_as_the_convention_says() {
    let md = "a\n```sh\n# c\ntoy x\n\ntoy y\n```\n```bash\ntoy z\n```\n```sh\ntoy w\n```\n";
    let got: Vec<String> = sh_commands(md).into_iter().map(|c| c.1).collect();
    assert_eq!(got, ["toy x", "toy y", "toy w"]);
}

#[test]
fn every_sh_command_in_the_readme_and_docs_runs_as_written() {
    common::model_path();
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_toy"));
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut ran = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).expect("page");
        let name = page
            .strip_prefix(root())
            .unwrap_or(&page)
            .display()
            .to_string();
        for (line, cmd) in sh_commands(&text) {
            assert!(
                cmd.starts_with("toy "),
                "{name}:{line}: a ```sh block holds only toy commands, got {cmd:?}"
            );
            let out = Command::new("bash")
                .args(["-c", &cmd])
                .current_dir(root())
                .env("PATH", &path)
                .output()
                .expect("bash runs");
            assert!(
                out.status.success(),
                "{name}:{line}: `{cmd}` failed ({}):\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            ran += 1;
        }
    }
    assert!(
        ran >= 30,
        "only {ran} commands found: the convention has lost its blocks"
    );
}
