//! Training a byte-level BPE tokenizer on a corpus (GPT-2's scheme, Radford et al. 2019:
//! the GPT-2 split regex, bytes mapped to printable characters, merges learned by frequency)
//! with the `tokenizers` crate's `BpeTrainer`, and storing a tokenizer as the
//! `tokenizer.ggml.*` keys of a tensor-less GGUF file, the form checkpoints embed and that
//! toy's loader and llama.cpp read (`model = "gpt2"`, `pre = "gpt-2"`: llama.cpp's GPT-2
//! pre-tokenizer is the same regex HF's `ByteLevel(use_regex = true)` splits with).

use std::path::Path;

use tokenizers::models::bpe::{BpeTrainerBuilder, BPE};
use tokenizers::normalizers::NormalizerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::processors::PostProcessorWrapper;
use tokenizers::{AddedToken, TokenizerBuilder};

use crate::gguf::{GgufFile, GgufWriter, Value, ValueType};
use crate::tokenizer::{TokenizerSpec, TOKEN_TYPE_CONTROL, TOKEN_TYPE_NORMAL};

/// The document separator, also BOS and EOS (GPT-2's convention).
pub const END_OF_TEXT: &str = "<|endoftext|>";
/// llama.cpp's `LLAMA_TOKEN_TYPE_UNUSED`, for the padding tokens of a small corpus.
const TOKEN_TYPE_UNUSED: i32 = 5;
/// The pre-tokenizer name llama.cpp knows for the GPT-2 regex.
pub const PRE: &str = "gpt-2";

