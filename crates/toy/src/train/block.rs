//! One block of every family in training, forward and backward: the operations of its
//! `model::ops::BlockDef` (the list inference runs too), forward in order keeping what the
//! backward needs, backward in reverse. Each op's forward and backward sit side by side in
//! `block_ops.rs`, with the two walks; this file holds the block's layers and its saved
//! values.
//! With s the depth scale, a llama block is
//!   xm  = x  + attn_output(attention(rope(qk_norm(qkv(norm(x) * s)))))
//!   out = xm + ffn_down(act(ffn_up(norm(xm) * s)))
//! and the other families differ only in their list (`model::ops`).
//! Letters: B sequences, T positions, N = B*T rows, C width, S = (H + 2 Hkv) D attention's
//! packed q|k|v, P = 2 H D + 2 Hkv D a gated query's product, F MLP width.

use super::gdn_mixer::{DeltaNet, GdnActs, GdnScratch};
use super::lin::Lin;
use super::params::BlockRanges;
use super::qk_norm::{QkActs, QkNorm};
use super::ModelConfig;
use crate::model::ops::{BlockDef, Op};
use tinynn::layers::attention::Attention;
use tinynn::layers::dropout::Dropout;
use tinynn::layers::layernorm::LayerNorm;
use tinynn::layers::linear::Linear;
use tinynn::layers::rmsnorm::RmsNorm;

/// The norm of a family: RMSNorm (weight) or LayerNorm (weight and bias).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Norm {
    Rms(RmsNorm),
    Layer(LayerNorm),
}

impl Norm {
    pub fn new(cfg: &ModelConfig) -> Self {
        match cfg.arch.is_gpt2() {
            false => Norm::Rms(RmsNorm::new(cfg.d_model, cfg.norm_eps)),
            true => Norm::Layer(LayerNorm::new(cfg.d_model, cfg.norm_eps)),
        }
    }

    /// x (N, C) -> out (N, C), saving mean (LayerNorm only) and rstd (N).
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &self,
        x: &[f32],
        w: &[f32],
        b: Option<&[f32]>,
        scale: f32,
        out: &mut [f32],
        mean: &mut [f32],
        rstd: &mut [f32],
        n: usize,
    ) {
        match (self, b) {
            (Norm::Rms(r), _) => r.forward(x, w, scale, out, rstd, n),
            (Norm::Layer(l), Some(b)) => l.forward(x, w, b, scale, out, mean, rstd, n),
            (Norm::Layer(_), None) => unreachable!("layouts give every LayerNorm a bias"),
        }
    }

    /// Adds the input gradient into dx and the parameter gradients into dw (and db).
    #[allow(clippy::too_many_arguments)]
    pub fn backward(
        &self,
        dy: &[f32],
        x: &[f32],
        w: &[f32],
        scale: f32,
        mean: &[f32],
        rstd: &[f32],
        dx: &mut [f32],
        dw: &mut [f32],
        db: Option<&mut [f32]>,
        n: usize,
    ) {
        match (self, db) {
            (Norm::Rms(r), _) => r.backward(dy, x, w, scale, rstd, dx, dw, n),
            (Norm::Layer(l), Some(db)) => l.backward(dy, x, w, scale, mean, rstd, dx, dw, db, n),
            (Norm::Layer(_), None) => unreachable!("layouts give every LayerNorm a bias"),
        }
    }
}

/// A Norm op's saved values: its output (N, C), mean (LayerNorm) and rstd (N).
pub(crate) struct NormActs {
    pub h: Vec<f32>,
    pub mean: Vec<f32>,
    pub rstd: Vec<f32>,
}

/// A post-normed Residual's saved values: the product's output before the norm `y`, the
/// normalised output `h` added to the stream (both (N, C)), and the norm's rstd (N).
pub(crate) struct PostActs {
    pub y: Vec<f32>,
    pub h: Vec<f32>,
    pub rstd: Vec<f32>,
}

