//! Constrained decoding on llguidance (github.com/guidance-ai/llguidance, the engine llama.cpp,
//! vLLM and mistral.rs use): a token table built once per vocabulary, a matcher per sequence
//! that says which tokens may come next under a JSON schema, a Lark grammar or a regex, and
//! the mask applied to the logits before sampling.

use crate::tokenizer::Tokenizer;
use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{SimpleVob, TokEnv, TokRxInfo, TokTrie, TokenizerEnv};
use llguidance::{Matcher, ParserFactory};
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum ConstrainError {
    #[error("building the token table for constrained decoding: {0}")]
    Table(String),
    #[error("{what} does not compile: {msg}")]
    Compile { what: &'static str, msg: String },
    #[error("constrained decoding: {0}")]
    Matcher(String),
}

impl From<ConstrainError> for crate::model::ModelError {
    fn from(e: ConstrainError) -> Self {
        Self::Constraint(e.to_string())
    }
}

/// What the output must match.
#[derive(Clone, Debug)]
pub enum Constraint {
    /// A JSON Schema (draft 2020-12 as llguidance supports it); `{"type":"object"}` for any
    /// JSON object.
    JsonSchema(serde_json::Value),
    /// A grammar in llguidance's Lark syntax (`start: ...`, `%json {...}` for embedded schemas).
    Lark(String),
    /// A regular expression the whole output matches.
    Regex(String),
}

impl Constraint {
    fn what(&self) -> &'static str {
        match self {
            Constraint::JsonSchema(_) => "the JSON schema",
            Constraint::Lark(_) => "the grammar",
            Constraint::Regex(_) => "the regex",
        }
    }

    /// The grammar llguidance compiles. Schemas without their own `x-guidance` options get
    /// compact JSON with `", "` and `": "` separators: flexible whitespace lets a small model
    /// wander into newlines until `max_tokens`.
    fn grammar(&self) -> TopLevelGrammar {
        match self {
            Constraint::JsonSchema(s) => {
                let mut s = s.clone();
                walk_schema(&mut s, &mut bound_integers);
                if let Some(o) = s.as_object_mut() {
                    o.entry("x-guidance").or_insert_with(|| {
                        serde_json::json!({
                            "whitespace_flexible": false,
                            "item_separator": ", ",
                            "key_separator": ": ",
                        })
                    });
                }
                TopLevelGrammar::from_json_schema(s)
            }
            Constraint::Lark(g) => TopLevelGrammar::from_lark(g.clone()),
            Constraint::Regex(r) => TopLevelGrammar::from_regex(r),
        }
    }
}

/// I-JSON's interoperable integers (RFC 7493 section 2.2): +-(2^53 - 1).
const MAX_SAFE_INTEGER: i64 = (1 << 53) - 1;

/// Integers without a bound get I-JSON's: unbounded, a small model can write digits until
/// `max_tokens` (llama.cpp caps them at 16 digits for the same reason).
fn bound_integers(o: &mut serde_json::Map<String, serde_json::Value>) {
    let integer = match o.get("type") {
        Some(serde_json::Value::String(t)) => t == "integer",
        Some(serde_json::Value::Array(ts)) => ts.iter().any(|t| t == "integer"),
        _ => false,
    };
    if !integer {
        return;
    }
    if !o.contains_key("maximum") && !o.contains_key("exclusiveMaximum") {
        o.insert("maximum".into(), MAX_SAFE_INTEGER.into());
    }
    if !o.contains_key("minimum") && !o.contains_key("exclusiveMinimum") {
        o.insert("minimum".into(), (-MAX_SAFE_INTEGER).into());
    }
}

/// OpenAI's strict mode: objects take no properties their schema does not list
/// (`additionalProperties: false` where a schema says nothing).
pub fn strict_schema(schema: &mut serde_json::Value) {
    walk_schema(schema, &mut |o| {
        let object = o.get("type").is_some_and(|t| t == "object") || o.contains_key("properties");
        if object && !o.contains_key("additionalProperties") {
            o.insert("additionalProperties".into(), false.into());
        }
    });
}

/// Apply `f` to every schema object in `s`: itself and its subschemas.
fn walk_schema(
    s: &mut serde_json::Value,
    f: &mut dyn FnMut(&mut serde_json::Map<String, serde_json::Value>),
) {
    let Some(o) = s.as_object_mut() else {
        return;
    };
    f(o);
    for key in ["properties", "$defs", "definitions", "patternProperties"] {
        if let Some(serde_json::Value::Object(m)) = o.get_mut(key) {
            m.values_mut().for_each(|v| walk_schema(v, f));
        }
    }
    for key in ["anyOf", "oneOf", "allOf", "prefixItems"] {
        if let Some(serde_json::Value::Array(a)) = o.get_mut(key) {
            a.iter_mut().for_each(|v| walk_schema(v, f));
        }
    }
    for key in ["items", "additionalProperties", "not", "contains"] {
        if let Some(v) = o.get_mut(key) {
            walk_schema(v, f);
        }
    }
}

/// The vocabulary as llguidance sees it: each token's bytes, special tokens behind the 0xFF
/// marker so grammars only emit them when they name them, and our own BPE for forced text.
struct Env {
    trie: TokTrie,
    tok: Tokenizer,
}

impl TokenizerEnv for Env {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<u32> {
        match std::str::from_utf8(s) {
            Ok(text) => self
                .tok
                .encode(text, false)
                .unwrap_or_else(|_| self.trie.greedy_tokenize(s)),
            Err(_) => self.trie.greedy_tokenize(s),
        }
    }
}

