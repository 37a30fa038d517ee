//! Where every parameter tensor lives in the flat params / grads buffers, under its GGUF
//! name and dims, and the seeded initialisation (GPT-2 / nanoGPT: N(0, 0.02), residual
//! output projections N(0, 0.02 / sqrt(2 n_layer)), norm weights 1, biases 0).
//!
//! Tensors that one matrix product reads together sit next to each other, so the product is
//! one gemm over the joint range: llama's attn_q, attn_k, attn_v ((H + 2 Hkv) D, C) and
//! ffn_gate, ffn_up (2F, C).

use super::ModelConfig;
use crate::model::ops::{BlockDef, Op};
use crate::model::tensors::{Role, Tensor};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::ops::Range;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamInfo {
    /// GGUF tensor name, e.g. "blk.0.attn_q.weight".
    pub name: String,
    /// GGUF dims, innermost first: a (out, in) row-major matrix has dims [in, out].
    pub dims: Vec<u64>,
    /// Where it lives in the flat params / grads buffers.
    pub range: Range<usize>,
    /// Whether AdamW decays it: false for norms, biases and embeddings.
    pub decay: bool,
}

/// How a tensor starts.
#[derive(Clone, Copy)]
pub(super) enum Init {
    Normal(f32),
    /// U(-a, a).
    Uniform(f32),
    /// Mamba's dt bias: softplus(x) = dt with dt log-uniform in [1e-3, 1e-1].
    DtBias,
    /// Qwen3.5's A_log: ln A with A uniform in [1, 16).
    ALog,
    Ones,
    Zeros,
}

/// Where one block's tensors are, grouped as its ops (`model::ops::BlockDef`) read them.
#[derive(Clone, Debug)]
pub(crate) struct BlockRanges {
    /// Each Norm op's weight and (LayerNorm) bias, in op order.
    pub norms: Vec<(Range<usize>, Option<Range<usize>>)>,
    /// Each product's matrices, side by side in table order (q|k|v, gate|up), and their
    /// biases, likewise, where the family has them.
    pub products: Vec<Range<usize>>,
    pub biases: Vec<Option<Range<usize>>>,
    /// `attn_q_norm`, `attn_k_norm` (D each).
    pub qk_norm: Option<(Range<usize>, Range<usize>)>,
    /// Per Residual op, its post-norm's weight (C) where the family has one (Gemma 3).
    pub posts: Vec<Option<Range<usize>>>,
    /// The Gated DeltaNet core's `ssm_conv1d` (W, K), `ssm_dt.bias` (Hv), `ssm_a` (Hv; A_log
    /// while training) and `ssm_norm` (Dv).
    pub gdn: Option<[Range<usize>; 4]>,
}

impl BlockRanges {
    /// Block l's ranges from where its tensors landed.
    pub(super) fn new(cfg: &ModelConfig, l: usize, s: &BlockSlots) -> Self {
        let def = BlockDef::new(cfg.arch, cfg.kinds[l]);
        let prods = cfg.products(l);
        let norms = def
            .ops
            .iter()
            .filter_map(|op| match op {
                Op::Norm { name } => Some((
                    s.req(&format!("{name}.weight")),
                    s.get(&format!("{name}.bias")),
                )),
                _ => None,
            })
            .collect();
        let posts = def
            .ops
            .iter()
            .filter_map(|op| match op {
                Op::Residual { post, .. } => Some(post.map(|n| s.req(&format!("{n}.weight")))),
                _ => None,
            })
            .collect();
        let bias = |parts: &[crate::model::tensors::Part]| {
            let first = format!("{}.bias", parts.first()?.name);
            let last = format!("{}.bias", parts.last()?.name);
            s.span(&first, &last)
        };
        let gdn = [
            "ssm_conv1d.weight",
            "ssm_dt.bias",
            "ssm_a",
            "ssm_norm.weight",
        ];
        Self {
            norms,
            products: (0..prods.len()).map(|p| s.product(p)).collect(),
            biases: prods.iter().map(|p| bias(p)).collect(),
            qk_norm: s.get("attn_q_norm.weight").zip(s.get("attn_k_norm.weight")),
            posts,
            gdn: s.get("ssm_a").map(|_| gdn.map(|n| s.req(n))),
        }
    }