/// What one block keeps from its forward for the backward, for up to N rows. Buffers of
/// ops the block does not run are empty.
pub(crate) struct BlockActs {
    /// Residual stream into the block, and after the mixer (N, C).
    pub x: Vec<f32>,
    pub xm: Vec<f32>,
    /// Per Norm op.
    pub norms: Vec<NormActs>,
    /// A gated query's product (N, P); q|k|v as attention reads them (N, S); the q/k norm's
    /// saved values; the gate's logits (N, H D).
    pub proj: Vec<f32>,
    pub qkv: Vec<f32>,
    pub qk: QkActs,
    pub gate: Vec<f32>,
    /// Attention's output (N, H D), its log-sum-exp (B, H, T), and att * sigmoid(gate).
    pub att: Vec<f32>,
    pub lse: Vec<f32>,
    pub gated: Vec<f32>,
    pub gdn: Option<GdnActs>,
    /// MLP pre-activation: gate|up (N, 2F) or up (N, F); activation (N, F).
    pub ff: Vec<f32>,
    pub act: Vec<f32>,
    /// Per Residual op with a post-norm (Gemma 3), what it keeps; `None` for the others.
    pub posts: Vec<Option<PostActs>>,
    /// Per product, the LoRA intermediates x A^T (empty without adapters).
    pub u: Vec<Vec<f32>>,
    /// The adapters' input dropout of this block for this pass (the backward regenerates
    /// the forward's mask from it; product p gets `part(p)`); None outside training or
    /// without dropout.
    pub drop: Option<Dropout>,
}

/// Gradient buffers the blocks share during the backward, sized for the largest block.
pub(crate) struct Scratch {
    /// Gradient of the residual stream (N, C): of a block's output on entry, of its input
    /// on exit; of a normalised input (N, C).
    pub dx: Vec<f32>,
    pub dh: Vec<f32>,
    pub dqkv: Vec<f32>,
    pub datt: Vec<f32>,
    pub dgate: Vec<f32>,
    pub dproj: Vec<f32>,
    pub dff: Vec<f32>,
    pub dact: Vec<f32>,
    pub dqk: Vec<f32>,
    /// Gradient of a post-normed product's output (N, C).
    pub dpost: Vec<f32>,
    pub gdn: Option<GdnScratch>,
}

pub(crate) struct Block {
    pub r: BlockRanges,
    pub(super) def: BlockDef,
    pub(super) c: usize,
    pub(super) f: usize,
    ctx: usize,
    /// Depth scale of the normalised inputs (1 without depth scaling).
    pub(super) scale: f32,
    pub(super) norm: Norm,
    /// The table's products (`model::tensors::products`), by index.
    pub(super) lins: Vec<Lin>,
    pub(super) attn: Attention,
    pub(super) qk_norm: Option<QkNorm>,
    pub(super) gdn: Option<DeltaNet>,
    /// K/V and GPT-2's GELU rounded as inference does (`ModelConfig::inference_rounding`).
    pub(super) inference_rounding: bool,
    /// A sliding-window layer's own RoPE table (Gemma 3's local layers turn by base 10000).
    pub(super) rope_local: Option<tinynn::layers::rope::Rope>,
}

/// Which saved buffer an op left its output in: the input of the Residual after it.
#[derive(Clone, Copy)]
pub(super) enum Cur {
    Att,
    Gated,
    Gdn,
    Act,
}

impl Cur {
    /// The output kind of `op`, for the ops a Residual follows.
    pub(super) fn after(op: &Op) -> Self {
        match op {
            Op::Attention => Cur::Att,
            Op::Gate => Cur::Gated,
            Op::DeltaNet => Cur::Gdn,
            Op::Act(_) => Cur::Act,
            _ => unreachable!("a Residual follows attention, its gate, the GDN or the MLP"),
        }
    }
}

impl Block {
    pub fn new(cfg: &ModelConfig, l: usize, r: BlockRanges) -> Self {
        let (c, d) = (cfg.d_model, cfg.head_dim);
        let def = BlockDef::new(cfg.arch, cfg.kinds[l]);
        let lins = cfg
            .products(l)
            .iter()
            .map(|parts| {
                let rows = parts.iter().map(|p| p.rows).sum();
                Lin::Dense(Linear::new(parts[0].cols, rows))
            })
            .collect();
        let qk_norm = def.ops.contains(&Op::QkNorm).then(|| QkNorm {
            norm: RmsNorm::new(d, cfg.norm_eps),
            h: cfg.n_head,
            hkv: cfg.n_kv_head,
        });
        let gdn = cfg.gdn.filter(|_| def.ops.contains(&Op::DeltaNet));
        // a sliding-window layer: its window, and its RoPE base
        let local = cfg.swa.as_ref().filter(|w| w.layers[l]);
        let rope_local = local.map(|w| {
            let spec = tinynn::layers::rope::RopeSpec {
                head_dim: d,
                n_rot: cfg.rope_dim,
                neox: cfg.arch.rope_neox(),
                base: w.rope_base,
                freq_factors: cfg.rope_freqs.clone(),
            };
            tinynn::layers::rope::Rope::with(&spec, cfg.ctx)
        });
        Self {
            r,
            c,
            f: cfg.d_ff,
            ctx: cfg.ctx,
            scale: if cfg.depth_scale {
                tinynn::layers::depth_scale(l)
            } else {
                1.0
            },
            norm: Norm::new(cfg),
            lins,
            attn: Attention::new(cfg.n_head, cfg.n_kv_head, d).with_window(local.map(|w| w.window)),
            qk_norm,
            gdn: gdn.map(|sh| DeltaNet::new(sh, cfg.ctx)),
            inference_rounding: cfg.inference_rounding,
            rope_local,
            def,
        }
    }

