//! Reading a [`TokenizerSpec`] from GGUF `tokenizer.ggml.*` metadata (keys as llama.cpp's
//! `llama-vocab.cpp` `load` reads them).

use super::{Tokenizer, TokenizerError, TokenizerSpec};
use crate::gguf::{GgufFile, Value};

fn missing(key: &str) -> TokenizerError {
    TokenizerError::Metadata(format!("missing or mistyped key {key}"))
}

fn string_array(f: &GgufFile, key: &str) -> Result<Vec<String>, TokenizerError> {
    let arr = f
        .get(key)
        .and_then(Value::as_array)
        .ok_or_else(|| missing(key))?;
    arr.iter()
        .enumerate()
        .map(|(i, v)| {
            let s = v.as_str().ok_or_else(|| {
                TokenizerError::Metadata(format!(
                    "{key}[{i}] is {:?}, expected a string",
                    v.value_type()
                ))
            })?;
            Ok(s.to_string())
        })
        .collect()
}

fn token_id(f: &GgufFile, key: &str) -> Result<Option<u32>, TokenizerError> {
    match f.get(key) {
        None => Ok(None),
        // llama.cpp writes -1 (or u32::MAX) for "no such token".
        Some(v) => match v.as_i64() {
            Some(id) if id < 0 || id >= i64::from(u32::MAX) => Ok(None),
            Some(id) => Ok(Some(id as u32)),
            None => Err(missing(key)),
        },
    }
}

impl TokenizerSpec {
    pub fn from_gguf(f: &GgufFile) -> Result<Self, TokenizerError> {
        let model = f
            .get_str("tokenizer.ggml.model")
            .ok_or_else(|| missing("tokenizer.ggml.model"))?;
        let tokens = string_array(f, "tokenizer.ggml.tokens")?;
        let token_types = match f.get("tokenizer.ggml.token_type").and_then(Value::as_array) {
            None => Vec::new(),
            Some(arr) => arr
                .iter()
                .map(|v| v.as_i64().and_then(|t| i32::try_from(t).ok()))
                .collect::<Option<Vec<i32>>>()
                .ok_or_else(|| missing("tokenizer.ggml.token_type"))?,
        };
        let merges = match f.get("tokenizer.ggml.merges") {
            None => Vec::new(),
            Some(_) => string_array(f, "tokenizer.ggml.merges")?,
        };
        let pre = f.get_str("tokenizer.ggml.pre").map(str::to_string);
        // Absent `add_bos_token`: llama.cpp adds BOS for SentencePiece and llama3-style BPE
        // vocabularies only.
        let spm = model == "llama";
        let llama3 = matches!(pre.as_deref(), Some("llama3" | "llama-bpe" | "llama-v3"));
        let scores = match f.get("tokenizer.ggml.scores").and_then(Value::as_array) {
            None => Vec::new(),
            Some(arr) => arr
                .iter()
                .map(Value::as_f32)
                .collect::<Option<Vec<f32>>>()
                .ok_or_else(|| missing("tokenizer.ggml.scores"))?,
        };
        Ok(Self {
            model: model.to_string(),
            pre,
            tokens,
            token_types,
            merges,
            scores,
            unk: token_id(f, "tokenizer.ggml.unknown_token_id")?,
            add_space_prefix: f.get_bool("tokenizer.ggml.add_space_prefix").unwrap_or(spm),
            bos: token_id(f, "tokenizer.ggml.bos_token_id")?,
            eos: token_id(f, "tokenizer.ggml.eos_token_id")?,
            eot: token_id(f, "tokenizer.ggml.eot_token_id")?,
            add_bos: f
                .get_bool("tokenizer.ggml.add_bos_token")
                .unwrap_or(llama3 || spm),
        })
    }
}

impl Tokenizer {
    pub fn from_gguf(f: &GgufFile) -> Result<Self, TokenizerError> {
        Self::from_spec(TokenizerSpec::from_gguf(f)?)
    }
}