    /// Every range through `f` (a LoRA layout's view of the full layout's ranges).
    pub(super) fn map(&self, f: impl Fn(&Range<usize>) -> Range<usize>) -> Self {
        let opt = |r: &Option<Range<usize>>| r.as_ref().map(&f);
        Self {
            norms: self.norms.iter().map(|(w, b)| (f(w), opt(b))).collect(),
            products: self.products.iter().map(&f).collect(),
            biases: self.biases.iter().map(opt).collect(),
            qk_norm: self.qk_norm.as_ref().map(|(q, k)| (f(q), f(k))),
            posts: self.posts.iter().map(opt).collect(),
            gdn: self.gdn.as_ref().map(|g| g.each_ref().map(&f)),
        }
    }
}

/// One adapter of a LoRA run: on base tensor `base`, A (r, K) and B (M, r) in params.
#[derive(Clone, Debug)]
pub(crate) struct LoraRanges {
    pub base: String,
    pub a: Range<usize>,
    pub b: Range<usize>,
}

pub(crate) struct Layout {
    pub infos: Vec<ParamInfo>,
    pub(super) inits: Vec<Init>,
    pub token_embd: Range<usize>,
    pub position_embd: Option<Range<usize>>,
    pub blocks: Vec<BlockRanges>,
    /// LoRA runs: per block, the adapters (the rest of the block's matrices stay frozen in the
    /// base; their ranges here are empty).
    pub lora: Vec<Vec<LoraRanges>>,
    pub output_norm: Range<usize>,
    pub output_norm_b: Option<Range<usize>>,
    /// The head (V, C): `output.weight`, or token_embd when tied.
    pub head: Range<usize>,
    pub total: usize,
}

/// One block's tensors and where each landed ([`Layout::push_block`]).
pub(super) struct BlockSlots(Vec<(Tensor, Range<usize>)>);

impl BlockSlots {
    /// Where `name` (`attn_norm.weight`) is, if the family has it.
    pub fn get(&self, name: &str) -> Option<Range<usize>> {
        let slot = self.0.iter().find(|(t, _)| t.name == name);
        slot.map(|(_, r)| r.clone())
    }

    /// Where `name` is; the family's table lists it.
    pub fn req(&self, name: &str) -> Range<usize> {
        self.get(name)
            .unwrap_or_else(|| panic!("{name} is not in the block table"))
    }

    /// `first` through `last`, side by side.
    pub fn span(&self, first: &str, last: &str) -> Option<Range<usize>> {
        Some(self.get(first)?.start..self.get(last)?.end)
    }

    /// The joint range of product `p`'s matrices (laid out side by side, in table order).
    pub fn product(&self, p: usize) -> Range<usize> {
        let mut it = self.0.iter().filter(|(t, _)| t.product() == Some(p));
        let first = it
            .next()
            .map(|(_, r)| r.clone())
            .expect("the product exists");
        let end = it.next_back().map_or(first.end, |(_, r)| r.end);
        first.start..end
    }
}

/// Whether `targets` (part names, or `"all-linear"`) names `part`.
pub(crate) fn targeted(targets: &[String], part: &str) -> bool {
    targets.iter().any(|t| t == part || t == "all-linear")
}

impl Layout {
    /// No tensors, every range empty.
    pub(super) fn empty() -> Self {
        Layout {
            infos: Vec::new(),
            inits: Vec::new(),
            token_embd: 0..0,
            position_embd: None,
            blocks: Vec::new(),
            lora: Vec::new(),
            output_norm: 0..0,
            output_norm_b: None,
            head: 0..0,
            total: 0,
        }
    }

    pub(super) fn push(
        &mut self,
        name: String,
        dims: Vec<u64>,
        decay: bool,
        init: Init,
    ) -> Range<usize> {
        let n: u64 = dims.iter().product();
        let range = self.total..self.total + n as usize;
        self.total = range.end;
        self.infos.push(ParamInfo {
            name,
            dims,
            range: range.clone(),
            decay,
        });
        self.inits.push(init);
        range
    }

