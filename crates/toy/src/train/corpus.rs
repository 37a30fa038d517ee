//! Training text: documents from text files, folders (recursive), JSONL (`text` field) or
//! HTML, and the default demo corpus, *The Rust Programming Language* book as shipped in the
//! local Rust documentation (`rustup doc --path` leads to `.../html/index.html`, the book is
//! `.../html/book/`, one mdBook HTML page per chapter with its text inside `<main>`).

use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum CorpusError {
    #[error("reading {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not UTF-8 text")]
    NotUtf8 { path: PathBuf },
    #[error("{path} line {line}: {why}")]
    Jsonl {
        path: PathBuf,
        line: usize,
        why: String,
    },
    #[error(
        "the default corpus (the Rust book from the local Rust documentation) is absent: {0}. \
         Install it with `rustup component add rust-docs`, or pass text files to `toy data prepare`"
    )]
    NoRustBook(String),
    #[error("no text found in {0}")]
    Empty(String),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CorpusError + '_ {
    move |source| CorpusError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// File extensions read when walking a folder; explicit file arguments are read whatever
/// their name.
const TEXT_EXTS: &[&str] = &["txt", "md", "rs", "jsonl", "html", "htm", "toml"];

/// The documents of `inputs`, in a stable order (folders are walked sorted by name).
pub fn read_inputs(inputs: &[PathBuf]) -> Result<Vec<String>, CorpusError> {
    let mut docs = Vec::new();
    for input in inputs {
        let meta = std::fs::metadata(input).map_err(io(input))?;
        if meta.is_dir() {
            for f in walk(input)? {
                read_file(&f, &mut docs)?;
            }
        } else {
            read_file(input, &mut docs)?;
        }
    }
    docs.retain(|d| !d.trim().is_empty());
    if docs.is_empty() {
        let names: Vec<String> = inputs.iter().map(|p| p.display().to_string()).collect();
        return Err(CorpusError::Empty(names.join(", ")));
    }
    Ok(docs)
}

fn walk(dir: &Path) -> Result<Vec<PathBuf>, CorpusError> {
    let mut out = Vec::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io(dir))?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .map_err(io(dir))?;
    entries.sort();
    for p in entries {
        if p.is_dir() {
            out.extend(walk(&p)?);
        } else if p
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| TEXT_EXTS.contains(&e))
        {
            out.push(p);
        }
    }
    Ok(out)
}

fn read_file(path: &Path, docs: &mut Vec<String>) -> Result<(), CorpusError> {
    let bytes = std::fs::read(path).map_err(io(path))?;
    let text = String::from_utf8(bytes).map_err(|_| CorpusError::NotUtf8 {
        path: path.to_path_buf(),
    })?;
    match path.extension().and_then(|e| e.to_str()) {
        Some("jsonl") => {
            for (i, line) in text.lines().enumerate() {
                if line.trim().is_empty() {
                    continue;
                }
                let err = |why: String| CorpusError::Jsonl {
                    path: path.to_path_buf(),
                    line: i + 1,
                    why,
                };
                let v: serde_json::Value =
                    serde_json::from_str(line).map_err(|e| err(e.to_string()))?;
                let t = v
                    .get("text")
                    .and_then(|t| t.as_str())
                    .ok_or_else(|| err("expected an object with a string field \"text\"".into()))?;
                docs.push(t.to_string());
            }
        }
        Some("html" | "htm") => docs.push(html_to_text(&text)),
        _ => docs.push(text),
    }
    Ok(())
}

/// The folder of the Rust book in the local Rust documentation: beside the index that
/// `rustup doc --path` names, or under `rustc --print sysroot` when rustup is not there.
pub fn rust_book_dir() -> Result<PathBuf, CorpusError> {
    let run = |cmd: &str, args: &[&str]| -> Result<PathBuf, String> {
        let out = std::process::Command::new(cmd)
            .args(args)
            .output()
            .map_err(|e| format!("cannot run `{cmd}`: {e}"))?;
        if !out.status.success() {
            let msg = String::from_utf8_lossy(&out.stderr).trim().to_string();
            return Err(format!("`{cmd} {}` failed: {msg}", args.join(" ")));
        }
        Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
    };
    let candidates = [
        run("rustup", &["doc", "--path"])
            .map(|index| index.parent().unwrap_or(Path::new(".")).join("book")),
        run("rustc", &["--print", "sysroot"]).map(|root| root.join("share/doc/rust/html/book")),
    ];
    let mut tried = Vec::new();
    for c in candidates {
        match c {
            Ok(book) if book.join("ch01-01-installation.html").is_file() => return Ok(book),
            Ok(book) => tried.push(format!("{} holds no book chapters", book.display())),
            Err(e) => tried.push(e),
        }
    }
    Err(CorpusError::NoRustBook(tried.join("; ")))
}

