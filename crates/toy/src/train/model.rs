//! The trainable transformer: embedding, blocks, final norm, head, fused cross-entropy.
//! A step is `zero_grad`, `forward_backward` (forward keeping activations, then backward
//! adding into `grads`), then the optimiser on `params` / `grads` (as llm.c's train loop).
//! Every buffer is allocated in `init` for `batch` sequences of `ctx` tokens; a step
//! allocates nothing. Results depend only on the inputs (not on the thread count).
//! Letters: B sequences, T positions, N = B*T rows, C width, V vocabulary.

use super::params::{Layout, LoraRanges, ParamInfo};
use super::shard::{Net, Shard, Targets};
use super::{Arch, ModelConfig, TrainError};
use crate::gguf::GgufFile;
use crate::ranks::Ranks;
use std::ops::Range;
use std::sync::Arc;
use tinynn::layers::cross_entropy::IGNORE;
use tinynn::layers::dropout::Dropout;
use tinynn::layers::serial;

/// A batch of two or more sequences is split in two shards that run forward and backward at
/// the same time, each on its own thread with its own gradient buffer, summed after: one
/// join per step instead of a fork/join per layer, and on a busy machine a descheduled thread
/// delays one join, not every layer. On a pool of two threads the products inside a shard
/// run on one thread, whose kernels are at full speed from a few hundred rows; on a bigger
/// pool each shard's layers split their work among all threads as well (a shard per thread
/// left 14 of 16 threads idle: 0.28x PyTorch's training rate there). The second gradient buffer costs one
/// copy of the parameters, so models over `SHARD_MAX_PARAMS` run one shard and parallelise
/// inside each product instead. The choice depends on the shapes only, never on the thread
/// count, and the `gemm` crate splits no sums among threads, so results are the same bits
/// on any number of threads.
const SHARD_MAX_PARAMS: usize = 1 << 25;

/// A LoRA run's adapters: which parts, their rank and scale (alpha / r, or alpha / sqrt(r)
/// for rsLoRA), and the seed A starts from.
#[derive(Clone, Debug, PartialEq)]
pub struct LoraSpec {
    pub targets: Vec<String>,
    pub rank: usize,
    pub scale: f32,
    pub seed: u64,
    /// Train with inference's rounding (`ModelConfig::inference_rounding`).
    pub inference_rounding: bool,
}