    pub fn new(cfg: &ModelConfig) -> Self {
        let (v, c, l) = (cfg.vocab as u64, cfg.d_model as u64, cfg.n_layer);
        let std = Init::Normal(0.02);
        let gpt2 = cfg.arch.is_gpt2();
        let mut lay = Layout {
            infos: Vec::new(),
            inits: Vec::new(),
            token_embd: 0..0,
            position_embd: None,
            blocks: Vec::with_capacity(l),
            lora: Vec::new(),
            output_norm: 0..0,
            output_norm_b: None,
            head: 0..0,
            total: 0,
        };
        lay.token_embd = lay.push("token_embd.weight".into(), vec![c, v], false, std);
        if gpt2 {
            let p = lay.push(
                "position_embd.weight".into(),
                vec![c, cfg.context() as u64],
                false,
                std,
            );
            lay.position_embd = Some(p);
        }
        for i in 0..l {
            let s = lay.push_block(cfg, i);
            lay.blocks.push(BlockRanges::new(cfg, i, &s));
        }
        lay.output_norm = lay.push("output_norm.weight".into(), vec![c], false, Init::Ones);
        if gpt2 {
            lay.output_norm_b =
                Some(lay.push("output_norm.bias".into(), vec![c], false, Init::Zeros));
        }
        lay.head = if cfg.is_tied() {
            lay.token_embd.clone()
        } else {
            lay.push("output.weight".into(), vec![c, v], true, std)
        };
        lay
    }

    /// Appends block `i`'s tensors as its family's table lists them
    /// (`model::tensors::block_tensors`), each started and decayed as its role says.
    pub(super) fn push_block(&mut self, cfg: &ModelConfig, i: usize) -> BlockSlots {
        let std = Init::Normal(0.02);
        let resid = Init::Normal(0.02 / (2.0 * cfg.n_layer as f32).sqrt());
        let tensors = cfg.block_tensors(i);
        let mut slots = Vec::with_capacity(tensors.len());
        for t in tensors {
            let (decay, init) = match t.role {
                Role::Matrix { residual, .. } => (true, if residual { resid } else { std }),
                // PyTorch's Conv1d default
                Role::Conv => (true, Init::Uniform(1.0 / (t.dims[0] as f32).sqrt())),
                Role::Norm => (false, Init::Ones),
                Role::Bias => (false, Init::Zeros),
                Role::DtBias => (false, Init::DtBias),
                Role::ALog => (false, Init::ALog),
            };
            let r = self.push(format!("blk.{i}.{}", t.name), t.dims.clone(), decay, init);
            slots.push((t, r));
        }
        BlockSlots(slots)
    }

    /// A LoRA run's layout, for every family: every tensor of the full layout but the base's
    /// matrices (the products, the embedding, the head), as f32 params the trainer keeps
    /// frozen (norms, biases, GPT-2's position table, the GDN conv, dt bias and A_log), and
    /// after each block's, for each target
    /// part its adapter: `<name>.weight.lora_a` (dims [K, r], Kaiming-uniform as peft:
    /// U(-1/sqrt(K), 1/sqrt(K))) and `.lora_b` (dims [r, M], zeros), so the first step's
    /// output is the base's. Matrix, embedding and head ranges are empty: those stay in the
    /// base file. `targets` are part names (`attn_q`, ..., `ffn_down`; gpt2's `attn_qkv`).
    pub fn new_lora(cfg: &ModelConfig, targets: &[String], rank: usize) -> Self {
        let full = Layout::new(cfg);
        let mut lay = Layout::empty();
        let block_of = |name: &str| {
            let rest = name.strip_prefix("blk.")?;
            rest.split('.').next()?.parse::<usize>().ok()
        };
        // the base's matrices stay in the file: the products, the embedding and the head
        let frozen: std::collections::HashSet<String> = (0..cfg.n_layer)
            .flat_map(|l| {
                let parts = cfg.products(l).into_iter().flatten();
                parts.map(move |p| format!("blk.{l}.{}.weight", p.name))
            })
            .chain(["token_embd.weight".into(), "output.weight".into()])
            .collect();
        // (range in the full layout, range here) of every tensor kept in params
        let mut moved: Vec<(Range<usize>, Range<usize>)> = Vec::new();
        let mut open: Option<usize> = None;
        for (info, &init) in full.infos.iter().zip(&full.inits) {
            let blk = block_of(&info.name);
            if let Some(l) = open.filter(|&l| blk != Some(l)) {
                lay.push_adapters(cfg, targets, rank, l);
            }
            open = blk;
            if !frozen.contains(&info.name) {
                let r = lay.push(info.name.clone(), info.dims.clone(), false, init);
                moved.push((info.range.clone(), r));
            }
        }
        if let Some(l) = open {
            lay.push_adapters(cfg, targets, rank, l);
        }
        // a range of the full layout -> the same tensors here (empty for the matrices)
        let map = |r: &Range<usize>| -> Range<usize> {
            let mut inside = moved
                .iter()
                .filter(|(o, _)| o.start >= r.start && o.end <= r.end);
            match (inside.next(), inside.next_back()) {
                (Some(a), Some(b)) => a.1.start..b.1.end,
                (Some(a), None) => a.1.clone(),
                _ => 0..0,
            }
        };
        let opt = |r: &Option<Range<usize>>| r.as_ref().map(map);
        lay.blocks = full.blocks.iter().map(|b| b.map(map)).collect();
        lay.position_embd = opt(&full.position_embd);
        lay.output_norm = map(&full.output_norm);
        lay.output_norm_b = opt(&full.output_norm_b);
        lay
    }

