//! One table of each family's block tensors: every GGUF tensor a block holds (matrices, norms,
//! biases, the GDN conv and decay), its dims and what it is, in the order the block runs them;
//! and, read from it, the block's products: the matrices grouped as the products that read
//! one input together (q|k|v, gate|up). Names as llama.cpp's `llama-arch.cpp`. The inference
//! loaders, the trainer's parameter layout, its frozen products and LoRA parts, and the adapter
//! targets read it.
//! Letters: C width, F MLP width, H / Hkv heads, D head size, Hk / Hv GDN key / value heads,
//! Dk / Dv their sizes, K conv taps, W = 2 Hk Dk + Hv Dv, VW = Hv Dv.

use super::{Arch, LayerKind};
use tinynn::layers::gdn::GdnShape;

/// What a block's tensors need of a model's shape.
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

/// What a block tensor is: how a fresh model starts it and whether AdamW decays it are the
/// trainer's reading of this (`train::params`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A matrix of the block's `product`-th product; `residual` when that product writes
    /// into the residual stream (attn_output, ssm_out, ffn_down).
    Matrix { product: usize, residual: bool },
    /// The GDN causal conv's taps (K, W).
    Conv,
    /// A norm's weight.
    Norm,
    /// A product's bias.
    Bias,
    /// The GDN decay's dt bias (Mamba's).
    DtBias,
    /// The GDN decay rate (`ssm_a`; A_log while training).
    ALog,
}

/// One tensor of a block: `blk.N.{name}`, GGUF dims (a matrix's are [cols (in), rows (out)]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tensor {
    pub name: &'static str,
    pub dims: Vec<u64>,
    pub role: Role,
}

impl Tensor {
    /// The product a matrix belongs to.
    pub fn product(&self) -> Option<usize> {
        match self.role {
            Role::Matrix { product, .. } => Some(product),
            _ => None,
        }
    }
}

/// One matrix of a product: `name` (as in `blk.N.{name}.weight`), `rows` out, `cols` in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Part {
    pub name: &'static str,
    pub rows: usize,
    pub cols: usize,
}

/// Builds a block's list: matrices join the open product until `end` closes it.
struct Table {
    t: Vec<Tensor>,
    product: usize,
}

impl Table {
    fn add(&mut self, name: &'static str, dims: &[usize], role: Role) {
        let dims = dims.iter().map(|&d| d as u64).collect();
        self.t.push(Tensor { name, dims, role });
    }
    /// A matrix of `rows` outputs over `cols` inputs in the open product.
    fn mat(&mut self, name: &'static str, rows: usize, cols: usize, residual: bool) {
        let product = self.product;
        self.add(name, &[cols, rows], Role::Matrix { product, residual });
    }
    fn end(&mut self) {
        self.product += 1;
    }
}

/// Every tensor of a block of `kind` in a model of `arch`, in the order the block runs them
/// (and the trainer lays them out).
pub fn block_tensors(arch: Arch, kind: LayerKind, s: &BlockShape) -> Vec<Tensor> {
    let (c, f, q, kv, d) = (s.c, s.f, s.h * s.d, s.hkv * s.d, s.d);
    let gpt2 = arch.is_gpt2();
    let mut b = Table {
        t: Vec::new(),
        product: 0,
    };
    b.add("attn_norm.weight", &[c], Role::Norm);
    if gpt2 {
        b.add("attn_norm.bias", &[c], Role::Bias);
    }
    match (arch, kind, s.gdn) {
        (Arch::Gpt2, _, _) => {
            b.mat("attn_qkv.weight", q + 2 * kv, c, false);
            b.end();
            b.add("attn_qkv.bias", &[q + 2 * kv], Role::Bias);
        }
        (Arch::Qwen35, LayerKind::Gdn, Some(g)) => {
            let vw = g.hv * g.dv;
            let w = 2 * g.hk * g.dk + vw;
            for (name, rows) in [
                ("attn_qkv.weight", w),
                ("attn_gate.weight", vw),
                ("ssm_beta.weight", g.hv),
                ("ssm_alpha.weight", g.hv),
            ] {
                b.mat(name, rows, c, false);
                b.end();
            }
            b.add("ssm_conv1d.weight", &[g.kernel, w], Role::Conv);
            b.add("ssm_dt.bias", &[g.hv], Role::DtBias);
            b.add("ssm_a", &[g.hv], Role::ALog);
            b.add("ssm_norm.weight", &[g.dv], Role::Norm);
            b.mat("ssm_out.weight", c, vw, true);
            b.end();
        }
        _ => {
            // Qwen3.5's query carries a sigmoid gate per head: [q (D) | gate (D)] each
            let qw = if arch == Arch::Qwen35 { 2 * q } else { q };
            b.mat("attn_q.weight", qw, c, false);
            b.mat("attn_k.weight", kv, c, false);
            b.mat("attn_v.weight", kv, c, false);
            b.end();
            if arch.qkv_bias() {
                b.add("attn_q.bias", &[q], Role::Bias);
                b.add("attn_k.bias", &[kv], Role::Bias);
                b.add("attn_v.bias", &[kv], Role::Bias);
            }
            if arch.qk_norm() {
                b.add("attn_q_norm.weight", &[d], Role::Norm);
                b.add("attn_k_norm.weight", &[d], Role::Norm);
            }
        }
    }
    if !matches!((arch, kind), (Arch::Qwen35, LayerKind::Gdn)) {
        b.mat("attn_output.weight", c, q, true);
        b.end();
        if gpt2 {
            b.add("attn_output.bias", &[c], Role::Bias);
        }
    }
    match arch {
        Arch::Qwen35 => b.add("post_attention_norm.weight", &[c], Role::Norm),
        Arch::Gemma3 => {
            b.add("post_attention_norm.weight", &[c], Role::Norm);
            b.add("ffn_norm.weight", &[c], Role::Norm);
        }
        _ => b.add("ffn_norm.weight", &[c], Role::Norm),
    }
    if gpt2 {
        b.add("ffn_norm.bias", &[c], Role::Bias);
        b.mat("ffn_up.weight", f, c, false);
        b.end();
        b.add("ffn_up.bias", &[f], Role::Bias);
    } else {
        b.mat("ffn_gate.weight", f, c, false);
        b.mat("ffn_up.weight", f, c, false);
        b.end();
    }
    b.mat("ffn_down.weight", c, f, true);
    if gpt2 {
        b.add("ffn_down.bias", &[c], Role::Bias);
    }
    if arch == Arch::Gemma3 {
        b.add("post_ffw_norm.weight", &[c], Role::Norm);
    }
    b.t
}

