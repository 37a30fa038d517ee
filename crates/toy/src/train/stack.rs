//! The stack of blocks between the embedding and the final norm, of one of two kinds: the
//! Llama / GPT-2 blocks (`block`) or the qwen35 hybrid blocks (`hybrid`), with the
//! activations and backward scratch of one shard. Block l's output is block l+1's input;
//! the last block writes the final residual stream.
//! Letters: B sequences, T positions, N = B*T rows, C width.

use super::block::{Block, BlockActs, Scratch};
use super::hybrid::{HybridActs, HybridBlock, HybridScratch};
use super::params::Layout;
use super::ModelConfig;
use tinynn::layers::dropout::Dropout;
use tinynn::layers::rope::RopeAt;

pub(crate) enum Stack {
    Std(Vec<Block>),
    Hybrid(Vec<HybridBlock>),
}

/// One shard's activations of every block, and the scratch the blocks share.
pub(crate) enum StackActs {
    Std(Vec<BlockActs>, Scratch),
    /// (boxed: the hybrid scratch is several times the size of the other)
    Hybrid(Vec<HybridActs>, Box<HybridScratch>),
}

impl Stack {
    pub fn new(cfg: &ModelConfig, layout: &Layout) -> Self {
        if cfg.hybrid.is_some() {
            let blocks = layout.hybrid.iter().enumerate();
            Stack::Hybrid(
                blocks
                    .map(|(l, r)| HybridBlock::new(cfg, l, r.clone()))
                    .collect(),
            )
        } else {
            let blocks = layout.blocks.iter().enumerate();
            Stack::Std(blocks.map(|(l, r)| Block::new(cfg, l, r.clone())).collect())
        }
    }

    /// Activations for `batch` sequences of `ctx` tokens.
    pub fn acts(&self, batch: usize, ctx: usize) -> StackActs {
        let n = batch * ctx;
        match self {
            Stack::Std(bs) => StackActs::Std(
                bs.iter().map(|b| b.acts(batch, ctx)).collect(),
                bs[0].scratch(n),
            ),
            Stack::Hybrid(bs) => StackActs::Hybrid(
                bs.iter().map(|b| b.acts(batch)).collect(),
                Box::new(HybridBlock::scratch(bs, n)),
            ),
        }
    }
}

impl StackActs {
    /// The first block's input (N, C), for the embedding to write.
    pub fn input(&mut self) -> &mut [f32] {
        match self {
            StackActs::Std(a, _) => &mut a[0].x,
            StackActs::Hybrid(a, _) => &mut a[0].x,
        }
    }

    /// The gradient of the stream (dx) and of a normalised input (dh), both (N, C).
    pub fn dx_dh(&mut self) -> (&mut [f32], &mut [f32]) {
        match self {
            StackActs::Std(_, s) => (&mut s.dx, &mut s.dh),
            StackActs::Hybrid(_, s) => (&mut s.dx, &mut s.dh),
        }
    }

    /// The adapters' dropout for the next forward and backward of rows from global row
    /// `row0`: block l gets `drop.part(l)`. Hybrid stacks take no adapters.
    pub fn set_dropout(&mut self, drop: Option<Dropout>, row0: usize) {
        if let StackActs::Std(acts, _) = self {
            for (l, a) in acts.iter_mut().enumerate() {
                a.drop = drop.map(|d| d.part(l as u64).from_row(row0));
            }
        }
    }

    /// Every block forward from `input()`; the last writes xf (N, C).
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &mut self,
        stack: &Stack,
        p: &[f32],
        xf: &mut [f32],
        rope: RopeAt,
        b: usize,
        t: usize,
    ) {
        match (stack, self) {
            (Stack::Std(bs), StackActs::Std(acts, _)) => {
                for (l, blk) in bs.iter().enumerate() {
                    let (cur, rest) = acts.split_at_mut(l + 1);
                    let out = rest.first_mut().map_or(&mut *xf, |next| &mut next.x);
                    blk.forward(p, &mut cur[l], out, rope, b, t);
                }
            }
            (Stack::Hybrid(bs), StackActs::Hybrid(acts, _)) => {
                for (l, blk) in bs.iter().enumerate() {
                    let (cur, rest) = acts.split_at_mut(l + 1);
                    let out = rest.first_mut().map_or(&mut *xf, |next| &mut next.x);
                    blk.forward(p, &mut cur[l], out, rope, b, t);
                }
            }
            _ => unreachable!("a shard's activations are made by its net's stack"),
        }
    }

    /// From dx (the final stream's gradient) to the first block input's, in dx.
    pub fn backward(
        &mut self,
        stack: &Stack,
        p: &[f32],
        g: &mut [f32],
        rope: RopeAt,
        b: usize,
        t: usize,
    ) {
        match (stack, self) {
            (Stack::Std(bs), StackActs::Std(acts, s)) => {
                for (blk, a) in bs.iter().zip(acts.iter()).rev() {
                    blk.backward(p, g, a, s, rope, b, t);
                }
            }
            (Stack::Hybrid(bs), StackActs::Hybrid(acts, s)) => {
                for (blk, a) in bs.iter().zip(acts.iter_mut()).rev() {
                    blk.backward(p, g, a, s, rope, b, t);
                }
            }
            _ => unreachable!("a shard's activations are made by its net's stack"),
        }
    }
}