#[derive(Debug, thiserror::Error)]
pub enum BpeError {
    #[error("vocabulary size {0} is too small: byte-level BPE needs at least 257 (256 bytes + {END_OF_TEXT})")]
    TooSmall(usize),
    #[error("training the tokenizer: {0}")]
    Train(String),
    #[error("tokenizer file: {0}")]
    Gguf(#[from] crate::gguf::GgufError),
    #[error("tokenizer: {0}")]
    Tokenizer(#[from] crate::tokenizer::TokenizerError),
}

/// A byte-level BPE of exactly `vocab_size` tokens learned from `docs`: `<|endoftext|>`
/// (id 0), the 256 byte characters, then merges by frequency. A corpus too small to yield
/// that many merges is padded with unused `<|pad_N|>` tokens, so the model's vocabulary and
/// the tokenizer's always agree (llama.cpp requires it).
pub fn train_bpe(docs: &[String], vocab_size: usize) -> Result<TokenizerSpec, BpeError> {
    if vocab_size < 257 {
        return Err(BpeError::TooSmall(vocab_size));
    }
    let train_err = |e: tokenizers::Error| BpeError::Train(e.to_string());
    let mut trainer = BpeTrainerBuilder::new()
        .vocab_size(vocab_size)
        .min_frequency(2)
        .show_progress(false)
        .special_tokens(vec![AddedToken::from(END_OF_TEXT, true)])
        .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
        .build();
    let mut tok = TokenizerBuilder::<
        BPE,
        NormalizerWrapper,
        ByteLevel,
        PostProcessorWrapper,
        ByteLevel,
    >::new()
    .with_model(BPE::default())
    .with_pre_tokenizer(Some(ByteLevel::new(false, true, true)))
    .with_decoder(Some(ByteLevel::default()))
    .build()
    .map_err(train_err)?;
    tok.train(&mut trainer, docs.iter()).map_err(train_err)?;

    // The model's own serialization is the one public view of its merges in rank order.
    let json = serde_json::to_value(tok.get_model()).map_err(|e| BpeError::Train(e.to_string()))?;
    let mut vocab: Vec<(String, u32)> = tok.get_model().get_vocab().into_iter().collect();
    vocab.sort_by_key(|&(_, id)| id);
    let mut tokens: Vec<String> = Vec::with_capacity(vocab_size);
    for (i, (t, id)) in vocab.into_iter().enumerate() {
        if id as usize != i {
            return Err(BpeError::Train(format!(
                "token ids not dense: {t:?} has id {id}, expected {i}"
            )));
        }
        tokens.push(t);
    }
    let merges: Vec<String> = json
        .get("merges")
        .and_then(|m| m.as_array())
        .ok_or_else(|| BpeError::Train("no merges in the trained model".into()))?
        .iter()
        .filter_map(|m| match m {
            serde_json::Value::Array(p) => {
                Some(format!("{} {}", p.first()?.as_str()?, p.get(1)?.as_str()?))
            }
            serde_json::Value::String(s) => Some(s.clone()),
            _ => None,
        })
        .collect();
    let mut token_types: Vec<i32> = tokens
        .iter()
        .map(|t| {
            if t == END_OF_TEXT {
                TOKEN_TYPE_CONTROL
            } else {
                TOKEN_TYPE_NORMAL
            }
        })
        .collect();
    while tokens.len() < vocab_size {
        tokens.push(format!("<|pad_{}|>", tokens.len()));
        token_types.push(TOKEN_TYPE_UNUSED);
    }
    tokens.truncate(vocab_size);
    token_types.truncate(vocab_size);
    let eot = tokens
        .iter()
        .position(|t| t == END_OF_TEXT)
        .map(|i| i as u32);
    Ok(TokenizerSpec {
        model: "gpt2".into(),
        pre: Some(PRE.into()),
        tokens,
        token_types,
        merges,
        bos: eot,
        eos: eot,
        eot: None,
        add_bos: false,
        ..TokenizerSpec::default()
    })
}

/// The `tokenizer.ggml.*` metadata of `spec`, as llama.cpp's `gguf-py` writes it.
pub fn tokenizer_metadata(spec: &TokenizerSpec) -> Vec<(String, Value)> {
    let strings = |v: &[String]| {
        Value::Array(
            ValueType::String,
            v.iter().map(|s| Value::String(s.clone())).collect(),
        )
    };
    let mut kv = vec![
        (
            "tokenizer.ggml.model".to_string(),
            Value::String(spec.model.clone()),
        ),
        (
            "tokenizer.ggml.pre".to_string(),
            Value::String(spec.pre.clone().unwrap_or_else(|| "default".into())),
        ),
        ("tokenizer.ggml.tokens".to_string(), strings(&spec.tokens)),
        (
            "tokenizer.ggml.token_type".to_string(),
            Value::Array(
                ValueType::I32,
                spec.token_types.iter().map(|&t| Value::I32(t)).collect(),
            ),
        ),
        ("tokenizer.ggml.merges".to_string(), strings(&spec.merges)),
    ];
    for (key, id) in [("bos", spec.bos), ("eos", spec.eos), ("eot", spec.eot)] {
        if let Some(id) = id {
            kv.push((format!("tokenizer.ggml.{key}_token_id"), Value::U32(id)));
        }
    }
    kv.push((
        "tokenizer.ggml.add_bos_token".to_string(),
        Value::Bool(spec.add_bos),
    ));
    if spec.model == "llama" {
        // SentencePiece: the scores that order merges, the unknown token, the space prefix
        let scores = spec.scores.iter().map(|&s| Value::F32(s)).collect();
        kv.push((
            "tokenizer.ggml.scores".into(),
            Value::Array(ValueType::F32, scores),
        ));
        if let Some(id) = spec.unk {
            kv.push(("tokenizer.ggml.unknown_token_id".into(), Value::U32(id)));
        }
        kv.push((
            "tokenizer.ggml.add_space_prefix".into(),
            Value::Bool(spec.add_space_prefix),
        ));
    }
    kv
}

/// Writes `spec` as a GGUF file with only tokenizer metadata (atomically).
pub fn save_tokenizer(spec: &TokenizerSpec, path: &Path) -> Result<(), BpeError> {
    let mut w = GgufWriter::new();
    for (k, v) in tokenizer_metadata(spec) {
        w.add_metadata(k, v);
    }
    w.write_file(path)?;
    Ok(())
}

/// The tokenizer of any GGUF file (a model, or one written by [`save_tokenizer`]).
pub fn load_tokenizer(path: &Path) -> Result<TokenizerSpec, BpeError> {
    let f = GgufFile::open(path)?;
    Ok(TokenizerSpec::from_gguf(&f)?)
}
