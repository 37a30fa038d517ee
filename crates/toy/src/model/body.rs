//! A model's body for every family: the token embedding (and GPT-2's learned positions), the
//! blocks (`block.rs`, each running its `ops::BlockDef`), the final norm and the head.
//! Letters: T tokens in the batch, C width, V vocabulary.

use super::block::{Block, NormW};
use super::lora::RowLoras;
use super::weights::{embedding_and_head, load_exact, Loader, Weight};
use super::{Config, ModelError, Span, State};
use tinynn::kernels::rope::Rope;

pub struct Body {
    pub token_embd: Weight,
    /// GPT-2's learned positions (ctx_train, C).
    pub position_embd: Option<Weight>,
    pub blocks: Vec<Block>,
    pub output_norm: NormW,
    /// `output.weight`, or the embedding when tied.
    pub output: Weight,
    /// The RoPE table (families with learned positions have none).
    pub rope: Option<Rope>,
    /// The sliding-window layers' own RoPE table (Gemma 3: base 10000 there).
    pub rope_swa: Option<Rope>,
}

impl Body {
    pub fn load(f: &Loader, cfg: &Config) -> Result<Self, ModelError> {
        let (token_embd, output) = embedding_and_head(f, cfg)?;
        let c = [cfg.d_model as u64];
        let gpt2 = cfg.arch.is_gpt2();
        let rope = match gpt2 {
            true => None,
            false => {
                let (dim, base, neox) = (cfg.rope_dim, cfg.rope_base, cfg.rope_neox);
                Some(Rope::new(dim, base, neox, cfg.rope_freqs.as_deref()))
            }
        };
        let rope_swa = cfg.swa.as_ref().map(|w| {
            let (dim, neox) = (cfg.rope_dim, cfg.rope_neox);
            Rope::new(dim, w.rope_base, neox, cfg.rope_freqs.as_deref())
        });
        let position_embd = match gpt2 {
            true => Some(Weight::load(
                f,
                "position_embd.weight",
                cfg.d_model,
                cfg.ctx_train,
            )?),
            false => None,
        };
        Ok(Self {
            blocks: (0..cfg.n_layer)
                .map(|i| Block::load(f, cfg, i))
                .collect::<Result<_, _>>()?,
            output_norm: NormW {
                w: load_exact(f, "output_norm.weight", &c)?,
                b: match gpt2 {
                    true => Some(load_exact(f, "output_norm.bias", &c)?),
                    false => None,
                },
            },
            position_embd,
            rope,
            rope_swa,
            token_embd,
            output,
        })
    }

    /// tokens (T), laid out as `spans` say -> s.x (T, C) of the final residual stream, each
    /// row with its adapters of `lora`.
    pub fn forward_hidden(
        &self,
        file: &[u8],
        cfg: &Config,
        s: &mut State,
        tokens: &[u32],
        spans: &mut [Span],
        lora: &RowLoras,
    ) {
        self.embed(file, cfg, s, tokens, spans);
        for (l, b) in self.blocks.iter().enumerate() {
            let local = cfg.swa.as_ref().is_some_and(|w| w.layers[l]);
            let rope = if local { &self.rope_swa } else { &self.rope };
            b.forward(file, cfg, rope.as_ref(), s, l, spans, lora);
        }
    }

    /// tokens (T) -> s.x (T, C): their rows of the embedding, dequantized, plus (GPT-2) the
    /// rows of their positions.
    fn embed(&self, file: &[u8], cfg: &Config, s: &mut State, tokens: &[u32], spans: &[Span]) {
        let c = cfg.d_model;
        let wte = self.token_embd.qmat(file);
        for (i, &id) in tokens.iter().enumerate() {
            wte.dequantize_row(id as usize, &mut s.x[i * c..(i + 1) * c]);
        }
        if let Some(k) = cfg.embd_scale {
            // Gemma: the embeddings enter scaled by sqrt(C)
            s.x[..tokens.len() * c].iter_mut().for_each(|v| *v *= k);
        }
        if let Some(wpe) = &self.position_embd {
            let wpe = wpe.qmat(file);
            let positions = spans.iter().flat_map(|sp| sp.pos0..sp.pos0 + sp.len);
            for (i, pos) in (0..tokens.len()).zip(positions) {
                wpe.dequantize_row(pos, &mut s.h[..c]);
                s.x[i * c..(i + 1) * c]
                    .iter_mut()
                    .zip(&s.h[..c])
                    .for_each(|(a, b)| *a += b);
            }
        }
    }

    /// The final norm (T, C) of s.x into s.h.
    pub fn final_norm(&self, cfg: &Config, s: &mut State, t: usize) {
        let c = cfg.d_model;
        self.output_norm
            .forward(&s.x[..t * c], cfg.norm_eps, &mut s.h[..t * c]);
    }
}
