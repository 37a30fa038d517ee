//! Tokenizers built from GGUF `tokenizer.ggml.*` metadata: byte-level BPE on the
//! `tokenizers` crate, and SentencePiece (`spm.rs`). Follows llama.cpp's `llama-vocab.cpp` so ids match `llama-tokenize`: the
//! pre-tokenizer regexes are chosen by `tokenizer.ggml.pre`, CONTROL and USER_DEFINED tokens
//! are parsed as special (`parse_special = true`), and pieces are rendered as
//! `llama_token_to_piece` does (special tokens as their text).

mod bpe;
mod from_gguf;
mod pre;
mod spm;
mod stream;

use spm::Spm;

pub use stream::StreamDecoder;

use std::collections::HashMap;

/// llama.cpp's `llama_token_type` values (`tokenizer.ggml.token_type`).
pub const TOKEN_TYPE_NORMAL: i32 = 1;
pub const TOKEN_TYPE_UNKNOWN: i32 = 2;
pub const TOKEN_TYPE_CONTROL: i32 = 3;
pub const TOKEN_TYPE_USER_DEFINED: i32 = 4;
pub const TOKEN_TYPE_UNUSED: i32 = 5;
pub const TOKEN_TYPE_BYTE: i32 = 6;

/// Token texts llama.cpp treats as end of generation whatever the model's eos/eot ids say.
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "<|end_of_text|>",
    "<｜end▁of▁sentence｜>",
];

#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("unsupported tokenizer model {0:?}: expected \"gpt2\" (byte-level BPE) or \"llama\" (SentencePiece)")]
    UnsupportedModel(String),
    #[error("unknown pre-tokenizer {name:?}; known: {}", pre::KNOWN.join(", "))]
    UnknownPre { name: String },
    #[error("tokenizer metadata: {0}")]
    Metadata(String),
    #[error("{what} token id {id} is out of range for a vocabulary of {vocab_size}")]
    IdOutOfRange {
        what: &'static str,
        id: u32,
        vocab_size: usize,
    },
    #[error("tokenizers: {0}")]
    Backend(String),
}

fn backend(e: impl std::fmt::Display) -> TokenizerError {
    TokenizerError::Backend(e.to_string())
}

/// Everything needed to build a [`Tokenizer`], as read from GGUF (or written by hand in tests).
#[derive(Clone, Debug, Default)]
pub struct TokenizerSpec {
    /// `tokenizer.ggml.model`: "gpt2" (byte-level BPE) or "llama" (SentencePiece).
    pub model: String,
    /// `tokenizer.ggml.pre`; `None` means llama.cpp's "default".
    pub pre: Option<String>,
    /// Byte-level-encoded token texts ("Ġthe"), indexed by id.
    pub tokens: Vec<String>,
    /// One `TOKEN_TYPE_*` per token; missing entries count as NORMAL.
    pub token_types: Vec<i32>,
    /// "left right" pairs, highest priority first (BPE).
    pub merges: Vec<String>,
    /// Each token's score (SentencePiece: the higher merges first).
    pub scores: Vec<f32>,
    /// `tokenizer.ggml.unknown_token_id`.
    pub unk: Option<u32>,
    /// `tokenizer.ggml.add_space_prefix` (SentencePiece): a space before the text.
    pub add_space_prefix: bool,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub eot: Option<u32>,
    /// `tokenizer.ggml.add_bos_token`.
    pub add_bos: bool,
}

/// What splits text into ids: byte-level BPE (`tokenizers`) or SentencePiece (`spm.rs`).
#[derive(Clone)]
enum Engine {
    Bpe(Box<tokenizers::Tokenizer>),
    Spm(Box<Spm>),
}