pub struct TrainModel {
    pub cfg: ModelConfig,
    /// All parameters, laid out as `params_info` says.
    pub params: Vec<f32>,
    /// Their gradients, same layout; `forward_backward` adds into them.
    pub grads: Vec<f32>,
    net: Net,
    /// Most sequences one call takes.
    batch: usize,
    /// Sequences per shard, and the shards (one or two).
    shard_batch: usize,
    shards: Vec<Shard>,
    /// The second shard's gradients (empty with one shard).
    grads2: Vec<f32>,
    /// The adapters' input dropout of the next `forward_backward` (see [`Self::set_dropout`]).
    dropout: Option<Dropout>,
    /// Data-parallel ranks: this process runs its rows of each batch (`Ranks::rows`).
    ranks: Ranks,
    /// Whether the shards' (and ranks') gradients are summed by [`Self::finish_grads`] only.
    defer: bool,
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
        let params = super::params::Layout::new(&cfg).init(seed);
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
        let net = Net::new(&cfg);
        Self::with_net(cfg, batch, net, params)
    }

    /// A full fine-tune's model: the shape and every weight of the llama-family or qwen35
    /// base in `file`, dequantized to f32, for `batch` sequences of `ctx` tokens.
    pub fn from_base(file: &GgufFile, ctx: usize, batch: usize) -> Result<Self, TrainError> {
        Self::from_base_as(file, super::base::config_from_gguf(file, ctx)?, batch)
    }

    /// [`Self::from_base`] with a config the caller read from the base (`train::base_config`)
    /// and adjusted, e.g. `inference_rounding` on.
    pub fn from_base_as(
        file: &GgufFile,
        cfg: ModelConfig,
        batch: usize,
    ) -> Result<Self, TrainError> {
        let layout = Layout::new(&cfg);
        let mut params = vec![0f32; layout.total];
        super::base::import(file, &layout, &mut params)?;
        Self::from_params(cfg, batch, params)
    }

    /// A LoRA run's model on the base in `file`, which stays as stored: adapters of `rank` on
    /// the parts `targets` names (`attn_q` ... `ffn_down`), scaled by `scale`, started from
    /// `seed` (A Kaiming-uniform, B zero), or holding `params` when resuming.
    pub fn lora_on_base(
        file: &Arc<GgufFile>,
        ctx: usize,
        batch: usize,
        lora: &LoraSpec,
        params: Option<Vec<f32>>,
    ) -> Result<Self, TrainError> {
        let mut cfg = super::base::config_from_gguf(file, ctx)?;
        cfg.inference_rounding = lora.inference_rounding;
        cfg.validate()?;
        if lora.rank == 0 || lora.rank > cfg.d_model {
            return Err(TrainError::Config(format!(
                "LoRA rank {}, expected 1..={}",
                lora.rank, cfg.d_model
            )));
        }
        let known = crate::model::tensors::part_names(cfg.arch);
        if let Some(t) = lora
            .targets
            .iter()
            .find(|t| *t != "all-linear" && !known.contains(&t.as_str()))
        {
            return Err(TrainError::Base(format!(
                "LoRA target {t:?}: a {} base has no such part; expected some of {known:?}",
                cfg.arch.name()
            )));
        }
        let layout = Layout::new_lora(&cfg, &lora.targets, lora.rank);
        let params = match params {
            Some(p) => p,
            None => {
                let mut p = layout.init(lora.seed);
                super::base::import(file, &layout, &mut p)?;
                p
            }
        };
        let net = Net::new_lora(&cfg, layout, file, lora.scale)?;
        Self::with_net(cfg, batch, net, params)
    }

    /// The ranges of params the optimiser must leave alone: a LoRA run's norms (empty
    /// otherwise). The trainer zeroes their gradients, so AdamW (no decay on norms) keeps them.
    pub fn frozen_ranges(&self) -> Vec<Range<usize>> {
        if self.net.frozen_head.is_none() {
            return Vec::new();
        }
        let trained: Vec<&Range<usize>> = self.adapters().flat_map(|a| [&a.a, &a.b]).collect();
        let infos = &self.net.layout.infos;
        infos
            .iter()
            .filter(|i| !trained.contains(&&i.range))
            .map(|i| i.range.clone())
            .collect()
    }

    /// A LoRA run's adapters, block by block: base tensor name and the ranges of A and B.
    pub(crate) fn adapters(&self) -> impl Iterator<Item = &LoraRanges> {
        self.net.layout.lora.iter().flatten()
    }

    fn with_net(
        cfg: ModelConfig,
        batch: usize,
        net: Net,
        params: Vec<f32>,
    ) -> Result<Self, TrainError> {
        if params.len() != net.layout.total {
            return Err(TrainError::ParamCount {
                got: params.len(),
                expected: net.layout.total,
            });
        }
        let n_shards = if batch >= 2 && params.len() <= SHARD_MAX_PARAMS {
            2
        } else {
            1
        };
        let shard_batch = batch.div_ceil(n_shards);
        let shards = (0..n_shards)
            .map(|_| Shard::new(&net, shard_batch, cfg.ctx))
            .collect();
        Ok(Self {
            grads: vec![0.0; params.len()],
            grads2: if n_shards == 2 {
                vec![0.0; params.len()]
            } else {
                Vec::new()
            },
            params,
            net,
            batch,
            shard_batch,
            shards,
            cfg,
            dropout: None,
            ranks: Ranks::default(),
            defer: false,
        })
    }

    /// Runs this rank's rows of every batch from now on (with more than one rank): one shard
    /// of up to the whole batch (two ranks then run the rows one process's two shards run),
    /// the loss summed over the ranks at each call, the gradients by [`Self::finish_grads`].
    pub fn set_ranks(&mut self, ranks: Ranks) {
        if ranks.parallel() {
            self.shards = vec![Shard::new(&self.net, self.batch, self.cfg.ctx)];
            self.shard_batch = self.batch;
            self.grads2 = Vec::new();
            self.defer = true;
        }
        self.ranks = ranks;
    }

    /// Keeps each shard's gradient apart across the calls of a step, summed once by
    /// [`Self::finish_grads`]: a step then adds the same partial gradients in the same order
    /// on one process as on two ranks (each shard's micro-batches, then shard 0 + shard 1).
    pub fn defer_grad_sum(&mut self) {
        self.defer = true;
    }

    /// After a step's `forward_backward` calls: the shards' gradients summed into `grads`,
    /// then the ranks' (in rank order). A no-op unless deferred.
    pub fn finish_grads(&mut self) {
        if !self.defer {
            return;
        }
        if !self.grads2.is_empty() {
            add_and_clear(&mut self.grads, &mut self.grads2);
        }
        self.ranks.sum_f32(&mut self.grads);
    }

    /// Dropout on the LoRA adapters' inputs for the following `forward_backward` calls
    /// (never for `forward_loss`): give each step its own key for a fresh mask.
    pub fn set_dropout(&mut self, drop: Option<Dropout>) {
        self.dropout = drop;
    }

    /// Every parameter tensor: GGUF name, dims, range in params / grads, whether it decays.
    pub fn params_info(&self) -> &[ParamInfo] {
        &self.net.layout.infos
    }

    /// The ranges AdamW decays (matrices; not norms, biases or embeddings), in order.
    pub fn decay_ranges(&self) -> Vec<Range<usize>> {
        self.net
            .layout
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

    /// How many parts a batch's rows split over: the shards (side by side, each on one
    /// thread), or the ranks, each of which runs one part.
    pub fn n_shards(&self) -> usize {
        match self.ranks.parallel() {
            true => self.ranks.size(),
            false => self.shards.len(),
        }
    }

    pub fn zero_grad(&mut self) {
        self.grads.fill(0.0);
    }

    /// Checks a batch before `forward_backward` / `forward_loss` (which panic on what this
    /// rejects): B <= batch sequences of T <= ctx tokens, every token inside the vocabulary.
    pub fn check_batch(
        &self,
        inputs: &[u32],
        targets: &[u32],
        b: usize,
        t: usize,
    ) -> Result<(), TrainError> {
        let (bmax, ctx, v) = (self.batch, self.cfg.ctx, self.cfg.vocab);
        if b == 0 || b > bmax || t == 0 || t > ctx {
            return Err(TrainError::Batch(format!(
                "{b} sequences of {t} tokens, expected 1..={bmax} of 1..={ctx}"
            )));
        }
        for (what, toks) in [("inputs", inputs), ("targets", targets)] {
            if toks.len() != b * t {
                return Err(TrainError::Batch(format!(
                    "{} {what} for {b} sequences of {t}",
                    toks.len()
                )));
            }
            let ignored = |id: u32| what == "targets" && id == IGNORE;
            if let Some(bad) = toks.iter().find(|&&id| id as usize >= v && !ignored(id)) {
                return Err(TrainError::Batch(format!(
                    "token {bad} in {what} is outside the vocabulary of {v}"
                )));
            }
        }
        Ok(())
    }

    fn check_shape(&self, tokens: usize, b: usize, t: usize) {
        assert!(
            b >= 1 && b <= self.batch && t >= 1 && t <= self.cfg.ctx && tokens == b * t,
            "{tokens} tokens as {b} sequences of {t}: expected 1..={} sequences of 1..={} tokens",
            self.batch,
            self.cfg.ctx
        );
    }

    /// Forward (and with `grad_scale`, backward into the grads) of inputs (B, T) over the
    /// shards; returns the sum of the row losses.
    fn run(
        &mut self,
        inputs: &[u32],
        targets: Targets,
        pos: Option<&[u32]>,
        (b, t): (usize, usize),
        grad_scale: Option<f32>,
    ) -> f64 {
        let (p, net) = (&self.params, &self.net);
        let drop = self.dropout.filter(|_| grad_scale.is_some());
        let grad = grad_scale.is_some();
        // one shard on rows r of the batch
        let one = |sh: &mut Shard, g: Option<&mut [f32]>, r: Range<usize>| -> f64 {
            sh.set_dropout(drop, r.start);
            let x = &inputs[r.clone()];
            let y = match targets {
                Targets::Tokens(y) => Targets::Tokens(&y[r.clone()]),
                Targets::Probs(q) => Targets::Probs(&q[r.start * net.v..r.end * net.v]),
            };
            let pos = pos.map(|q| &q[r.clone()]);
            let b = r.len() / t;
            sh.forward(net, p, x, pos, b, t);
            let loss = sh.head_loss(net, p, y, b * t, grad_scale);
            if let Some(g) = g {
                sh.backward(net, p, g, x, pos, b, t);
            }
            loss
        };
        if self.ranks.parallel() {
            // this rank's rows, then the loss of all of them (in rank order)
            let r = self.ranks.rows(b);
            let g = grad.then_some(&mut self.grads[..]);
            let mine = match r.is_empty() {
                true => 0.0,
                false => one(&mut self.shards[0], g, r.start * t..r.end * t),
            };
            return self.ranks.sum_f64(mine);
        }
        // the rows split evenly: a short batch (a repacked one) still runs on both shards
        let b0 = b.div_ceil(self.shards.len()).min(self.shard_batch);
        let (first, rest) = self.shards.split_at_mut(1);
        match rest.first_mut() {
            Some(second) if b > b0 => {
                let n0 = b0 * t;
                // grads2 is all zeros between calls: the sum below clears what it reads
                let mut g1 = grad.then_some(&mut self.grads[..]);
                let mut g2 = grad.then_some(&mut self.grads2[..]);
                // each shard on one thread where the pool has no more threads than shards;
                // on a bigger one the shards' layers split their work among the threads too
                // (the same bits: `serial` changes only the scheduling)
                let alone = rayon::current_num_threads() <= 2;
                let run = |f: &mut dyn FnMut() -> f64| if alone { serial(f) } else { f() };
                let (l0, l1) = rayon::join(
                    || run(&mut || one(&mut first[0], g1.take(), 0..n0)),
                    || run(&mut || one(second, g2.take(), n0..b * t)),
                );
                if grad && !self.defer {
                    add_and_clear(&mut self.grads, &mut self.grads2);
                }
                l0 + l1
            }
            _ => one(&mut first[0], grad.then_some(&mut self.grads[..]), 0..b * t),
        }
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
        let n = trained(targets);
        (self.run(
            inputs,
            Targets::Tokens(targets),
            None,
            (b, t),
            Some(loss_scale / n as f32),
        ) / n as f64) as f32
    }

    /// Whether rows may pack several samples ([`Self::forward_backward_packed`]): the
    /// Llama family, whose positions are rotary; not GPT-2's learned positions nor the
    /// hybrids' recurrent state, which would run across a sample's end.
    pub fn check_packing(&self) -> Result<(), TrainError> {
        if !self.cfg.arch.is_gpt2() && self.cfg.gdn.is_none() {
            Ok(())
        } else {
            Err(TrainError::Batch(format!(
                "packing several samples into a row needs a Llama-family model, not {:?}",
                self.cfg.arch
            )))
        }
    }

    /// [`Self::forward_backward_scaled`] of packed rows: `pos` (B, T) is each row's
    /// position inside its sample, 0 where a sample starts. Attention stays inside each
    /// sample and positions count from its start, so every sample is trained as if alone.
    /// Panics where [`Self::check_packing`] fails.
    pub fn forward_backward_packed(
        &mut self,
        inputs: &[u32],
        targets: &[u32],
        pos: &[u32],
        (b, t): (usize, usize),
        loss_scale: f32,
    ) -> f32 {
        self.check_shape(inputs.len(), b, t);
        self.check_shape(targets.len(), b, t);
        self.check_shape(pos.len(), b, t);
        self.check_packing().expect("packed rows");
        let n = trained(targets);
        let g = Some(loss_scale / n as f32);
        (self.run(inputs, Targets::Tokens(targets), Some(pos), (b, t), g) / n as f64) as f32
    }

    /// Forward + backward against a distribution per position, `probs` (B*T, V): returns the
    /// mean cross-entropy H(p, q) and adds the gradient of `loss_scale` times it into the
    /// grads (KL(p‖q) has the same gradient: it differs by H(p), a constant).
    pub fn forward_backward_soft(
        &mut self,
        inputs: &[u32],
        probs: &[f32],
        (b, t): (usize, usize),
        loss_scale: f32,
    ) -> f32 {
        self.check_shape(inputs.len(), b, t);
        assert_eq!(
            probs.len(),
            b * t * self.cfg.vocab,
            "probs must be (B*T, V)"
        );
        let n = (b * t) as f32;
        let g = Some(loss_scale / n);
        (self.run(inputs, Targets::Probs(probs), None, (b, t), g) / n as f64) as f32
    }

    /// Mean loss only (validation), grads untouched.
    pub fn forward_loss(&mut self, inputs: &[u32], targets: &[u32], b: usize, t: usize) -> f32 {
        self.check_shape(inputs.len(), b, t);
        self.check_shape(targets.len(), b, t);
        (self.run(inputs, Targets::Tokens(targets), None, (b, t), None) / trained(targets) as f64)
            as f32
    }

    /// [`Self::forward_loss`] of packed rows (`pos` as in [`Self::forward_backward_packed`]).
    pub fn forward_loss_packed(
        &mut self,
        inputs: &[u32],
        targets: &[u32],
        pos: &[u32],
        (b, t): (usize, usize),
    ) -> f32 {
        self.check_shape(inputs.len(), b, t);
        self.check_shape(targets.len(), b, t);
        self.check_shape(pos.len(), b, t);
        self.check_packing().expect("packed rows");
        let tokens = Targets::Tokens(targets);
        (self.run(inputs, tokens, Some(pos), (b, t), None) / trained(targets) as f64) as f32
    }

    /// Logits (V) of the last position of one sequence `tokens` (len <= ctx), for sampling
    /// during training.
    pub fn logits_last(&mut self, tokens: &[u32]) -> &[f32] {
        let t = tokens.len();
        self.check_shape(t, 1, t);
        let sh = &mut self.shards[0];
        sh.forward(&self.net, &self.params, tokens, None, 1, t);
        sh.logits_last(&self.net, &self.params, t)
    }

    /// The model family.
    pub fn arch(&self) -> Arch {
        self.cfg.arch
    }
}

/// The targets that carry loss (not `IGNORE`), at least 1: the mean loss's denominator.
fn trained(targets: &[u32]) -> usize {
    targets.iter().filter(|&&t| t != IGNORE).count().max(1)
}

/// `a += b; b = 0`, in parallel chunks (a second shard's gradient into the first's).
pub(crate) fn add_and_clear(a: &mut [f32], b: &mut [f32]) {
    use rayon::prelude::*;
    const CHUNK: usize = 1 << 15;
    a.par_chunks_mut(CHUNK)
        .zip(b.par_chunks_mut(CHUNK))
        .for_each(|(a, b)| {
            for (x, y) in a.iter_mut().zip(b.iter_mut()) {
                *x += *y;
                *y = 0.0;
            }
        });
}
