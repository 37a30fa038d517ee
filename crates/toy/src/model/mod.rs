//! Model families, loaded from GGUF: the Llama family (Llama, SmolLM2, Qwen2, Qwen3) and
//! GPT-2. A `Model` holds the memory-mapped file and views into it; all per-sequence data
//! lives in a `State`, so one model can serve many sequences.

mod config;
mod error;
pub mod gpt2;
pub mod llama;
mod state;
pub mod weights;

pub use config::{Arch, Config, KNOWN_ARCHS};
pub use error::ModelError;
pub use state::{Logits, State};

use crate::gguf::GgufFile;
use std::path::Path;
use std::sync::Arc;

enum Body {
    Llama(llama::Llama),
    Gpt2(gpt2::Gpt2),
}

pub struct Model {
    pub file: Arc<GgufFile>,
    pub cfg: Config,
    body: Body,
}

impl Model {
    pub fn open(path: &Path) -> Result<Self, ModelError> {
        Self::from_gguf(Arc::new(GgufFile::open(path)?))
    }

    pub fn from_gguf(file: Arc<GgufFile>) -> Result<Self, ModelError> {
        let cfg = Config::from_gguf(&file)?;
        let body = match cfg.arch {
            Arch::Gpt2 => Body::Gpt2(gpt2::Gpt2::load(&file, &cfg)?),
            _ => Body::Llama(llama::Llama::load(&file, &cfg)?),
        };
        Ok(Self { file, cfg, body })
    }

    /// A fresh state with a cache of `ctx` positions (at most the trained context for models
    /// with learned positions) and batches of up to `n_batch` tokens.
    pub fn new_state(&self, ctx: usize, n_batch: usize) -> State {
        let ctx = match self.cfg.arch {
            Arch::Gpt2 => ctx.min(self.cfg.ctx_train),
            _ => ctx,
        };
        State::new(&self.cfg, ctx.max(1), n_batch.min(ctx).max(1))
    }

    /// Feed `tokens` after what `s` holds; return the logits of the last token (V) or of
    /// every token (T, V).
    pub fn forward<'s>(
        &self,
        s: &'s mut State,
        tokens: &[u32],
        which: Logits,
    ) -> Result<&'s [f32], ModelError> {
        if tokens.is_empty() {
            return Err(ModelError::Empty);
        }
        if let Some(&id) = tokens.iter().find(|&&id| id as usize >= self.cfg.vocab) {
            return Err(ModelError::BadToken {
                id,
                vocab: self.cfg.vocab,
            });
        }
        s.cache.check_room(tokens.len())?;
        let file = self.file.bytes();
        let v = self.cfg.vocab;
        let n_out = if which == Logits::All {
            tokens.len()
        } else {
            1
        };
        s.logits.resize(n_out * v, 0.0);
        let mut done = 0;
        for chunk in tokens.chunks(s.n_batch) {
            let (pos0, t) = (s.cache.pos, chunk.len());
            match &self.body {
                Body::Llama(m) => m.forward_hidden(file, &self.cfg, s, chunk, pos0),
                Body::Gpt2(m) => m.forward_hidden(file, &self.cfg, s, chunk, pos0),
            }
            s.cache.pos += t;
            done += t;
            if which == Logits::Last && done < tokens.len() {
                continue;
            }
            self.final_norm(s, t);
            let c = self.cfg.d_model;
            let head = self.head().qmat(file);
            let mut logits = std::mem::take(&mut s.logits);
            match which {
                Logits::All => {
                    let out = &mut logits[(done - t) * v..done * v];
                    tinynn::kernels::qmatmul::matmul(&head, &s.h[..t * c], t, out);
                }
                Logits::Last => {
                    tinynn::kernels::qmatmul::matvec(&head, &s.h[(t - 1) * c..t * c], &mut logits);
                }
            }
            s.logits = logits;
        }
        Ok(&s.logits)
    }

    /// Final hidden states (T, C) after the output norm, for the tokens of the last call:
    /// what embeddings are pooled from.
    pub fn hidden<'s>(&self, s: &'s mut State, tokens: &[u32]) -> Result<&'s [f32], ModelError> {
        if tokens.is_empty() {
            return Err(ModelError::Empty);
        }
        if tokens.len() > s.n_batch {
            return Err(ModelError::ContextOverflow {
                pos: s.cache.pos,
                n: tokens.len(),
                ctx: s.n_batch,
            });
        }
        s.cache.check_room(tokens.len())?;
        let pos0 = s.cache.pos;
        match &self.body {
            Body::Llama(m) => m.forward_hidden(self.file.bytes(), &self.cfg, s, tokens, pos0),
            Body::Gpt2(m) => m.forward_hidden(self.file.bytes(), &self.cfg, s, tokens, pos0),
        }
        s.cache.pos += tokens.len();
        self.final_norm(s, tokens.len());
        Ok(&s.h[..tokens.len() * self.cfg.d_model])
    }

    fn final_norm(&self, s: &mut State, t: usize) {
        match &self.body {
            Body::Llama(m) => m.final_norm(&self.cfg, s, t),
            Body::Gpt2(m) => m.final_norm(&self.cfg, s, t),
        }
    }

    fn head(&self) -> &weights::Weight {
        match &self.body {
            Body::Llama(m) => &m.output,
            Body::Gpt2(m) => &m.output,
        }
    }
}