#[derive(Clone)]
pub struct Tokenizer {
    inner: Engine,
    /// Raw bytes of every token, so decoding never goes back through the byte-level alphabet.
    bytes: Vec<Vec<u8>>,
    /// Whether each token is CONTROL or USER_DEFINED (parsed as special, shown as its text).
    special: Vec<bool>,
    eog: Vec<u32>,
    bos: Option<u32>,
    eos: Option<u32>,
    add_bos: bool,
}

impl Tokenizer {
    pub fn from_spec(spec: TokenizerSpec) -> Result<Self, TokenizerError> {
        let n = spec.tokens.len();
        for (what, id) in [
            ("bos", spec.bos),
            ("eos", spec.eos),
            ("eot", spec.eot),
            ("unknown", spec.unk),
        ] {
            if let Some(id) = id.filter(|&id| id as usize >= n) {
                return Err(TokenizerError::IdOutOfRange {
                    what,
                    id,
                    vocab_size: n,
                });
            }
        }
        let token_type = |i: usize| {
            spec.token_types
                .get(i)
                .copied()
                .unwrap_or(TOKEN_TYPE_NORMAL)
        };
        let is_special =
            |i: usize| matches!(token_type(i), TOKEN_TYPE_CONTROL | TOKEN_TYPE_USER_DEFINED);
        let (inner, bytes) = match spec.model.as_str() {
            "gpt2" => {
                let inner = bpe::build(&spec, is_special)?;
                let char_to_byte = byte_level_decoder();
                let bytes = (0..n)
                    .map(|i| match is_special(i) {
                        true => spec.tokens[i].as_bytes().to_vec(),
                        false => unbyte_level(&spec.tokens[i], &char_to_byte),
                    })
                    .collect();
                (Engine::Bpe(Box::new(inner)), bytes)
            }
            "llama" => {
                // llama.cpp partitions CONTROL, USER_DEFINED and UNKNOWN tokens out of the text
                let split = |i| is_special(i) || token_type(i) == TOKEN_TYPE_UNKNOWN;
                let spm = Spm::new(
                    &spec.tokens,
                    &spec.scores,
                    spec.unk,
                    split,
                    spec.add_space_prefix,
                );
                let bytes = (0..n)
                    .map(|i| spm_piece(&spec.tokens[i], token_type(i)))
                    .collect();
                (Engine::Spm(Box::new(spm)), bytes)
            }
            m => return Err(TokenizerError::UnsupportedModel(m.to_string())),
        };
        let mut eog: Vec<u32> = [spec.eos, spec.eot].into_iter().flatten().collect();
        for (i, t) in spec.tokens.iter().enumerate() {
            if EOG_TEXTS.contains(&t.as_str()) && !eog.contains(&(i as u32)) {
                eog.push(i as u32);
            }
        }

        let special = (0..n).map(is_special).collect();
        Ok(Self {
            inner,
            bytes,
            special,
            eog,
            bos: spec.bos,
            eos: spec.eos,
            add_bos: spec.add_bos,
        })
    }

    /// Token ids of `text`; special tokens written in the text become their ids. BOS is
    /// prepended only when asked for and the model wants it (`add_bos_token`).
    pub fn encode(&self, text: &str, add_bos: bool) -> Result<Vec<u32>, TokenizerError> {
        let mut ids = Vec::with_capacity(text.len() / 3 + 2);
        if let (true, true, Some(bos)) = (add_bos, self.add_bos, self.bos) {
            ids.push(bos);
        }
        match &self.inner {
            Engine::Bpe(t) => {
                let encoding = t.encode_fast(text, false).map_err(backend)?;
                ids.extend_from_slice(encoding.get_ids());
            }
            Engine::Spm(spm) => spm.encode(text, &mut ids),
        }
        Ok(ids)
    }

