//! The trainable transformer: embedding, blocks, final norm, head, fused cross-entropy.
//! A step is `zero_grad`, `forward_backward` (forward keeping activations, then backward
//! adding into `grads`), then the optimiser on `params` / `grads` (as llm.c's train loop).
//! Every buffer is allocated in `init` for `batch` sequences of `ctx` tokens; a step
//! allocates nothing. Results depend only on the inputs and the rayon thread count.
//! Letters: B sequences, T positions, N = B*T rows, C width, V vocabulary.

use super::block::{Block, BlockActs, Norm, Scratch};
use super::params::{Layout, ParamInfo};
use super::{ModelConfig, TrainArch, TrainError};
use std::ops::Range;
use tinynn::layers::cross_entropy::cross_entropy;
use tinynn::layers::embedding::Embedding;
use tinynn::layers::linear::Linear;
use tinynn::layers::rope::Rope;

pub struct TrainModel {
    pub cfg: ModelConfig,
    /// All parameters, laid out as `params_info` says.
    pub params: Vec<f32>,
    /// Their gradients, same layout; `forward_backward` adds into them.
    pub grads: Vec<f32>,
    layout: Layout,
    /// Most sequences one call takes.
    batch: usize,
    blocks: Vec<Block>,
    acts: Vec<BlockActs>,
    scratch: Scratch,
    final_norm: Norm,
    embedding: Embedding,
    head: Linear,
    rope: Rope,
    /// Final residual stream, its norm and saved statistics (N, C), (N).
    xf: Vec<f32>,
    hf: Vec<f32>,
    meanf: Vec<f32>,
    rstdf: Vec<f32>,
    /// Logits, then their gradient (N, V); per-row losses (N); last-position logits (V).
    logits: Vec<f32>,
    losses: Vec<f32>,
    last: Vec<f32>,
}

impl TrainModel {
    /// Fresh weights from a seed (GPT-2/nanoGPT init), activations for `batch` sequences of
    /// cfg.ctx tokens. Panics on a config `ModelConfig::validate` rejects (see `try_init`).
    pub fn init(cfg: ModelConfig, batch: usize, seed: u64) -> Self {
        match Self::try_init(cfg, batch, seed) {
            Ok(m) => m,
            Err(e) => panic!("{e}"),
        }
    }

    /// `init` that returns config errors.
    pub fn try_init(cfg: ModelConfig, batch: usize, seed: u64) -> Result<Self, TrainError> {
        cfg.validate()?;
        let params = Layout::new(&cfg).init(seed);
        Self::from_params(cfg, batch, params)
    }

    /// Same layout as init, with given params (e.g. resumed). Errors if params.len() is wrong.
    pub fn from_params(
        cfg: ModelConfig,
        batch: usize,
        params: Vec<f32>,
    ) -> Result<Self, TrainError> {
        cfg.validate()?;
        if batch == 0 || batch > 1 << 16 {
            return Err(TrainError::Config(format!(
                "batch {batch}, expected 1..=65536"
            )));
        }
        let layout = Layout::new(&cfg);
        if params.len() != layout.total {
            return Err(TrainError::ParamCount {
                got: params.len(),
                expected: layout.total,
            });
        }
        let (n, c, v) = (batch * cfg.ctx, cfg.d_model, cfg.vocab);
        let blocks: Vec<Block> = layout
            .blocks
            .iter()
            .enumerate()
            .map(|(l, r)| Block::new(&cfg, l, r.clone()))
            .collect();
        let acts = blocks.iter().map(|b| b.acts(batch, cfg.ctx)).collect();
        let scratch = blocks[0].scratch(n);
        Ok(Self {
            grads: vec![0.0; params.len()],
            params,
            batch,
            acts,
            scratch,
            final_norm: Norm::new(&cfg),
            embedding: Embedding::new(v, c),
            head: Linear::new(c, v),
            rope: Rope::new(cfg.head_dim(), cfg.ctx, cfg.rope_base),
            xf: vec![0.0; n * c],
            hf: vec![0.0; n * c],
            meanf: vec![0.0; n],
            rstdf: vec![0.0; n],
            logits: vec![0.0; n * v],
            losses: vec![0.0; n],
            last: vec![0.0; v],
            blocks,
            layout,
            cfg,
        })
    }

    /// Every parameter tensor: GGUF name, dims, range in params / grads, whether it decays.
    pub fn params_info(&self) -> &[ParamInfo] {
        &self.layout.infos
    }

    /// The ranges AdamW decays (matrices; not norms, biases or embeddings), in order.
    pub fn decay_ranges(&self) -> Vec<Range<usize>> {
        self.layout
            .infos
            .iter()
            .filter(|i| i.decay)
            .map(|i| i.range.clone())
            .collect()
    }

    /// Most sequences one call takes.
    pub fn batch(&self) -> usize {
        self.batch
    }

    pub fn zero_grad(&mut self) {
        self.grads.fill(0.0);
    }

    fn check_shape(&self, tokens: usize, b: usize, t: usize) {
        assert!(
            b >= 1 && b <= self.batch && t >= 1 && t <= self.cfg.ctx && tokens == b * t,
            "{tokens} tokens as {b} sequences of {t}: expected 1..={} sequences of 1..={} tokens",
            self.batch,
            self.cfg.ctx
        );
    }

