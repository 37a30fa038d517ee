//! Chat-SFT data: JSONL files turned into token sequences with a per-token loss mask, the
//! way Hugging Face TRL's `SFTTrainer` trains "assistant only" (`assistant_only_loss`), with
//! the mask taken from the rendered text rather than guessed from token ids.
//!
//! One JSON object per line (blank lines are skipped, other keys are ignored):
//! - `{"messages": [{"role", "content"}, ...]}`: rendered with the model's chat template
//!   ([`ChatTemplate`], from GGUF `tokenizer.chat_template`); loss only on assistant turns.
//!   Assistant turn `i` is the text between `render(messages[..i], add_generation_prompt)`
//!   and `render(messages[..=i])`: its content and the end-of-turn token (`<|im_end|>` in
//!   ChatML). Whitespace after the turn (ChatML's `\n` after `<|im_end|>`) is not trained:
//!   generation stops at the end-of-turn token, so that newline is never sampled. A template
//!   whose longer rendering does not start with the shorter one is an error.
//! - `{"prompt", "completion"}`: `prompt + completion` as plain text (no template, even when
//!   one is given); loss on the completion only. Nothing is appended: write the end token in
//!   the completion (special-token text becomes its id) if the model should learn to stop.
//! - `{"text"}`: loss on every token.
//! - `{"tokens": [id, ...]}`: token ids as they are (already tokenized, no BOS added, each
//!   below the vocabulary's size); loss on every token but the first.
//!
//! The rendering is tokenized once. The tokenizer is byte-level, so each token's byte range in
//! the text is the running sum of its bytes' lengths; a target token is trained when its
//! range overlaps a trained span. BOS is prepended when the model asks for it
//! (`add_bos_token`) and the text does not already start with it.
//!
//! A [`Sample`] has `tokens.len() == train.len()`; `train[i]` means token `i` is a target
//! that carries loss (predicted from `tokens[..i]`), and `train[0]` is always false.
//! Samples longer than `ctx + 1` tokens are handled by [`OnLong`]. [`SftBatcher`] turns a
//! set into `(B, T)` inputs and targets, [`IGNORE`] marking targets without loss.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::chat_template::{ChatMessage, ChatTemplate};
use crate::tokenizer::Tokenizer;

pub use super::sft_error::SftError;

/// Target id meaning "no loss here" (prompt tokens, padding).
pub const IGNORE: u32 = u32::MAX;

/// Roles a `messages` record may use.
pub const ROLES: &[&str] = &["system", "user", "assistant", "tool"];

/// What to do with a sample longer than `ctx + 1` tokens.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnLong {
    /// Fail, naming the line and the lengths.
    #[default]
    Error,
    /// Drop it (counted in [`SftSet::skipped_long`]).
    Skip,
    /// Keep the first `ctx + 1` tokens (counted in [`SftSet::truncated`]); one left with no
    /// trainable token is dropped and counted as skipped.
    Truncate,
}

