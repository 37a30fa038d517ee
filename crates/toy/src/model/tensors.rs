//! One table of each family's block products: the GGUF matrices a block multiplies by, with
//! their shapes, grouped as the products that read one input together (q|k|v, gate|up) and
//! in the order the block runs them. Names as llama.cpp's `llama-arch.cpp`. The trainer's
//! parameter layout, its frozen products and LoRA parts, and the adapter targets read it.
//! Letters: C width, F MLP width, H / Hkv heads, D head size, Hk / Hv GDN key / value heads,
//! Dk / Dv their sizes, W = 2 Hk Dk + Hv Dv, VW = Hv Dv.

use super::{Arch, LayerKind};
use tinynn::layers::gdn::GdnShape;

/// What a block's products need of a model's shape.
#[derive(Clone, Copy, Debug)]
pub struct BlockShape {
    pub c: usize,
    pub f: usize,
    pub h: usize,
    pub hkv: usize,
    pub d: usize,
    /// The GDN layers' shape, for hybrids.
    pub gdn: Option<GdnShape>,
}

/// One matrix of a product: `name` (as in `blk.N.{name}.weight`), `rows` out, `cols` in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Part {
    pub name: &'static str,
    pub rows: usize,
    pub cols: usize,
}

const fn part(name: &'static str, rows: usize, cols: usize) -> Part {
    Part { name, rows, cols }
}

/// The products of a block of `kind` in a model of `arch`, each its parts stacked along the
/// output.
pub fn products(arch: Arch, kind: LayerKind, s: &BlockShape) -> Vec<Vec<Part>> {
    let (c, f, q, kv) = (s.c, s.f, s.h * s.d, s.hkv * s.d);
    let mlp = |gated: bool| {
        let up = match gated {
            true => vec![part("ffn_gate", f, c), part("ffn_up", f, c)],
            false => vec![part("ffn_up", f, c)],
        };
        [up, vec![part("ffn_down", c, f)]]
    };
    let mut p = match (arch, kind, s.gdn) {
        (Arch::Gpt2, _, _) => vec![
            vec![part("attn_qkv", q + 2 * kv, c)],
            vec![part("attn_output", c, q)],
        ],
        (Arch::Qwen35, LayerKind::Gdn, Some(g)) => {
            let vw = g.hv * g.dv;
            let w = 2 * g.hk * g.dk + vw;
            vec![
                vec![part("attn_qkv", w, c)],
                vec![part("attn_gate", vw, c)],
                vec![part("ssm_beta", g.hv, c)],
                vec![part("ssm_alpha", g.hv, c)],
                vec![part("ssm_out", c, vw)],
            ]
        }
        // Qwen3.5's query carries a sigmoid gate per head: [q (D) | gate (D)] each
        (Arch::Qwen35, _, _) => vec![
            vec![
                part("attn_q", 2 * q, c),
                part("attn_k", kv, c),
                part("attn_v", kv, c),
            ],
            vec![part("attn_output", c, q)],
        ],
        _ => vec![
            vec![
                part("attn_q", q, c),
                part("attn_k", kv, c),
                part("attn_v", kv, c),
            ],
            vec![part("attn_output", c, q)],
        ],
    };
    p.extend(mlp(!arch.is_gpt2()));
    p
}

/// Every part name a block of `arch` may have (over its layer kinds), in table order.
pub fn part_names(arch: Arch) -> Vec<&'static str> {
    let g = GdnShape::new(1, 1, 1, 1, 1, 1e-6);
    let s = BlockShape {
        c: 1,
        f: 1,
        h: 1,
        hkv: 1,
        d: 1,
        gdn: Some(g),
    };
    let mut names = Vec::new();
    for kind in [LayerKind::Gdn, LayerKind::Attention] {
        for p in products(arch, kind, &s).into_iter().flatten() {
            if !names.contains(&p.name) {
                names.push(p.name);
            }
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_family_has_its_parts() {
        assert_eq!(
            part_names(Arch::Llama),
            [
                "attn_q",
                "attn_k",
                "attn_v",
                "attn_output",
                "ffn_gate",
                "ffn_up",
                "ffn_down"
            ]
        );
        assert_eq!(part_names(Arch::Qwen3), part_names(Arch::Llama));
        assert_eq!(
            part_names(Arch::Gpt2),
            ["attn_qkv", "attn_output", "ffn_up", "ffn_down"]
        );
        assert_eq!(part_names(Arch::Qwen35).len(), 12);
    }
}