    /// Replaces the products with frozen ones (a LoRA run), in the table's order.
    pub fn freeze(&mut self, lins: Vec<Lin>) {
        assert_eq!(lins.len(), self.lins.len(), "one frozen layer per product");
        self.lins = lins;
    }

    fn has(&self, op: Op) -> bool {
        self.def.ops.contains(&op)
    }

    /// Whether the query carries a gate (`Op::Qkv { gated }`).
    fn gated(&self) -> bool {
        (self.def.ops.iter()).any(|o| matches!(o, Op::Qkv { gated: true, .. }))
    }

    /// The MLP's pre-activation width: 2F (gate|up) or F.
    fn mlp_width(&self) -> usize {
        let p = self.def.ops.iter().find_map(|o| match o {
            Op::MlpIn { p } => Some(*p),
            _ => None,
        });
        p.map_or(0, |p| self.lins[p].n_out())
    }

    /// Saved values for `b` sequences of the block's context.
    pub fn acts(&self, b: usize) -> BlockActs {
        let n = b * self.ctx;
        let z = |k: usize| vec![0f32; k];
        let attn = self.has(Op::Attention);
        let gated = self.gated();
        let (hd, heads) = (self.attn.n_head * self.attn.head_dim, self.attn.n_head);
        let on = |yes: bool, k: usize| if yes { z(k) } else { Vec::new() };
        BlockActs {
            x: z(n * self.c),
            xm: z(n * self.c),
            norms: (0..self.r.norms.len())
                .map(|_| NormActs {
                    h: z(n * self.c),
                    mean: z(n),
                    rstd: z(n),
                })
                .collect(),
            proj: on(gated, n * (hd + self.attn.qkv_width())),
            qkv: on(attn, n * self.attn.qkv_width()),
            qk: self
                .qk_norm
                .as_ref()
                .map_or_else(QkActs::default, |q| q.acts(n)),
            gate: on(gated, n * hd),
            att: on(attn, n * hd),
            lse: on(attn, b * heads * self.ctx),
            gated: on(gated, n * hd),
            gdn: self.gdn.as_ref().map(|g| g.acts(b)),
            ff: z(n * self.mlp_width()),
            act: z(n * self.f),
            posts: (self.r.posts.iter())
                .map(|p| {
                    p.as_ref().map(|_| PostActs {
                        y: z(n * self.c),
                        h: z(n * self.c),
                        rstd: z(n),
                    })
                })
                .collect(),
            u: self.lins.iter().map(|l| z(n * l.u_width())).collect(),
            drop: None,
        }
    }

    /// Backward scratch for N rows, with room for every block of `blocks`.
    pub fn scratch(blocks: &[Block], n: usize) -> Scratch {
        let most =
            |f: &dyn Fn(&Block) -> usize| vec![0f32; blocks.iter().map(f).max().unwrap_or(0)];
        let attn = |b: &Block| b.has(Op::Attention);
        let hd = |b: &Block| b.attn.n_head * b.attn.head_dim * attn(b) as usize;
        let gated = |b: &Block, k: usize| if b.gated() { k } else { 0 };
        Scratch {
            dx: most(&|b| n * b.c),
            dh: most(&|b| n * b.c),
            dqkv: most(&|b| n * b.attn.qkv_width() * attn(b) as usize),
            datt: most(&|b| n * hd(b)),
            dgate: most(&|b| gated(b, n * hd(b))),
            dproj: most(&|b| gated(b, n * b.lins[0].n_out())),
            dff: most(&|b| n * b.mlp_width()),
            dact: most(&|b| n * b.f),
            dqk: most(&|b| b.qk_norm.as_ref().map_or(0, |q| q.scratch_len(n))),
            dpost: most(&|b| n * b.c * b.r.posts.iter().any(Option::is_some) as usize),
            gdn: blocks
                .iter()
                .find_map(|b| b.gdn.as_ref().map(|g| g.scratch(n))),
        }
    }
}