    /// The text of `ids`, invalid UTF-8 replaced; ids out of range are skipped.
    pub fn decode(&self, ids: &[u32]) -> String {
        let bytes: Vec<u8> = ids.iter().flat_map(|&id| self.token_bytes(id)).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// Raw bytes of one token (special tokens: their text; out of range: empty).
    pub fn token_bytes(&self, id: u32) -> Vec<u8> {
        self.bytes.get(id as usize).cloned().unwrap_or_default()
    }

    pub(crate) fn token_bytes_ref(&self, id: u32) -> &[u8] {
        self.bytes.get(id as usize).map_or(&[], Vec::as_slice)
    }

    /// One token as text, as llama.cpp's `token_to_piece` with `special = true`.
    pub fn piece(&self, id: u32) -> String {
        String::from_utf8_lossy(self.token_bytes_ref(id)).into_owned()
    }

    pub fn vocab_size(&self) -> usize {
        self.bytes.len()
    }

    pub fn bos_id(&self) -> Option<u32> {
        self.bos
    }

    /// The BOS a sequence starts with when the model wants one (`add_bos_token` and a BOS
    /// id), as llama.cpp's `llama_vocab_get_add_bos`.
    pub fn start_bos(&self) -> Option<u32> {
        self.bos.filter(|_| self.add_bos)
    }

    pub fn eos_id(&self) -> Option<u32> {
        self.eos
    }

    /// Whether generation should stop at `id` (eos, eot, "<|im_end|>", "<|endoftext|>", ...).
    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.contains(&id)
    }

    /// The end-of-generation ids, eos first.
    pub fn eog_ids(&self) -> &[u32] {
        &self.eog
    }

    /// Whether `id` is a CONTROL or USER_DEFINED token (`<|im_end|>`, ...).
    pub fn is_special(&self, id: u32) -> bool {
        self.special.get(id as usize).copied().unwrap_or(false)
    }

    /// The id of a token given its vocabulary text (byte-level form, e.g. "Ġthe").
    pub fn token_id(&self, text: &str) -> Option<u32> {
        // the vocabulary already maps text to ids; special tokens are in it too
        match &self.inner {
            Engine::Bpe(t) => t.token_to_id(text),
            Engine::Spm(spm) => spm.id(text),
        }
    }

    pub fn stream_decoder(&self) -> StreamDecoder<'_> {
        StreamDecoder::new(self)
    }
}

/// A SentencePiece token's bytes, as llama.cpp's `token_to_piece` (special = true) gives
/// them: `▁` as a space in normal tokens, `<0xXX>` as its byte, special tokens as their text,
/// unused ones as nothing.
fn spm_piece(text: &str, kind: i32) -> Vec<u8> {
    match kind {
        TOKEN_TYPE_NORMAL => text.replace('\u{2581}', " ").into_bytes(),
        TOKEN_TYPE_BYTE => {
            let hex = text.strip_prefix("<0x").and_then(|h| h.strip_suffix('>'));
            hex.and_then(|h| u8::from_str_radix(h, 16).ok())
                .map_or_else(Vec::new, |b| vec![b])
        }
        TOKEN_TYPE_UNUSED => Vec::new(),
        _ => text.as_bytes().to_vec(),
    }
}

/// GPT-2's `bytes_to_unicode`, inverted: printable bytes stand for themselves, the other 68
/// are shifted to U+0100 and up so every byte has a visible character.
fn byte_level_decoder() -> HashMap<char, u8> {
    let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    let mut map = HashMap::with_capacity(256);
    let mut shifted = 0u32;
    for b in 0..=255u8 {
        let c = if printable(b) {
            char::from(b)
        } else {
            shifted += 1;
            char::from_u32(255 + shifted).unwrap_or(char::REPLACEMENT_CHARACTER)
        };
        map.insert(c, b);
    }
    map
}

/// Bytes of a byte-level token text; a character outside the alphabet is kept as its UTF-8,
/// as llama.cpp's `llama_decode_text` does.
fn unbyte_level(text: &str, char_to_byte: &HashMap<char, u8>) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    for c in text.chars() {
        match char_to_byte.get(&c) {
            Some(&b) => out.push(b),
            None => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
        }
    }
    out
}

#[cfg(test)]
mod tests;
