//! Byte-level BPE tokenizer built from GGUF `tokenizer.ggml.*` metadata, on the `tokenizers`
//! crate. Follows llama.cpp's `llama-vocab.cpp` so ids match `llama-tokenize`: the
//! pre-tokenizer regexes are chosen by `tokenizer.ggml.pre`, CONTROL and USER_DEFINED tokens
//! are parsed as special (`parse_special = true`), and pieces are rendered as
//! `llama_token_to_piece` does (special tokens as their text).

mod from_gguf;
mod pre;
mod stream;

pub use stream::StreamDecoder;

use std::collections::HashMap;

use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, DecoderWrapper, PreTokenizerWrapper, SplitDelimiterBehavior};

/// llama.cpp's `llama_token_type` values (`tokenizer.ggml.token_type`).
pub const TOKEN_TYPE_NORMAL: i32 = 1;
pub const TOKEN_TYPE_CONTROL: i32 = 3;
pub const TOKEN_TYPE_USER_DEFINED: i32 = 4;

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
    #[error("unsupported tokenizer model {0:?}: only \"gpt2\" (byte-level BPE) is supported")]
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
    /// `tokenizer.ggml.model`; only "gpt2" is supported.
    pub model: String,
    /// `tokenizer.ggml.pre`; `None` means llama.cpp's "default".
    pub pre: Option<String>,
    /// Byte-level-encoded token texts ("Ġthe"), indexed by id.
    pub tokens: Vec<String>,
    /// One `TOKEN_TYPE_*` per token; missing entries count as NORMAL.
    pub token_types: Vec<i32>,
    /// "left right" pairs, highest priority first.
    pub merges: Vec<String>,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub eot: Option<u32>,
    /// `tokenizer.ggml.add_bos_token`.
    pub add_bos: bool,
}

#[derive(Clone)]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
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
        if spec.model != "gpt2" {
            return Err(TokenizerError::UnsupportedModel(spec.model));
        }
        let pre_name = spec.pre.as_deref().unwrap_or("default");
        let exprs = pre::regexes(pre_name).ok_or_else(|| TokenizerError::UnknownPre {
            name: pre_name.to_string(),
        })?;
        let n = spec.tokens.len();
        for (what, id) in [("bos", spec.bos), ("eos", spec.eos), ("eot", spec.eot)] {
            if let Some(id) = id.filter(|&id| id as usize >= n) {
                return Err(TokenizerError::IdOutOfRange {
                    what,
                    id,
                    vocab_size: n,
                });
            }
        }

        let vocab: Vocab = spec
            .tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (t.clone(), i as u32))
            .collect();
        // A merge whose parts are not tokens cannot fire in llama.cpp either; the `tokenizers`
        // BPE builder would reject it, so it is dropped here.
        let merges = spec
            .merges
            .iter()
            .filter_map(|m| {
                let split = m.char_indices().skip(1).find(|&(_, c)| c == ' ')?.0;
                let (l, r) = (&m[..split], &m[split + 1..]);
                let ok = vocab.contains_key(l) && vocab.contains_key(r);
                ok.then(|| (l.to_string(), r.to_string()))
            })
            .collect();
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .build()
            .map_err(backend)?;

        let mut steps: Vec<PreTokenizerWrapper> = Vec::with_capacity(exprs.len() + 1);
        for e in exprs {
            let pattern = SplitPattern::Regex(e.to_string());
            let split =
                Split::new(pattern, SplitDelimiterBehavior::Isolated, false).map_err(backend)?;
            steps.push(split.into());
        }
        steps.push(ByteLevel::new(false, false, false).into());

        let mut inner = tokenizers::Tokenizer::new(bpe);
        inner.with_pre_tokenizer(Some(Sequence::new(steps)));
        inner.with_decoder(Some(DecoderWrapper::ByteLevel(ByteLevel::default())));

        let token_type = |i: usize| {
            spec.token_types
                .get(i)
                .copied()
                .unwrap_or(TOKEN_TYPE_NORMAL)
        };
        let is_special =
            |i: usize| matches!(token_type(i), TOKEN_TYPE_CONTROL | TOKEN_TYPE_USER_DEFINED);
        let special: Vec<AddedToken> = (0..n)
            .filter(|&i| is_special(i) && !spec.tokens[i].is_empty())
            .map(|i| AddedToken::from(spec.tokens[i].clone(), true))
            .collect();
        inner.add_special_tokens(&special);

        let char_to_byte = byte_level_decoder();
        let bytes = (0..n)
            .map(|i| {
                let text = &spec.tokens[i];
                if is_special(i) {
                    text.as_bytes().to_vec()
                } else {
                    unbyte_level(text, &char_to_byte)
                }
            })
            .collect();
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
        let encoding = self.inner.encode_fast(text, false).map_err(backend)?;
        let mut ids = Vec::with_capacity(encoding.len() + 1);
        if let (true, true, Some(bos)) = (add_bos, self.add_bos, self.bos) {
            ids.push(bos);
        }
        ids.extend_from_slice(encoding.get_ids());
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
        // the BPE vocabulary already maps text to ids; special tokens are in it too
        self.inner.token_to_id(text)
    }

    pub fn stream_decoder(&self) -> StreamDecoder<'_> {
        StreamDecoder::new(self)
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
