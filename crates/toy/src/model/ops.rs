//! One definition of each family's block: which operations run, in which order, on which of
//! the block table's tensors (`tensors.rs`). Both passes walk this list and nothing else
//! decides the order: inference's cached pass (`model::block`) runs it forward over the spans
//! of a batch; training (`train::block`) runs it forward keeping activations, and backward in
//! reverse. The lists, as llama.cpp's `llm_build_llama` / `_qwen2` / `_qwen3` / `_gpt2` /
//! `qwen35.cpp` / `gemma3.cpp` build their graphs:
//!
//!   llama, qwen2, qwen3, gpt2:  Norm(attn_norm) Qkv [QkNorm] [Rope] Attention Residual(attn_output)
//!                               Norm(ffn_norm) MlpIn Act Residual(ffn_down)
//!   qwen35 attention layer:     Norm(attn_norm) Qkv(gated) QkNorm Rope Attention Gate
//!                               Residual(attn_output) Norm(post_attention_norm) MlpIn Act Residual(ffn_down)
//!   qwen35 Gated DeltaNet layer: Norm(attn_norm) GdnIn DeltaNet Residual(ssm_out) ...the same MLP
//!   gemma3:                     Norm(attn_norm) Qkv QkNorm Rope Attention
//!                               Residual(attn_output, post_attention_norm) Norm(ffn_norm) MlpIn
//!                               Act(GeGlu) Residual(ffn_down, post_ffw_norm)
//!
//! A product index `p` is the table's (`tensors::products`): the matrices one input feeds.
//! Letters: C width, H / Hkv heads, D head size.

use super::{Arch, LayerKind};

/// A family's norm: RMSNorm (`.weight`) or LayerNorm (`.weight`, `.bias`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NormKind {
    Rms,
    Layer,
}

/// The MLP's activation: `silu(gate) * up` over the gate|up product, GELU (tanh form), or
/// `gelu(gate) * up` (Gemma's GeGLU).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Act {
    SwiGlu,
    Gelu,
    GeGlu,
}

/// One operation of a block. x is the residual stream (rows, C), h a normalised copy of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// h = norm(x) by `{name}.weight` (LayerNorm: and `{name}.bias`).
    Norm { name: &'static str },
    /// q (H D), k, v (Hkv D) = product `p` of h: `attn_q|attn_k|attn_v` (with their biases
    /// where the family has them) or GPT-2's one `attn_qkv`. `gated`: `attn_q` gives
    /// [q (D) | gate (D)] per head, and the gate is kept for [`Op::Gate`].
    Qkv { p: usize, gated: bool },
    /// q and k RMS-normalised per head (D) by `attn_q_norm` / `attn_k_norm`.
    QkNorm,
    /// RoPE on q and k at their positions (the family's rotation, llama3 factors included).
    Rope,
    /// Causal softmax attention (GQA): q, k, v -> att (H D). Inference keeps k and v in the
    /// f16 cache.
    Attention,
    /// att *= sigmoid(gate).
    Gate,
    /// The Gated DeltaNet's inputs from h, products `p..p + 4`: qkv, z, beta, alpha.
    GdnIn { p: usize },
    /// The Gated DeltaNet core (`tinynn::layers::gdn`: conv, delta rule, gated norm) ->
    /// y (Hv Dv), by `ssm_conv1d`, `ssm_dt`, `ssm_a`, `ssm_norm`.
    DeltaNet,
    /// The MLP's input product `p` of h: gate|up, or up.
    MlpIn { p: usize },
    /// The MLP's activation of MlpIn's output.
    Act(Act),
    /// x += product `p` of the previous op's output (`attn_output`, `ssm_out`, `ffn_down`),
    /// RMS-normalised first by `{post}.weight` where the family has a post-norm (Gemma 3:
    /// `post_attention_norm`, `post_ffw_norm`); `tap` names the product's output for
    /// activation taps (`model::tap`).
    Residual {
        p: usize,
        tap: &'static str,
        post: Option<&'static str>,
    },
}

/// A block of one family and layer kind: its norm and its operations in run order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockDef {
    pub norm: NormKind,
    pub act: Act,
    pub ops: Vec<Op>,
}

impl BlockDef {
    /// The block of `kind` in a model of `arch`.
    pub fn new(arch: Arch, kind: LayerKind) -> Self {
        let gpt2 = arch.is_gpt2();
        let qwen35 = arch == Arch::Qwen35;
        let gemma = arch == Arch::Gemma3;
        let act = match arch {
            Arch::Gpt2 => Act::Gelu,
            Arch::Gemma3 => Act::GeGlu,
            _ => Act::SwiGlu,
        };
        let mut ops = vec![Op::Norm { name: "attn_norm" }];
        let mut p = 0;
        let mixer_out = "attn_out";
        match (qwen35, kind) {
            (true, LayerKind::Gdn) => {
                ops.extend([Op::GdnIn { p }, Op::DeltaNet]);
                p += 4;
            }
            _ => {
                ops.push(Op::Qkv { p, gated: qwen35 });
                p += 1;
                if arch.qk_norm() {
                    ops.push(Op::QkNorm);
                }
                if !gpt2 {
                    ops.push(Op::Rope);
                }
                ops.push(Op::Attention);
                if qwen35 {
                    ops.push(Op::Gate);
                }
            }
        }
        let post = |name| gemma.then_some(name);
        ops.push(Op::Residual {
            p,
            tap: mixer_out,
            post: post("post_attention_norm"),
        });
        let ffn_norm = if qwen35 {
            "post_attention_norm"
        } else {
            "ffn_norm"
        };
        ops.extend([
            Op::Norm { name: ffn_norm },
            Op::MlpIn { p: p + 1 },
            Op::Act(act),
            Op::Residual {
                p: p + 2,
                tap: "ffn_out",
                post: post("post_ffw_norm"),
            },
        ]);
        let norm = if gpt2 { NormKind::Layer } else { NormKind::Rms };
        Self { norm, act, ops }
    }

