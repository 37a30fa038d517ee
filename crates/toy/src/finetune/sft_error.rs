//! Errors of loading chat-SFT data ([`super::sft`]): each names the file and line, and what
//! was expected there.

use std::path::PathBuf;

use crate::chat_template::TemplateError;
use crate::tokenizer::TokenizerError;

#[derive(Debug, thiserror::Error)]
pub enum SftError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}:{line}: malformed JSON: {source}")]
    Json {
        path: PathBuf,
        line: usize,
        source: serde_json::Error,
    },
    #[error("{path}:{line}: {why}")]
    Shape {
        path: PathBuf,
        line: usize,
        why: String,
    },
    #[error("{path}:{line}: message {index} has role {role:?}, expected one of system, user, assistant, tool")]
    Role {
        path: PathBuf,
        line: usize,
        index: usize,
        role: String,
    },
    #[error("{path}:{line}: a messages record needs the model's chat template, and there is none")]
    NoTemplate { path: PathBuf, line: usize },
    #[error("{path}:{line}: {source}")]
    Template {
        path: PathBuf,
        line: usize,
        source: TemplateError,
    },
    #[error("{path}:{line}: the chat template cannot be split into turns at assistant message {index}: {why}")]
    NotPrefix {
        path: PathBuf,
        line: usize,
        index: usize,
        why: &'static str,
    },
    #[error("{path}:{line}: the chat template renders assistant message {index} as no text")]
    EmptyTurn {
        path: PathBuf,
        line: usize,
        index: usize,
    },
    #[error("{path}:{line}: {source}")]
    Tokenizer {
        path: PathBuf,
        line: usize,
        source: TokenizerError,
    },
    #[error("{path}:{line}: the tokens' bytes do not spell the text (the tokenizer dropped or changed some of it)")]
    Offsets { path: PathBuf, line: usize },
    #[error(
        "{path}:{line}: no token carries loss (no assistant turn, or an empty completion or text)"
    )]
    NoTrainable { path: PathBuf, line: usize },
    #[error("{path}:{line}: {len} tokens, more than ctx + 1 = {max} (on_long = error; use skip or truncate)")]
    TooLong {
        path: PathBuf,
        line: usize,
        len: usize,
        max: usize,
    },
    #[error("{path}: no samples ({skipped} skipped as too long)")]
    Empty { path: PathBuf, skipped: usize },
}
