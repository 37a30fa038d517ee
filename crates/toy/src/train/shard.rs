//! The network's fixed parts (`Net`: layer shapes, ranges into the flat params, RoPE tables)
//! and one `Shard` of a batch: the activations and gradient scratch for a slice of the
//! sequences, run forward and backward on its own. A model splits a batch over a fixed
//! number of shards that run in parallel (see `model.rs` for why and when).
//! Letters: B sequences, T positions, N = B*T rows, C width, V vocabulary.

use super::block::Norm;
use super::lin::FrozenMat;
use super::params::Layout;
use super::stack::{Stack, StackActs};
use super::ModelConfig;
use tinynn::layers::cross_entropy::{cross_entropy, cross_entropy_soft, IGNORE};
use tinynn::layers::embedding::Embedding;
use tinynn::layers::linear::Linear;
use tinynn::layers::rope::{Rope, RopeSpec};

/// Everything about the network that does not change during training, except the weights.
/// What the head's loss compares its logits with: a token per row (or IGNORE), or a
/// distribution per row (N, V).
#[derive(Clone, Copy)]
pub(crate) enum Targets<'a> {
    Tokens(&'a [u32]),
    Probs(&'a [f32]),
}

pub(crate) struct Net {
    pub layout: Layout,
    pub stack: Stack,
    pub final_norm: Norm,
    pub embedding: Embedding,
    pub head: Linear,
    pub rope: Rope,
    pub c: usize,
    pub v: usize,
    /// LoRA runs: the base's token embedding and head, frozen in their stored types (the
    /// layout's token_embd and head ranges are then empty).
    pub frozen_embd: Option<FrozenMat>,
    pub frozen_head: Option<FrozenMat>,
    /// The token embeddings enter scaled by this (Gemma: sqrt(C)).
    pub embd_scale: Option<f32>,
}

impl Net {
    pub fn new(cfg: &ModelConfig) -> Self {
        let layout = Layout::new(cfg);
        // a hybrid turns only the first rope_dim dims of each head
        let rope = RopeSpec {
            head_dim: cfg.head_dim,
            n_rot: cfg.rope_dim,
            neox: cfg.arch.rope_neox(),
            base: cfg.rope_base,
            freq_factors: cfg.rope_freqs.clone(),
        };
        Self {
            stack: Stack::new(cfg, &layout),
            layout,
            final_norm: Norm::new(cfg),
            embedding: Embedding::new(cfg.vocab, cfg.d_model),
            head: Linear::new(cfg.d_model, cfg.vocab),
            rope: Rope::with(&rope, cfg.ctx),
            c: cfg.d_model,
            v: cfg.vocab,
            frozen_embd: None,
            frozen_head: None,
            embd_scale: cfg.embd_scale,
        }
    }

    /// A LoRA run's network: `layout` from `Layout::new_lora`, every product, the embedding
    /// and the head frozen in the base `file`, the adapters scaled by `scale`.
    pub fn new_lora(
        cfg: &ModelConfig,
        layout: Layout,
        file: &std::sync::Arc<crate::gguf::GgufFile>,
        scale: f32,
    ) -> Result<Self, super::TrainError> {
        let mut net = Self::new(cfg);
        // one loader: every frozen matrix repacked into its one arena, as inference loads
        let f = crate::model::weights::Loader::new(file);
        for (l, blk) in net.stack.0.iter_mut().enumerate() {
            blk.r = layout.blocks[l].clone();
            let lora = &layout.lora[l];
            blk.freeze(super::base::frozen_lins(&f, file, cfg, l, lora, scale)?);
        }
        let (v, c) = (cfg.vocab, cfg.d_model);
        let embd = super::base::frozen_mat(&f, file, "token_embd.weight", v, c)?;
        net.frozen_head = Some(match cfg.is_tied() {
            true => embd.clone(),
            false => super::base::frozen_mat(&f, file, "output.weight", v, c)?,
        });
        net.frozen_embd = Some(embd);
        net.layout = layout;
        Ok(net)
    }

    /// logits (N, V) = h (N, C) times the head, frozen or from params.
    fn head_forward(&self, p: &[f32], h: &[f32], logits: &mut [f32], n: usize) {
        match &self.frozen_head {
            Some(m) => tinynn::kernels::qmatmul::matmul(
                &m.qmat(),
                &h[..n * self.c],
                n,
                &mut logits[..n * self.v],
            ),
            None => self
                .head
                .forward(h, &p[self.layout.head.clone()], None, logits, n, false),
        }
    }
}

/// Activations and scratch for up to `batch` sequences of `ctx` tokens.
pub(crate) struct Shard {
    /// The blocks' activations and backward scratch.
    stack: StackActs,
    /// Final residual stream, its norm and saved statistics (N, C), (N).
    xf: Vec<f32>,
    hf: Vec<f32>,
    meanf: Vec<f32>,
    rstdf: Vec<f32>,
    /// Logits, then their gradient (N, V); per-row losses (N); last-position logits (V).
    logits: Vec<f32>,
    losses: Vec<f32>,
    pub last: Vec<f32>,
    /// The rows the last `head_loss` ran the head on.
    rows: HeadRows,
}

/// Where the last `head_loss` ran the head on the rows with a target only (`live`, their hf
/// rows gathered into `hc` (L, C), targets `yc`): rows without loss need no logits, and an
/// SFT batch's loss is on a fraction of its rows. `dhc` (L, C) is their gradient before it
/// goes back to its rows.
#[derive(Default)]
struct HeadRows {
    compact: bool,
    live: Vec<usize>,
    hc: Vec<f32>,
    yc: Vec<u32>,
    dhc: Vec<f32>,
}

impl Shard {
    pub fn new(net: &Net, batch: usize, ctx: usize) -> Self {
        let (n, c, v) = (batch * ctx, net.c, net.v);
        Self {
            stack: net.stack.acts(batch, ctx),
            xf: vec![0.0; n * c],
            hf: vec![0.0; n * c],
            meanf: vec![0.0; n],
            rstdf: vec![0.0; n],
            logits: vec![0.0; n * v],
            losses: vec![0.0; n],
            last: vec![0.0; v],
            rows: HeadRows::default(),
        }
    }

    /// The adapters' dropout of the next pass, for rows from global row `row0`.
    pub fn set_dropout(&mut self, drop: Option<tinynn::layers::dropout::Dropout>, row0: usize) {
        self.stack.set_dropout(drop, row0);
    }

    /// Embedding, blocks and final norm of inputs (B, T): fills the activations and hf.
    /// `pos` (B*T): each row's position in its packed sample (see `TrainModel::packed`).
    pub fn forward(
        &mut self,
        net: &Net,
        p: &[f32],
        inputs: &[u32],
        pos: Option<&[u32]>,
        b: usize,
        t: usize,
    ) {
        let (n, c) = (b * t, net.c);
        let first = &mut self.stack.input()[..n * c];
        match &net.frozen_embd {
            Some(m) => {
                let q = m.qmat();
                for (row, &tok) in first.chunks_exact_mut(c).zip(inputs) {
                    q.dequantize_row(tok as usize, row);
                }
            }
            None => net
                .embedding
                .forward(inputs, &p[net.layout.token_embd.clone()], first),
        }
        if let Some(k) = net.embd_scale {
            first.iter_mut().for_each(|v| *v *= k);
        }
        if let Some(r) = &net.layout.position_embd {
            net.embedding.forward_positions(t, &p[r.clone()], first);
        }
        self.stack
            .forward(&net.stack, p, &mut self.xf, net.rope.at(pos), b, t);
        let lay = &net.layout;
        let nb = lay.output_norm_b.as_ref().map(|r| &p[r.clone()]);
        net.final_norm.forward(
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

    /// Logits (N, V) of hf, then per-row cross-entropies against `targets` (and their gradient in place, times
    /// `grad_scale`); returns the sum of the N losses.
    pub fn head_loss(
        &mut self,
        net: &Net,
        p: &[f32],
        targets: Targets,
        n: usize,
        grad_scale: Option<f32>,
    ) -> f64 {
        let (c, v) = (net.c, net.v);
        let hr = &mut self.rows;
        hr.compact = matches!(targets, Targets::Tokens(t) if t[..n].contains(&IGNORE));
        if let (true, Targets::Tokens(t)) = (hr.compact, targets) {
            // (N, C) -> (L, C) -> (L, V): the rows with a target only
            hr.live.clear();
            hr.live.extend((0..n).filter(|&i| t[i] != IGNORE));
            let nl = hr.live.len();
            hr.hc.resize(nl * c, 0.0);
            hr.yc.clear();
            for (dst, &i) in hr.hc.chunks_exact_mut(c).zip(&hr.live) {
                dst.copy_from_slice(&self.hf[i * c..(i + 1) * c]);
                hr.yc.push(t[i]);
            }
            if nl > 0 {
                net.head_forward(p, &hr.hc, &mut self.logits, nl);
                let l = &mut self.losses[..nl];
                cross_entropy(&mut self.logits, &hr.yc, l, v, grad_scale);
            }
            // the rows left out have loss 0: the sum is the same, in the same order
            return self.losses[..nl].iter().map(|l| *l as f64).sum();
        }
        // (N, C) -> (N, V)
        net.head_forward(p, &self.hf, &mut self.logits, n);
        let (z, l) = (&mut self.logits, &mut self.losses);
        match targets {
            Targets::Tokens(t) => cross_entropy(z, &t[..n], l, v, grad_scale),
            Targets::Probs(q) => cross_entropy_soft(z, &q[..n * v], l, v, grad_scale),
        }
        self.losses[..n].iter().map(|l| *l as f64).sum()
    }
}

impl HeadRows {
    /// The head's backward from dlogits (in `logits`): dhf (N, C) into dh, the head's weight
    /// gradient into g.
    #[allow(clippy::too_many_arguments)]
    fn backward(
        &mut self,
        net: &Net,
        p: &[f32],
        g: &mut [f32],
        logits: &[f32],
        hf: &[f32],
        dh: &mut [f32],
        n: usize,
    ) {
        let (c, lay) = (net.c, &net.layout);
        let (rows, h, d) = if self.compact {
            let nl = self.live.len();
            self.dhc.resize(nl * c, 0.0);
            (nl, &self.hc[..], &mut self.dhc[..])
        } else {
            (n, &hf[..n * c], &mut dh[..n * c])
        };
        if rows > 0 {
            // dW += dlogits^T h, dh = dlogits W
            match &net.frozen_head {
                Some(m) => tinynn::kernels::qmatmul_t::matmul_t(&m.qmat(), logits, rows, d, false),
                None => net.head.backward(
                    logits,
                    h,
                    &p[lay.head.clone()],
                    Some(d),
                    false,
                    &mut g[lay.head.clone()],
                    None,
                    rows,
                ),
            }
        }
        if self.compact {
            dh[..n * c].fill(0.0);
            for (src, &i) in self.dhc.chunks_exact(c).zip(&self.live) {
                dh[i * c..(i + 1) * c].copy_from_slice(src);
            }
        }
    }
}

impl Shard {
    /// After `forward` and `head_loss` with a gradient: the backward, adding into g.
    #[allow(clippy::too_many_arguments)]
    pub fn backward(
        &mut self,
        net: &Net,
        p: &[f32],
        g: &mut [f32],
        inputs: &[u32],
        pos: Option<&[u32]>,
        b: usize,
        t: usize,
    ) {
        let (n, c, lay) = (b * t, net.c, &net.layout);
        let (dx, dh) = self.stack.dx_dh();
        dx[..n * c].fill(0.0);
        // head: dW += dlogits^T hf, dhf = dlogits W (on the rows with a target, see HeadRows)
        self.rows.backward(net, p, g, &self.logits, &self.hf, dh, n);
        let (dw, db) = match &lay.output_norm_b {
            None => (&mut g[lay.output_norm.clone()], None),
            Some(rb) => {
                let (lo, hi) = g.split_at_mut(rb.start);
                (&mut lo[lay.output_norm.clone()], Some(&mut hi[..rb.len()]))
            }
        };
        net.final_norm.backward(
            dh,
            &self.xf,
            &p[lay.output_norm.clone()],
            1.0,
            &self.meanf,
            &self.rstdf,
            dx,
            dw,
            db,
            n,
        );
        self.stack
            .backward(&net.stack, p, g, net.rope.at(pos), b, t);
        let (dx, _) = self.stack.dx_dh();
        if let Some(r) = &lay.position_embd {
            net.embedding
                .backward_positions(t, &dx[..n * c], &mut g[r.clone()]);
        }
        if net.frozen_embd.is_none() {
            if let Some(k) = net.embd_scale {
                // through the scale the token embeddings entered with (the last use of dx)
                dx[..n * c].iter_mut().for_each(|v| *v *= k);
            }
            net.embedding
                .backward(inputs, &dx[..n * c], &mut g[lay.token_embd.clone()]);
        }
    }

    /// Logits (V) of the last row of the last forward (of `t` rows), into `self.last`.
    pub fn logits_last(&mut self, net: &Net, p: &[f32], t: usize) -> &[f32] {
        let c = net.c;
        net.head_forward(p, &self.hf[(t - 1) * c..t * c], &mut self.last, 1);
        &self.last
    }
}