    /// How many products the block runs.
    pub fn n_products(&self) -> usize {
        self.ops
            .iter()
            .map(|op| match *op {
                Op::Qkv { p, .. } | Op::MlpIn { p } | Op::Residual { p, .. } => p + 1,
                Op::GdnIn { p } => p + 4,
                _ => 0,
            })
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tensors::{block_tensors, products, BlockShape, Role};
    use tinynn::layers::gdn::GdnShape;

    const FAMILIES: [Arch; 6] = [
        Arch::Llama,
        Arch::Qwen2,
        Arch::Qwen3,
        Arch::Gpt2,
        Arch::Qwen35,
        Arch::Gemma3,
    ];

    fn shape() -> BlockShape {
        BlockShape {
            c: 16,
            f: 32,
            h: 4,
            hkv: 2,
            d: 4,
            gdn: Some(GdnShape::new(2, 4, 8, 8, 4, 1e-6)),
        }
    }

    /// The ops and the table agree: every product the ops name is the table's product of
    /// that index, every product is run once, and every tensor of the table has an op
    /// that reads it.
    #[test]
    fn the_ops_read_every_tensor_of_the_table_once() {
        for arch in FAMILIES {
            for kind in [LayerKind::Attention, LayerKind::Gdn] {
                let def = BlockDef::new(arch, kind);
                let prods = products(arch, kind, &shape());
                assert_eq!(def.n_products(), prods.len(), "{arch:?} {kind:?}");
                let first = |p: usize| prods[p][0].name;
                for op in &def.ops {
                    match *op {
                        Op::Qkv { p, .. } => assert!(first(p).starts_with("attn_q")),
                        Op::GdnIn { p } => assert_eq!(
                            [first(p), first(p + 1), first(p + 2), first(p + 3)],
                            ["attn_qkv", "attn_gate", "ssm_beta", "ssm_alpha"]
                        ),
                        Op::MlpIn { p } => assert!(first(p).starts_with("ffn_")),
                        Op::Residual { p, .. } => assert!(
                            ["attn_output", "ssm_out", "ffn_down"].contains(&first(p)),
                            "{arch:?}: {}",
                            first(p)
                        ),
                        _ => {}
                    }
                }
                let has = |o: Op| def.ops.contains(&o);
                for t in block_tensors(arch, kind, &shape()) {
                    let base = t.name.split('.').next().unwrap_or(t.name);
                    let read = match t.role {
                        // the products read their matrices and biases
                        Role::Matrix { .. } => true,
                        Role::Bias if !base.ends_with("_norm") => true,
                        Role::Norm | Role::Bias => match base {
                            "attn_q_norm" | "attn_k_norm" => has(Op::QkNorm),
                            "ssm_norm" => has(Op::DeltaNet),
                            n => has(Op::Norm { name: n })
                                || def.ops.iter().any(
                                    |o| matches!(o, Op::Residual { post: Some(q), .. } if *q == n),
                                ),
                        },
                        Role::Conv | Role::DtBias | Role::ALog => has(Op::DeltaNet),
                    };
                    assert!(read, "{arch:?} {kind:?}: no op reads {}", t.name);
                }
            }
        }
    }

    #[test]
    fn each_family_runs_its_own_steps() {
        let attn = LayerKind::Attention;
        let llama = BlockDef::new(Arch::Llama, attn);
        assert!(!llama.ops.contains(&Op::QkNorm) && llama.ops.contains(&Op::Rope));
        assert!(BlockDef::new(Arch::Qwen3, attn).ops.contains(&Op::QkNorm));
        let gpt2 = BlockDef::new(Arch::Gpt2, attn);
        assert!(!gpt2.ops.contains(&Op::Rope));
        assert_eq!((gpt2.norm, gpt2.act), (NormKind::Layer, Act::Gelu));
        let q35 = BlockDef::new(Arch::Qwen35, attn);
        assert!(q35.ops.contains(&Op::Gate));
        assert!(q35.ops.contains(&Op::Norm {
            name: "post_attention_norm"
        }));
        let gdn = BlockDef::new(Arch::Qwen35, LayerKind::Gdn);
        assert!(gdn.ops.contains(&Op::DeltaNet) && !gdn.ops.contains(&Op::Attention));
    }
}
