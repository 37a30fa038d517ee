//! Model families, loaded from GGUF: the Llama family (Llama, SmolLM2, Qwen2, Qwen3),
//! GPT-2, and the Qwen3.5 hybrid (Gated DeltaNet and attention layers, chosen per layer). A `Model` holds the memory-mapped file and views into it; all per-sequence data
//! lives in a `State`, so one model can serve many sequences.

pub mod activations;
pub mod adapter;
pub mod block;
pub mod body;
mod config;
mod error;
mod hybrid_config;
pub mod kv_cache;
pub mod lora;
pub mod ops;
mod state;
pub mod tap;
pub mod tensors;
pub mod weights;
pub mod window_cache;

pub use config::{Arch, Config, Swa, KNOWN_ARCHS};
pub use error::ModelError;
pub use hybrid_config::LayerKind;
pub use state::{Logits, State};

use crate::gguf::GgufFile;
use kv_cache::KvCache;
use std::path::Path;
use std::sync::Arc;

/// A run of consecutive positions of one sequence inside a batch: its `len` tokens are the
/// next rows of the batch, at positions `pos0..pos0 + len` of `cache`.
pub struct Span<'c> {
    pub cache: &'c mut KvCache,
    pub pos0: usize,
    pub len: usize,
}

pub struct Model {
    pub file: Arc<GgufFile>,
    pub cfg: Config,
    body: body::Body,
    /// Adapters run unmerged, chosen per sequence (see [`Model::add_lora`]).
    loras: Vec<lora::LoadedLora>,
    /// The adapters the calls without `_lora` apply to every token (`set_default_loras`).
    defaults: Vec<(usize, f32)>,
    /// A draft whose proposals may round activations coarsely (`from_gguf_draft`).
    coarse: bool,
}

/// The adapters one sequence runs with: (index from [`Model::add_lora`], scale).
pub type LoraPicks = [(usize, f32)];

impl Model {
    pub fn open(path: &Path) -> Result<Self, ModelError> {
        Self::from_gguf(Arc::new(GgufFile::open(path)?))
    }

    pub fn from_gguf(file: Arc<GgufFile>) -> Result<Self, ModelError> {
        Self::load_with(file, |l| l)
    }

    /// [`Model::from_gguf_draft`] of the file at `path`.
    pub fn open_draft(path: &Path, as_stored: bool) -> Result<Self, ModelError> {
        Self::from_gguf_draft(Arc::new(GgufFile::open(path)?), as_stored)
    }

    /// A model to draft with (speculative decoding): its matrices held in Q4_0 where the file
    /// has a wider type (8, 6 or 5 bits, or floats). A draft's precision only moves how many
    /// drafted tokens the target keeps, never the output, and a draft reads all of its bytes
    /// for each token it proposes. Qwen2.5-Coder-0.5B (a Q8_0 head of 151,936 x 896, Q5_0
    /// and Q6_K layers) reads 278 MB of matrices a token so instead of 392; on three code
    /// prompts the 1.5B kept 106, 102 and 85 of its drafts against 105, 102 and 86.
    /// Its proposals also round activations as ggml's one plane (`coarse_activations`).
    /// `as_stored`: the file's types and the target's arithmetic (`from_gguf`), so that a
    /// draft that is the target proposes exactly the target's tokens.
    pub fn from_gguf_draft(file: Arc<GgufFile>, as_stored: bool) -> Result<Self, ModelError> {
        if as_stored {
            return Self::from_gguf(file);
        }
        let tied = file.tensor("output.weight").is_none();
        let which = if tied { recast_tied } else { recast_untied };
        let mut m = Self::load_with(file, |l| l.recast(tinynn::quant::GgmlType::Q4_0, which))?;
        m.coarse = true;
        Ok(m)
    }

    /// Whether its proposals as a draft round activations coarsely (see `from_gguf_draft`).
    pub fn drafts_coarsely(&self) -> bool {
        self.coarse
    }

    fn load_with(
        file: Arc<GgufFile>,
        with: impl FnOnce(weights::Loader) -> weights::Loader,
    ) -> Result<Self, ModelError> {
        let cfg = Config::from_gguf(&file)?;
        let body = {
            let loader = with(weights::Loader::new(&file));
            body::Body::load(&loader, &cfg)?
        };
        Ok(Self {
            file,
            cfg,
            body,
            loras: Vec::new(),
            defaults: Vec::new(),
            coarse: false,
        })
    }

    /// Keep `adapter` beside the base weights, checked against them; returns its index for
    /// the `_lora` forward calls, which apply it to the sequences that pick it.
    pub fn add_lora(&mut self, adapter: &adapter::LoraAdapter) -> Result<usize, ModelError> {
        // LoadedLora::new checks the adapter against the base
        self.loras
            .push(lora::LoadedLora::new(adapter, &self.file, &self.cfg)?);
        Ok(self.loras.len() - 1)
    }