/// The products of a block of `kind` in a model of `arch`, each its parts stacked along the
/// output (the table's matrices, grouped).
pub fn products(arch: Arch, kind: LayerKind, s: &BlockShape) -> Vec<Vec<Part>> {
    grouped(&block_tensors(arch, kind, s))
}

/// A block's matrices `t`, grouped by product.
fn grouped(t: &[Tensor]) -> Vec<Vec<Part>> {
    let n = t
        .iter()
        .filter_map(Tensor::product)
        .max()
        .map_or(0, |p| p + 1);
    (0..n)
        .map(|p| {
            t.iter()
                .filter(|x| x.product() == Some(p))
                .map(|x| Part {
                    name: x.name.strip_suffix(".weight").unwrap_or(x.name),
                    rows: x.dims[1] as usize,
                    cols: x.dims[0] as usize,
                })
                .collect()
        })
        .collect()
}

/// A block's tensors by name: what a loader asks for is in its family's table, with the
/// table's dims.
pub struct BlockTable {
    /// The block's index (`blk.N.`).
    pub l: usize,
    pub tensors: Vec<Tensor>,
}

impl BlockTable {
    pub fn new(arch: Arch, kind: LayerKind, s: &BlockShape, l: usize) -> Self {
        let tensors = block_tensors(arch, kind, s);
        Self { l, tensors }
    }

    /// The table's entry `name` (e.g. `attn_q.weight`). A name outside the family's table is
    /// a bug in the caller, not in a file: it panics.
    pub fn get(&self, name: &str) -> &Tensor {
        self.tensors
            .iter()
            .find(|t| t.name == name)
            .unwrap_or_else(|| panic!("{name} is not in the block table"))
    }

    /// Whether the family has `name`.
    pub fn has(&self, name: &str) -> bool {
        self.tensors.iter().any(|t| t.name == name)
    }

    /// The tensor's name in the file.
    pub fn full_name(&self, name: &str) -> String {
        format!("blk.{}.{name}", self.l)
    }

    /// The block's products, each its parts (`products`).
    pub fn products(&self) -> Vec<Vec<Part>> {
        grouped(&self.tensors)
    }

    /// A matrix part's (cols in, rows out), from `part` (`attn_q`).
    pub fn matrix(&self, part: &str) -> (usize, usize) {
        let d = &self.get(&format!("{part}.weight")).dims;
        (d[0] as usize, d[1] as usize)
    }
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

    #[test]
    fn each_family_has_its_vectors_once() {
        let g = GdnShape::new(2, 4, 8, 8, 4, 1e-6);
        let s = BlockShape {
            c: 16,
            f: 32,
            h: 4,
            hkv: 2,
            d: 4,
            gdn: Some(g),
        };
        let names = |a, k| -> Vec<&str> {
            let t = block_tensors(a, k, &s);
            t.iter().map(|t| t.name).collect()
        };
        let attn = LayerKind::Attention;
        for a in [
            Arch::Llama,
            Arch::Qwen2,
            Arch::Qwen3,
            Arch::Gpt2,
            Arch::Qwen35,
        ] {
            for k in [attn, LayerKind::Gdn] {
                let n = names(a, k);
                let mut u = n.clone();
                u.sort();
                u.dedup();
                assert_eq!(u.len(), n.len(), "{a:?} {k:?}: {n:?}");
            }
        }
        assert_eq!(names(Arch::Llama, attn).len(), 9);
        assert!(names(Arch::Qwen2, attn).contains(&"attn_k.bias"));
        assert!(names(Arch::Qwen3, attn).contains(&"attn_k_norm.weight"));
        assert_eq!(names(Arch::Gpt2, attn).len(), 12);
        assert!(names(Arch::Qwen35, LayerKind::Gdn).contains(&"ssm_a"));
        let t = BlockTable::new(Arch::Qwen35, attn, &s, 3);
        assert_eq!(t.matrix("attn_q"), (16, 32), "query and gate");
        assert_eq!(t.full_name("attn_q.weight"), "blk.3.attn_q.weight");
    }
}