    /// Block l's adapters (A then B of each targeted part, in product order) of a LoRA
    /// layout, with the parts' dims from the table (`model::tensors`).
    fn push_adapters(&mut self, cfg: &ModelConfig, targets: &[String], rank: usize, l: usize) {
        let mut adapters = Vec::new();
        for part in cfg.products(l).into_iter().flatten() {
            if !targeted(targets, part.name) {
                continue;
            }
            let base = format!("blk.{l}.{}.weight", part.name);
            let (k, m, r) = (part.cols as u64, part.rows as u64, rank as u64);
            let bound = 1.0 / (k as f32).sqrt();
            let a = self.push(
                format!("{base}.lora_a"),
                vec![k, r],
                true,
                Init::Uniform(bound),
            );
            let b = self.push(format!("{base}.lora_b"), vec![r, m], true, Init::Zeros);
            adapters.push(LoraRanges { base, a, b });
        }
        self.lora.push(adapters);
    }

    /// Fresh parameters from `seed`: tensors in layout order, each value from one stream of
    /// standard normals (Box-Muller on rand's StdRng), so the result depends on the seed alone.
    pub fn init(&self, seed: u64) -> Vec<f32> {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut params = vec![0f32; self.total];
        let mut spare: Option<f64> = None;
        let mut normal = move |rng: &mut StdRng| -> f64 {
            if let Some(z) = spare.take() {
                return z;
            }
            // u1 in (0, 1] keeps the log finite
            let u1 = 1.0 - rng.random::<f64>();
            let u2 = rng.random::<f64>();
            let r = (-2.0 * u1.ln()).sqrt();
            let a = std::f64::consts::TAU * u2;
            spare = Some(r * a.sin());
            r * a.cos()
        };
        for (info, init) in self.infos.iter().zip(&self.inits) {
            let p = &mut params[info.range.clone()];
            match *init {
                Init::Normal(std) => p
                    .iter_mut()
                    .for_each(|x| *x = (normal(&mut rng) * std as f64) as f32),
                Init::Uniform(a) => p
                    .iter_mut()
                    .for_each(|x| *x = ((2.0 * rng.random::<f64>() - 1.0) * a as f64) as f32),
                Init::DtBias => p.iter_mut().for_each(|x| {
                    let (lo, hi) = (1e-3f64.ln(), 1e-1f64.ln());
                    let dt = (lo + rng.random::<f64>() * (hi - lo)).exp();
                    // the inverse of softplus: dt + ln(1 - e^-dt)
                    *x = (dt + (-(-dt).exp_m1()).ln()) as f32
                }),
                Init::ALog => p
                    .iter_mut()
                    .for_each(|x| *x = (1.0 + 15.0 * rng.random::<f64>()).ln() as f32),
                Init::Ones => p.fill(1.0),
                Init::Zeros => p.fill(0.0),
            }
        }
        params
    }
}