    /// The adapters calls without `_lora` apply (`set_default_loras`).
    pub fn default_loras(&self) -> &LoraPicks {
        &self.defaults
    }

    /// Makes `picks` (indices from [`Model::add_lora`], scales) apply to every sequence that
    /// the calls without `_lora` run (`forward`, `forward_cache`, `forward_multi`): how the
    /// CLI's `--lora` keeps the base as stored and adds the adapters at run time.
    pub fn set_default_loras(&mut self, picks: Vec<(usize, f32)>) -> Result<(), ModelError> {
        self.check_picks(&picks)?;
        self.defaults = picks;
        Ok(())
    }

    /// How many adapters [`Model::add_lora`] added.
    pub fn n_loras(&self) -> usize {
        self.loras.len()
    }

    fn check_picks(&self, picks: &LoraPicks) -> Result<(), ModelError> {
        let n = self.loras.len();
        match picks.iter().find(|&&(id, _)| id >= n) {
            Some(&(id, _)) => Err(ModelError::NoSuchLora { id, n }),
            None => Ok(()),
        }
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

    /// A KV cache for one sequence of up to `ctx` positions, to use with a shared scratch
    /// state in [`Model::forward_cache`] and [`Model::forward_multi`].
    pub fn new_cache(&self, ctx: usize) -> KvCache {
        let c = &self.cfg;
        let ctx = match c.arch {
            Arch::Gpt2 => ctx.min(c.ctx_train),
            _ => ctx,
        };
        KvCache::hybrid(&c.cache_layers(), c.n_kv_head, c.head_dim, ctx.max(1))
    }

    /// Feed `tokens` after what `s` holds; return the logits of the last token (V) or of
    /// every token (T, V).
    pub fn forward<'s>(
        &self,
        s: &'s mut State,
        tokens: &[u32],
        which: Logits,
    ) -> Result<&'s [f32], ModelError> {
        let mut cache = std::mem::take(&mut s.cache);
        let r = self
            .forward_cache_lora(s, &mut cache, tokens, which, &self.defaults)
            .map(|_| ());
        s.cache = cache;
        r.map(|()| &s.logits[..])
    }

    fn check_tokens(&self, tokens: &[u32]) -> Result<(), ModelError> {
        if tokens.is_empty() {
            return Err(ModelError::Empty);
        }
        if let Some(&id) = tokens.iter().find(|&&id| id as usize >= self.cfg.vocab) {
            return Err(ModelError::BadToken {
                id,
                vocab: self.cfg.vocab,
            });
        }
        Ok(())
    }

    /// Run the blocks on `tokens` laid out as `spans` say, into scratch.x, each row with its
    /// adapters of `lora`.
    fn hidden_spans(
        &self,
        scratch: &mut State,
        tokens: &[u32],
        spans: &mut [Span],
        lora: &lora::RowLoras,
    ) {
        let file = self.file.bytes();
        self.body
            .forward_hidden(file, &self.cfg, scratch, tokens, spans, lora)
    }

    /// Like [`Model::forward`] for the sequence held in `cache`, using `scratch`'s buffers
    /// (its own cache is not touched): one scratch state serves many sequences.
    pub fn forward_cache<'s>(
        &self,
        scratch: &'s mut State,
        cache: &mut KvCache,
        tokens: &[u32],
        which: Logits,
    ) -> Result<&'s [f32], ModelError> {
        self.forward_cache_lora(scratch, cache, tokens, which, &self.defaults)
    }

    /// [`Model::forward_cache`] with the adapters `picks` on every token.
    pub fn forward_cache_lora<'s>(
        &self,
        scratch: &'s mut State,
        cache: &mut KvCache,
        tokens: &[u32],
        which: Logits,
        picks: &LoraPicks,
    ) -> Result<&'s [f32], ModelError> {
        self.check_tokens(tokens)?;
        self.check_picks(picks)?;
        cache.check_room(tokens.len())?;
        let s = scratch;
        let v = self.cfg.vocab;
        let n_out = if which == Logits::All {
            tokens.len()
        } else {
            1
        };
        s.logits.resize(n_out * v, 0.0);
        // the other workers poll between this step's kernels (`tinynn::spin`)
        tinynn::spin::busy(|| {
            let mut done = 0;
            for chunk in tokens.chunks(s.n_batch) {
                let t = chunk.len();
                let pos0 = cache.pos;
                let span = Span {
                    cache: &mut *cache,
                    pos0,
                    len: t,
                };
                let lora = lora::RowLoras::new(&self.loras, [(t, picks)]);
                self.hidden_spans(s, chunk, &mut [span], &lora);
                cache.pos += t;
                cache.after_forward();
                done += t;
                if which == Logits::Last && done < tokens.len() {
                    continue;
                }
                self.final_norm(s, t);
                let c = self.cfg.d_model;
                let head = self.head().qmat(self.file.bytes());
                let mut logits = std::mem::take(&mut s.logits);
                match which {
                    Logits::All => {
                        let out = &mut logits[(done - t) * v..done * v];
                        tinynn::kernels::qmatmul::matmul(&head, &s.h[..t * c], t, out);
                    }
                    Logits::Last => {
                        tinynn::kernels::qmatmul::matvec(
                            &head,
                            &s.h[(t - 1) * c..t * c],
                            &mut logits,
                        );
                    }
                }
                s.logits = logits;
            }
        });
        Ok(&s.logits)
    }

    /// The next token of each of N sequences in one batched pass: `tokens[i]` goes after what
    /// `caches[i]` holds. Returns logits (N, V), row i for sequence i. The weights are
    /// streamed once for all N, which is what makes serving several clients cheap; with the
    /// interleaved integer kernels (VNNI), or the AVX2 row dots that batches under 64 tokens of
    /// the legacy types take, the rows have the bits of N separate decode steps.
    pub fn forward_multi<'s>(
        &self,
        scratch: &'s mut State,
        caches: &mut [&mut KvCache],
        tokens: &[u32],
    ) -> Result<&'s [f32], ModelError> {
        if self.defaults.is_empty() {
            return self.forward_multi_lora(scratch, caches, tokens, &[]);
        }
        let picks = vec![&self.defaults[..]; tokens.len()];
        self.forward_multi_lora(scratch, caches, tokens, &picks)
    }

    /// [`Model::forward_multi`] with sequence i's adapters `picks[i]` (or none on any when
    /// `picks` is empty). Sequences with different adapters still share the batched pass:
    /// the adapter products are per row.
    pub fn forward_multi_lora<'s>(
        &self,
        scratch: &'s mut State,
        caches: &mut [&mut KvCache],
        tokens: &[u32],
        picks: &[&LoraPicks],
    ) -> Result<&'s [f32], ModelError> {
        let n = tokens.len();
        self.check_tokens(tokens)?;
        for p in picks {
            self.check_picks(p)?;
        }
        if caches.len() != n || n > scratch.n_batch || !(picks.is_empty() || picks.len() == n) {
            return Err(ModelError::BatchShape {
                tokens: n,
                caches: caches.len(),
                n_batch: scratch.n_batch,
            });
        }
        for c in caches.iter() {
            c.check_room(1)?;
        }
        tinynn::spin::busy(|| {
            let mut spans: Vec<Span> = caches
                .iter_mut()
                .map(|c| Span {
                    pos0: c.pos,
                    cache: c,
                    len: 1,
                })
                .collect();
            let lora = lora::RowLoras::new(&self.loras, picks.iter().map(|&p| (1, p)));
            self.hidden_spans(scratch, tokens, &mut spans, &lora);
            drop(spans);
            caches.iter_mut().for_each(|c| {
                c.pos += 1;
                c.after_forward();
            });
            self.final_norm(scratch, n);
            let (c, v) = (self.cfg.d_model, self.cfg.vocab);
            let s = &mut *scratch;
            s.logits.resize(n * v, 0.0);
            let head = self.head().qmat(self.file.bytes());
            if n == 1 {
                tinynn::kernels::qmatmul::matvec(&head, &s.h[..c], &mut s.logits);
            } else {
                tinynn::kernels::qmatmul::matmul(&head, &s.h[..n * c], n, &mut s.logits);
            }
        });
        Ok(&scratch.logits)
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
        self.check_tokens(tokens)?;
        s.cache.check_room(tokens.len())?;
        let mut cache = std::mem::take(&mut s.cache);
        let span = Span {
            pos0: cache.pos,
            cache: &mut cache,
            len: tokens.len(),
        };
        self.hidden_spans(s, tokens, &mut [span], &lora::RowLoras::none());
        cache.pos += tokens.len();
        s.cache = cache;
        self.final_norm(s, tokens.len());
        Ok(&s.h[..tokens.len() * self.cfg.d_model])
    }

    fn final_norm(&self, s: &mut State, t: usize) {
        self.body.final_norm(&self.cfg, s, t)
    }

    fn head(&self) -> &weights::Weight {
        &self.body.output
    }
}

/// The matrices a draft holds in Q4_0 (`Model::from_gguf_draft`): those in a wider type, but
/// the embedding when the head has its own matrix (only one row of it is read a token).
fn recast_untied(name: &str, ty: tinynn::quant::GgmlType) -> bool {
    name != "token_embd.weight" && recast_tied(name, ty)
}

fn recast_tied(_: &str, ty: tinynn::quant::GgmlType) -> bool {
    use tinynn::quant::GgmlType::*;
    matches!(ty, F32 | F16 | BF16 | Q8_0 | Q6_K | Q5_0 | Q5_1 | Q5_K)
}