    /// Embedding, blocks and final norm of inputs (B, T): fills the activations and hf.
    fn forward(&mut self, inputs: &[u32], b: usize, t: usize) {
        let n = b * t;
        let p = &self.params;
        let first = &mut self.acts[0].x;
        self.embedding.forward(
            inputs,
            &p[self.layout.token_embd.clone()],
            &mut first[..n * self.cfg.d_model],
        );
        if let Some(r) = &self.layout.position_embd {
            self.embedding
                .forward_positions(t, &p[r.clone()], &mut first[..n * self.cfg.d_model]);
        }
        for l in 0..self.blocks.len() {
            let (cur, rest) = self.acts.split_at_mut(l + 1);
            let out = match rest.first_mut() {
                Some(next) => &mut next.x,
                None => &mut self.xf,
            };
            self.blocks[l].forward(p, &mut cur[l], out, &self.rope, b, t);
        }
        let lay = &self.layout;
        let nb = lay.output_norm_b.as_ref().map(|r| &p[r.clone()]);
        self.final_norm.forward(
            &self.xf,
            &p[lay.output_norm.clone()],
            nb,
            1.0,
            &mut self.hf,
            &mut self.meanf,
            &mut self.rstdf,
            n,
        );
    }

    /// Logits (N, V) of hf, then per-row losses (and their gradient in place, scaled by
    /// `grad_scale`); returns the mean loss.
    fn head_loss(&mut self, targets: &[u32], n: usize, grad_scale: Option<f32>) -> f32 {
        let v = self.cfg.vocab;
        // (N, C) -> (N, V)
        self.head.forward(
            &self.hf,
            &self.params[self.layout.head.clone()],
            None,
            &mut self.logits,
            n,
            false,
        );
        cross_entropy(
            &mut self.logits,
            &targets[..n],
            &mut self.losses,
            v,
            grad_scale,
        );
        (self.losses[..n].iter().map(|l| *l as f64).sum::<f64>() / n as f64) as f32
    }

    /// inputs, targets: (B, T) row-major with B <= batch, T <= ctx. Forward + backward; ADDS
    /// into self.grads (gradient accumulation is calling this several times between
    /// zero_grad). Returns the mean loss; the gradient is that of the mean loss.
    pub fn forward_backward(&mut self, inputs: &[u32], targets: &[u32], b: usize, t: usize) -> f32 {
        self.forward_backward_scaled(inputs, targets, b, t, 1.0)
    }

    /// `forward_backward` with the gradient of `loss_scale` times the mean loss (e.g.
    /// 1 / micro-batches, to average over gradient accumulation).
    pub fn forward_backward_scaled(
        &mut self,
        inputs: &[u32],
        targets: &[u32],
        b: usize,
        t: usize,
        loss_scale: f32,
    ) -> f32 {
        self.check_shape(inputs.len(), b, t);
        self.check_shape(targets.len(), b, t);
        let (n, c) = (b * t, self.cfg.d_model);
        self.forward(inputs, b, t);
        let loss = self.head_loss(targets, n, Some(loss_scale / n as f32));

        let (p, g, lay) = (&self.params, &mut self.grads, &self.layout);
        let s = &mut self.scratch;
        // head: dW += dlogits^T hf, dhf = dlogits W
        self.head.backward(
            &self.logits,
            &self.hf,
            &p[lay.head.clone()],
            Some(&mut s.dh),
            false,
            &mut g[lay.head.clone()],
            None,
            n,
        );
        s.dx[..n * c].fill(0.0);
        let (dw, db) = match &lay.output_norm_b {
            None => (&mut g[lay.output_norm.clone()], None),
            Some(rb) => {
                let (lo, hi) = g.split_at_mut(rb.start);
                (&mut lo[lay.output_norm.clone()], Some(&mut hi[..rb.len()]))
            }
        };
        self.final_norm.backward(
            &s.dh,
            &self.xf,
            &p[lay.output_norm.clone()],
            1.0,
            &self.meanf,
            &self.rstdf,
            &mut s.dx,
            dw,
            db,
            n,
        );
        for (blk, a) in self.blocks.iter().zip(&self.acts).rev() {
            blk.backward(p, g, a, s, &self.rope, b, t);
        }
        self.embedding
            .backward(inputs, &s.dx[..n * c], &mut g[lay.token_embd.clone()]);
        if let Some(r) = &lay.position_embd {
            self.embedding
                .backward_positions(t, &s.dx[..n * c], &mut g[r.clone()]);
        }
        loss
    }

    /// Mean loss only (validation), grads untouched.
    pub fn forward_loss(&mut self, inputs: &[u32], targets: &[u32], b: usize, t: usize) -> f32 {
        self.check_shape(inputs.len(), b, t);
        self.check_shape(targets.len(), b, t);
        self.forward(inputs, b, t);
        self.head_loss(targets, b * t, None)
    }

    /// Logits (V) of the last position of one sequence `tokens` (len <= ctx), for sampling
    /// during training.
    pub fn logits_last(&mut self, tokens: &[u32]) -> &[f32] {
        let t = tokens.len();
        self.check_shape(t, 1, t);
        self.forward(tokens, 1, t);
        let c = self.cfg.d_model;
        let w = &self.params[self.layout.head.clone()];
        self.head.forward(
            &self.hf[(t - 1) * c..t * c],
            w,
            None,
            &mut self.last,
            1,
            false,
        );
        &self.last
    }

    /// Whether this is a gpt2 model (learned positions, biases).
    pub fn arch(&self) -> TrainArch {
        self.cfg.arch
    }
}
