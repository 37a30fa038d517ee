//! JSON shapes of generated output: ids, logprobs in the chat format (`logprobs.content`)
//! and in the legacy completions format (`tokens`, `token_logprobs`, `top_logprobs`,
//! `text_offset`), and usage.

use crate::engine::{SeqDone, TokenLogprob};
use crate::models::LoadedModel;
use serde_json::{json, Map, Value};
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Chat,
    Completion,
}

/// A response id: `chatcmpl-...` / `cmpl-...`, unique per server run.
pub fn response_id(format: Format) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let prefix = match format {
        Format::Chat => "chatcmpl",
        Format::Completion => "cmpl",
    };
    let t = crate::models::unix_now();
    format!("{prefix}-{t:x}{:08x}", NEXT.fetch_add(1, Ordering::Relaxed))
}

fn piece(m: &LoadedModel, id: u32) -> String {
    m.tok.piece(id)
}

/// One token in the chat format.
pub fn chat_logprob(m: &LoadedModel, lp: &TokenLogprob) -> Value {
    let entry = |id: u32, logprob: f32| json!({"token": piece(m, id), "logprob": logprob, "bytes": m.tok.token_bytes(id)});
    let mut v = entry(lp.id, lp.logprob);
    v["top_logprobs"] = lp.top.iter().map(|&(id, l)| entry(id, l)).collect();
    v
}

/// Legacy `logprobs` of a run of tokens whose text starts at `offset` (characters);
/// returns the offset after them. `None` entries (the first prompt token) have no logprob.
pub struct LegacyLogprobs {
    pub tokens: Vec<Value>,
    pub token_logprobs: Vec<Value>,
    pub top_logprobs: Vec<Value>,
    pub text_offset: Vec<Value>,
    pub offset: usize,
}

impl LegacyLogprobs {
    pub fn new(offset: usize) -> Self {
        Self {
            tokens: Vec::new(),
            token_logprobs: Vec::new(),
            top_logprobs: Vec::new(),
            text_offset: Vec::new(),
            offset,
        }
    }

    /// The echoed prompt's tokens (`prompt`, ids) with their logprobs (`lps`: one per token
    /// after the first). A BOS the tokenizer put in front is not part of the prompt's text
    /// and is left out, so the tokens still join into the echoed text; the first prompt token
    /// then has its logprob after the BOS.
    pub fn push_prompt(&mut self, m: &LoadedModel, prompt: &[u32], lps: &[TokenLogprob]) {
        let Some((&first, rest)) = prompt.split_first() else {
            return;
        };
        if m.tok.start_bos() != Some(first) {
            self.push(m, first, None);
        }
        for (&id, l) in rest.iter().zip(lps) {
            self.push(m, id, Some(l));
        }
    }

    pub fn push(&mut self, m: &LoadedModel, id: u32, lp: Option<&TokenLogprob>) {
        let text = piece(m, id);
        self.tokens.push(json!(text));
        self.text_offset.push(json!(self.offset));
        self.offset += text.chars().count();
        match lp {
            Some(lp) => {
                self.token_logprobs.push(json!(lp.logprob));
                let top: Map<String, Value> = lp
                    .top
                    .iter()
                    .map(|&(id, l)| (piece(m, id), json!(l)))
                    .collect();
                self.top_logprobs.push(Value::Object(top));
            }
            None => {
                self.token_logprobs.push(Value::Null);
                self.top_logprobs.push(Value::Null);
            }
        }
    }

    /// The JSON, leaving the offset for the next run.
    pub fn take(&mut self) -> Value {
        json!({
            "tokens": std::mem::take(&mut self.tokens),
            "token_logprobs": std::mem::take(&mut self.token_logprobs),
            "top_logprobs": std::mem::take(&mut self.top_logprobs),
            "text_offset": std::mem::take(&mut self.text_offset),
        })
    }
}

/// Token counts of a request: each prompt counted once (not once per choice), every
/// choice's output, and the prompt tokens served from a slot's cache.
pub fn usage(done: &[&SeqDone], n: usize) -> Value {
    let first_of_prompt = |d: &&&SeqDone| d.index.is_multiple_of(n.max(1));
    let prompt: usize = done
        .iter()
        .filter(first_of_prompt)
        .map(|d| d.prompt_tokens)
        .sum();
    let cached: usize = done
        .iter()
        .filter(first_of_prompt)
        .map(|d| d.cached_tokens)
        .sum();
    let completion: usize = done.iter().map(|d| d.completion_tokens).sum();
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    })
}