/// Compiles constraints for one vocabulary (built once per model: the trie of a 150k-token
/// vocabulary takes a while).
pub struct Grammars {
    factory: ParserFactory,
}

impl Grammars {
    /// The table for `tok`, with logits of `n_vocab` entries (ids past the tokenizer's are
    /// never allowed).
    pub fn new(tok: &Tokenizer, n_vocab: usize) -> Result<Self, ConstrainError> {
        let n = n_vocab.max(tok.vocab_size());
        let words: Vec<Vec<u8>> = (0..n as u32)
            .map(|id| {
                let b = tok.token_bytes(id);
                if tok.is_special(id) && !b.is_empty() {
                    [&[TokTrie::SPECIAL_TOKEN_MARKER][..], &b].concat()
                } else {
                    b
                }
            })
            .collect();
        let eog = tok.eog_ids();
        let eos = *eog.first().ok_or_else(|| {
            ConstrainError::Table("the vocabulary has no end-of-generation token".into())
        })?;
        let info = TokRxInfo {
            vocab_size: n as u32,
            tok_eos: eos,
            tok_bos: tok.bos_id(),
            tok_pad: None,
            tok_unk: None,
            tok_end_of_turn: None,
        };
        let trie = TokTrie::from(&info, &words).with_eos_tokens(eog);
        let env: TokEnv = Arc::new(Env {
            trie,
            tok: tok.clone(),
        });
        let mut factory =
            ParserFactory::new_simple(&env).map_err(|e| ConstrainError::Table(e.to_string()))?;
        factory.quiet();
        Ok(Self { factory })
    }

    /// A matcher at the start of `c`'s output, or what keeps `c` from compiling.
    pub fn compile(&self, c: &Constraint) -> Result<Guide, ConstrainError> {
        let parser =
            self.factory
                .create_parser(c.grammar())
                .map_err(|e| ConstrainError::Compile {
                    what: c.what(),
                    msg: first_line(&e.to_string()),
                })?;
        let matcher = Matcher::new(Ok(parser));
        if let Some(msg) = matcher.get_error() {
            return Err(ConstrainError::Compile {
                what: c.what(),
                msg: first_line(&msg),
            });
        }
        Ok(Guide {
            matcher,
            masks: 0,
            mask_secs: 0.0,
        })
    }
}

/// llguidance's messages quote the source under the line with a caret; the line is enough
/// for a one-line error.
fn first_line(msg: &str) -> String {
    msg.lines().next().unwrap_or("").trim().to_string()
}

/// The tokens allowed at one position.
pub struct Mask(SimpleVob);

impl Mask {
    pub fn allows(&self, id: u32) -> bool {
        self.0.is_allowed(id)
    }

    pub fn count(&self) -> usize {
        self.0.num_set()
    }
}

/// One sequence's place in its constraint.
pub struct Guide {
    matcher: Matcher,
    /// Masks computed and the seconds they took.
    masks: usize,
    mask_secs: f64,
}

impl Guide {
    /// A copy at the same place, for another choice of the same request.
    pub fn fork(&self) -> Guide {
        Guide {
            matcher: self.matcher.deep_clone(),
            masks: 0,
            mask_secs: 0.0,
        }
    }

    /// The tokens allowed next (end-of-generation ones once the output is complete).
    pub fn mask(&mut self) -> Result<Mask, ConstrainError> {
        let t = std::time::Instant::now();
        let m = self
            .matcher
            .compute_mask_or_eos()
            .map(Mask)
            .map_err(|e| ConstrainError::Matcher(e.to_string()));
        self.masks += 1;
        self.mask_secs += t.elapsed().as_secs_f64();
        m
    }

    /// How many masks were computed, and their mean time in microseconds.
    pub fn mask_cost(&self) -> (usize, f64) {
        (self.masks, 1e6 * self.mask_secs / self.masks.max(1) as f64)
    }

    /// Set every token `mask` does not allow to -inf in `logits` (V).
    pub fn apply(mask: &Mask, logits: &mut [f32]) {
        // 32 tokens per word of the bit set; most words are all-allowed or all-forbidden
        let mask = &mask.0;
        let n = mask.len().min(logits.len());
        for (w, chunk) in mask.as_slice().iter().zip(logits[..n].chunks_mut(32)) {
            match *w {
                u32::MAX => {}
                0 => chunk.fill(f32::NEG_INFINITY),
                w => {
                    for (b, l) in chunk.iter_mut().enumerate() {
                        if w & (1 << b) == 0 {
                            *l = f32::NEG_INFINITY;
                        }
                    }
                }
            }
        }
        logits[n..].fill(f32::NEG_INFINITY);
    }

    /// `mask` then `apply`.
    pub fn constrain(&mut self, logits: &mut [f32]) -> Result<(), ConstrainError> {
        let mask = self.mask()?;
        Self::apply(&mask, logits);
        Ok(())
    }

    /// Advance past a sampled token (not an end-of-generation one).
    pub fn consume(&mut self, id: u32) -> Result<(), ConstrainError> {
        self.matcher
            .consume_token(id)
            .map_err(|e| ConstrainError::Matcher(e.to_string()))
    }

    /// Undo the last `n` consumed tokens (speculative decoding's rejected drafts).
    pub fn rollback(&mut self, n: usize) -> Result<(), ConstrainError> {
        self.matcher
            .rollback(n)
            .map_err(|e| ConstrainError::Matcher(e.to_string()))
    }

    /// Whether the output so far is a complete match.
    pub fn is_accepting(&mut self) -> bool {
        self.matcher.is_accepting().unwrap_or(false)
    }

    /// Whether nothing but end of generation may follow.
    pub fn is_stopped(&self) -> bool {
        self.matcher.is_stopped()
    }
}