impl std::str::FromStr for OnLong {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "error" => Ok(Self::Error),
            "skip" => Ok(Self::Skip),
            "truncate" => Ok(Self::Truncate),
            _ => Err(format!("{s:?}: expected error, skip or truncate")),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sample {
    pub tokens: Vec<u32>,
    /// `train[i]`: token `i` is a target with loss; `train[0]` is false.
    pub train: Vec<bool>,
}

#[derive(Clone, Debug, Default)]
pub struct SftSet {
    pub samples: Vec<Sample>,
    pub skipped_long: usize,
    pub truncated: usize,
    /// Trained targets over all kept samples.
    pub trainable_tokens: usize,
}

/// Reads `path` (JSONL) into samples; see the module docs for the record formats.
pub fn load_jsonl(
    path: &Path,
    tok: &Tokenizer,
    template: Option<&ChatTemplate>,
    ctx: usize,
    on_long: OnLong,
) -> Result<SftSet, SftError> {
    let text = std::fs::read_to_string(path).map_err(|source| SftError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    parse_jsonl(path, &text, tok, template, ctx, on_long)
}

/// [`load_jsonl`] on text already read; `path` only names it in errors.
pub fn parse_jsonl(
    path: &Path,
    text: &str,
    tok: &Tokenizer,
    template: Option<&ChatTemplate>,
    ctx: usize,
    on_long: OnLong,
) -> Result<SftSet, SftError> {
    let mut set = SftSet::default();
    let max = ctx.saturating_add(1);
    for (i, raw) in text.lines().enumerate() {
        if raw.trim().is_empty() {
            continue;
        }
        let at = Line { path, line: i + 1 };
        let mut s = at.sample(raw, tok, template)?;
        if s.tokens.len() > max {
            match on_long {
                OnLong::Error => {
                    return Err(SftError::TooLong {
                        path: path.to_path_buf(),
                        line: at.line,
                        len: s.tokens.len(),
                        max,
                    })
                }
                OnLong::Skip => {
                    set.skipped_long += 1;
                    continue;
                }
                OnLong::Truncate => {
                    s.tokens.truncate(max);
                    s.train.truncate(max);
                    if !s.train.contains(&true) {
                        set.skipped_long += 1;
                        continue;
                    }
                    set.truncated += 1;
                }
            }
        }
        set.trainable_tokens += s.train.iter().filter(|&&t| t).count();
        set.samples.push(s);
    }
    if set.samples.is_empty() {
        return Err(SftError::Empty {
            path: path.to_path_buf(),
            skipped: set.skipped_long,
        });
    }
    Ok(set)
}

/// Where a record came from, for its errors.
struct Line<'a> {
    path: &'a Path,
    line: usize,
}

impl Line<'_> {
    fn shape(&self, why: impl Into<String>) -> SftError {
        SftError::Shape {
            path: self.path.to_path_buf(),
            line: self.line,
            why: why.into(),
        }
    }

    fn sample(
        &self,
        raw: &str,
        tok: &Tokenizer,
        template: Option<&ChatTemplate>,
    ) -> Result<Sample, SftError> {
        let v: serde_json::Value = serde_json::from_str(raw).map_err(|source| SftError::Json {
            path: self.path.to_path_buf(),
            line: self.line,
            source,
        })?;
        let obj = v
            .as_object()
            .ok_or_else(|| self.shape("record is not a JSON object"))?;
        let has = |k: &str| obj.contains_key(k);
        let shapes = [
            has("messages"),
            has("prompt") || has("completion"),
            has("text"),
            has("tokens"),
        ];
        if shapes.iter().filter(|&&s| s).count() != 1 {
            let keys: Vec<&str> = obj.keys().map(String::as_str).collect();
            return Err(self.shape(format!(
                "unknown record shape with keys {keys:?}: expected exactly one of \
                 {{\"messages\"}}, {{\"prompt\", \"completion\"}}, {{\"text\"}} or \
                 {{\"tokens\"}}"
            )));
        }
        if shapes[3] {
            return self.ids(&obj["tokens"], tok.vocab_size());
        }
        let (text, spans) = if shapes[0] {
            let template = template.ok_or_else(|| SftError::NoTemplate {
                path: self.path.to_path_buf(),
                line: self.line,
            })?;
            let messages: Vec<ChatMessage> = serde_json::from_value(obj["messages"].clone())
                .map_err(|e| self.shape(format!("messages: {e}")))?;
            self.render_chat(template, &messages)?
        } else if shapes[1] {
            let prompt = self.string(obj, "prompt")?;
            let completion = self.string(obj, "completion")?;
            let text = format!("{prompt}{completion}");
            let span = prompt.len()..text.len();
            (text, vec![span])
        } else {
            let text = self.string(obj, "text")?.to_string();
            let span = 0..text.len();
            (text, vec![span])
        };
        self.tokenize(tok, &text, &spans)
    }

    /// A `{"tokens"}` record: ids below `vocab`, loss on all but the first.
    fn ids(&self, v: &serde_json::Value, vocab: usize) -> Result<Sample, SftError> {
        let tokens = Vec::<u32>::deserialize(v)
            .map_err(|e| self.shape(format!("\"tokens\" must be a list of token ids: {e}")))?;
        if let Some(bad) = tokens.iter().find(|&&id| id as usize >= vocab) {
            return Err(self.shape(format!(
                "token id {bad} is outside the vocabulary (expected ids below {vocab})"
            )));
        }
        if tokens.len() < 2 {
            return Err(SftError::NoTrainable {
                path: self.path.to_path_buf(),
                line: self.line,
            });
        }
        let mut train = vec![true; tokens.len()];
        train[0] = false;
        Ok(Sample { tokens, train })
    }

