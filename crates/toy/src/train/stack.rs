//! The stack of blocks between the embedding and the final norm (`block`: every family's,
//! each running its op list), with the activations and backward scratch of one shard.
//! Block l's output is block l+1's input; the last block writes the final residual stream.
//! Letters: B sequences, T positions, N = B*T rows, C width.

use super::block::{Block, BlockActs, Scratch};
use super::params::Layout;
use super::ModelConfig;
use tinynn::layers::dropout::Dropout;
use tinynn::layers::rope::RopeAt;

pub(crate) struct Stack(pub Vec<Block>);

/// One shard's activations of every block, and the scratch the blocks share (boxed: a
/// hybrid's is large).
pub(crate) struct StackActs(Vec<BlockActs>, Box<Scratch>);

impl Stack {
    pub fn new(cfg: &ModelConfig, layout: &Layout) -> Self {
        let blocks = layout.blocks.iter().enumerate();
        Stack(blocks.map(|(l, r)| Block::new(cfg, l, r.clone())).collect())
    }

    /// Activations for `batch` sequences of `ctx` tokens (the blocks' context).
    pub fn acts(&self, batch: usize, ctx: usize) -> StackActs {
        let acts = self.0.iter().map(|b| b.acts(batch)).collect();
        StackActs(acts, Box::new(Block::scratch(&self.0, batch * ctx)))
    }
}

impl StackActs {
    /// The first block's input (N, C), for the embedding to write.
    pub fn input(&mut self) -> &mut [f32] {
        &mut self.0[0].x
    }

    /// The gradient of the stream (dx) and of a normalised input (dh), both (N, C).
    pub fn dx_dh(&mut self) -> (&mut [f32], &mut [f32]) {
        (&mut self.1.dx, &mut self.1.dh)
    }

    /// The adapters' dropout for the next forward and backward of rows from global row
    /// `row0`: block l gets `drop.part(l)`.
    pub fn set_dropout(&mut self, drop: Option<Dropout>, row0: usize) {
        for (l, a) in self.0.iter_mut().enumerate() {
            a.drop = drop.map(|d| d.part(l as u64).from_row(row0));
        }
    }

    /// Every block forward from `input()`; the last writes xf (N, C).
    pub fn forward(
        &mut self,
        stack: &Stack,
        p: &[f32],
        xf: &mut [f32],
        rope: RopeAt,
        b: usize,
        t: usize,
    ) {
        for (l, blk) in stack.0.iter().enumerate() {
            let (cur, rest) = self.0.split_at_mut(l + 1);
            let out = rest.first_mut().map_or(&mut *xf, |next| &mut next.x);
            blk.forward(p, &mut cur[l], out, rope, b, t);
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
        let s = &mut self.1;
        for (blk, a) in stack.0.iter().zip(self.0.iter_mut()).rev() {
            blk.backward(p, g, a, s, rope, b, t);
        }
    }
}