/// The chapters and appendices of the Rust book (`ch*.html`, `appendix-*.html`), as text.
pub fn rust_book() -> Result<Vec<String>, CorpusError> {
    let dir = rust_book_dir()?;
    let mut pages: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(io(&dir))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            (name.starts_with("ch") || name.starts_with("appendix-")) && name.ends_with(".html")
        })
        .collect();
    pages.sort();
    let mut docs = Vec::with_capacity(pages.len());
    for p in &pages {
        let html = std::fs::read_to_string(p).map_err(io(p))?;
        let text = html_to_text(&html);
        if !text.trim().is_empty() {
            docs.push(text);
        }
    }
    if docs.is_empty() {
        return Err(CorpusError::NoRustBook(format!(
            "no chapter text in {}",
            dir.display()
        )));
    }
    Ok(docs)
}

/// The text of an HTML page: the inside of `<main>` when there is one, tags dropped,
/// comments removed, entities decoded, runs of blank lines squeezed to one. mdBook keeps the
/// markdown's line breaks in its HTML, and code blocks are `<pre>`, so the text reads as the
/// book's source does.
pub fn html_to_text(html: &str) -> String {
    let body = match (html.find("<main>"), html.rfind("</main>")) {
        (Some(a), Some(b)) if a < b => &html[a + "<main>".len()..b],
        _ => html,
    };
    let mut out = String::with_capacity(body.len());
    let mut rest = body;
    while let Some(lt) = rest.find('<') {
        out.push_str(&decode_entities(&rest[..lt]));
        rest = &rest[lt..];
        let end = if rest.starts_with("<!--") {
            rest.find("-->").map(|e| e + 3)
        } else {
            rest.find('>').map(|e| e + 1)
        };
        let Some(end) = end else {
            rest = "";
            break;
        };
        let tag = &rest[..end];
        // Headings and list items start on their own line in the markdown.
        if tag.starts_with("<h") && tag.as_bytes().get(2).is_some_and(u8::is_ascii_digit) {
            out.push('\n');
        }
        rest = &rest[end..];
    }
    out.push_str(&decode_entities(rest));
    squeeze_blank_lines(&out)
}

fn decode_entities(s: &str) -> String {
    if !s.contains('&') {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        rest = &rest[amp..];
        let semi = rest[..rest.len().min(12)].find(';');
        let decoded = semi.and_then(|semi| {
            let name = &rest[1..semi];
            let c = match name {
                "lt" => Some('<'),
                "gt" => Some('>'),
                "amp" => Some('&'),
                "quot" => Some('"'),
                "apos" => Some('\''),
                "nbsp" => Some(' '),
                _ if name.starts_with("#x") || name.starts_with("#X") => {
                    u32::from_str_radix(&name[2..], 16)
                        .ok()
                        .and_then(char::from_u32)
                }
                _ if name.starts_with('#') => name[1..].parse().ok().and_then(char::from_u32),
                _ => None,
            };
            c.map(|c| (c, semi + 1))
        });
        match decoded {
            Some((c, len)) => {
                out.push(c);
                rest = &rest[len..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

fn squeeze_blank_lines(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut blank = 0;
    for line in s.lines() {
        let line = line.trim_end();
        if line.is_empty() {
            blank += 1;
            if blank > 1 {
                continue;
            }
        } else {
            blank = 0;
        }
        out.push_str(line);
        out.push('\n');
    }
    out.trim().to_string() + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_text_keeps_code_and_decodes_entities() {
        let html = "<html><nav>menu</nav><main><h2 id=\"x\">Hello</h2>\n<p>Text &amp; more</p>\
                    <!-- hidden -->\n\n\n<pre><code>fn main() {\n    let v: Vec&lt;i32&gt; = vec![];\n}\n</code></pre></main></html>";
        let t = html_to_text(html);
        assert!(!t.contains("menu") && !t.contains("hidden"), "{t}");
        assert!(
            !t.contains("<p>") && !t.contains("<code>") && !t.contains("<h2"),
            "{t}"
        );
        assert!(t.contains("Text & more"), "{t}");
        assert!(t.contains("    let v: Vec<i32> = vec![];"), "{t}");
        assert!(!t.contains("\n\n\n"));
    }
}