    fn string<'v>(
        &self,
        obj: &'v serde_json::Map<String, serde_json::Value>,
        key: &str,
    ) -> Result<&'v str, SftError> {
        obj.get(key)
            .and_then(|v| v.as_str())
            .ok_or_else(|| self.shape(format!("{key:?} is missing or not a string")))
    }

    /// The full rendering and the byte spans of its assistant turns.
    fn render_chat(
        &self,
        template: &ChatTemplate,
        messages: &[ChatMessage],
    ) -> Result<(String, Vec<std::ops::Range<usize>>), SftError> {
        if let Some((index, m)) = messages
            .iter()
            .enumerate()
            .find(|(_, m)| !ROLES.contains(&m.role.as_str()))
        {
            return Err(SftError::Role {
                path: self.path.to_path_buf(),
                line: self.line,
                index,
                role: m.role.clone(),
            });
        }
        let render = |upto: usize, add_generation_prompt: bool| {
            template
                .render(&messages[..upto], add_generation_prompt)
                .map_err(|source| SftError::Template {
                    path: self.path.to_path_buf(),
                    line: self.line,
                    source,
                })
        };
        let full = render(messages.len(), false)?;
        let not_prefix = |index, why| SftError::NotPrefix {
            path: self.path.to_path_buf(),
            line: self.line,
            index,
            why,
        };
        let mut spans = Vec::new();
        for (i, m) in messages.iter().enumerate() {
            if m.role != "assistant" {
                continue;
            }
            let before = render(i, true)?;
            let through = render(i + 1, false)?;
            if !through.starts_with(&before) {
                return Err(not_prefix(
                    i,
                    "rendering messages[..=i] does not start with messages[..i] \
                     rendered with the generation prompt",
                ));
            }
            if !full.starts_with(&through) {
                return Err(not_prefix(
                    i,
                    "the whole conversation's rendering does not start with messages[..=i]",
                ));
            }
            let turn = through[before.len()..].trim_end();
            if turn.is_empty() {
                return Err(SftError::EmptyTurn {
                    path: self.path.to_path_buf(),
                    line: self.line,
                    index: i,
                });
            }
            spans.push(before.len()..before.len() + turn.len());
        }
        Ok((full, spans))
    }

    /// Tokens of `text`, trained where a token's bytes overlap one of `spans`.
    fn tokenize(
        &self,
        tok: &Tokenizer,
        text: &str,
        spans: &[std::ops::Range<usize>],
    ) -> Result<Sample, SftError> {
        let tok_err = |source| SftError::Tokenizer {
            path: self.path.to_path_buf(),
            line: self.line,
            source,
        };
        let body = tok.encode(text, false).map_err(tok_err)?;
        let bos = tok.encode("", true).map_err(tok_err)?;
        let starts_with_bos = match (bos.first(), body.first()) {
            (Some(b), Some(t)) => b == t,
            _ => false,
        };
        let prefix = if starts_with_bos { &[][..] } else { &bos[..] };
        let mut tokens = Vec::with_capacity(prefix.len() + body.len());
        let mut train = vec![false; prefix.len()];
        tokens.extend_from_slice(prefix);
        let mut at = 0;
        for &id in &body {
            let bytes = tok.token_bytes(id);
            let (start, end) = (at, at + bytes.len());
            if text.as_bytes().get(start..end) != Some(&bytes[..]) {
                return Err(SftError::Offsets {
                    path: self.path.to_path_buf(),
                    line: self.line,
                });
            }
            tokens.push(id);
            train.push(spans.iter().any(|s| start < s.end && end > s.start));
            at = end;
        }
        if at != text.len() {
            return Err(SftError::Offsets {
                path: self.path.to_path_buf(),
                line: self.line,
            });
        }
        if let Some(first) = train.first_mut() {
            *first = false;
        }
        if !train.contains(&true) {
            return Err(SftError::NoTrainable {
                path: self.path.to_path_buf(),
                line: self.line,
            });
        }
        Ok(Sample { tokens, train })
    }
}

#[cfg(test)]
#[path = "sft_tests.rs"]
mod tests;
