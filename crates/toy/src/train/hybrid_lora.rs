//! LoRA on a qwen35 hybrid base kept as stored: the layout of such a run (the blocks' small
//! tensors, as f32 params the trainer keeps frozen, and the adapters) and the blocks' frozen
//! products. The products and their GGUF part names (llama.cpp `src/models/qwen35.cpp`):
//! a GDN layer's attn_qkv, attn_gate, ssm_beta, ssm_alpha and ssm_out; an attention layer's
//! attn_q|attn_k|attn_v (q with its gate heads) and attn_output; every layer's
//! ffn_gate|ffn_up and ffn_down. The conv, dt bias, A_log and the norms stay f32, frozen.
//! Letters: C width, F MLP width, H / Hkv heads, D head size, Hk / Hv GDN key / value heads,
//! Dk / Dv their sizes, W = 2 Hk Dk + Hv Dv, VW = Hv Dv.

use super::base::frozen_lin;
use super::hybrid_params::{AttnRanges, GdnRanges, HybridRanges, MixerRanges};
use super::lin::Lin;
use super::params::{targeted, Init, Layout, LoraRanges};
use super::{MixerKind, ModelConfig, TrainError};
use crate::gguf::GgufFile;
use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

/// Every product part of a qwen35 block, as `targets` names them.
pub const QWEN35_LINEAR: [&str; 12] = [
    "attn_qkv",
    "attn_gate",
    "ssm_beta",
    "ssm_alpha",
    "ssm_out",
    "attn_q",
    "attn_k",
    "attn_v",
    "attn_output",
    "ffn_gate",
    "ffn_up",
    "ffn_down",
];

/// Block l's products, each as its parts (part name, rows, cols): the mixer's, then the MLP's
/// two.
pub(crate) fn products(cfg: &ModelConfig, l: usize) -> Vec<Vec<(&'static str, usize, usize)>> {
    let h = cfg.hybrid.as_ref().expect("a qwen35 config");
    let (c, f) = (cfg.d_model, cfg.d_ff);
    let mut p = match h.layers[l] {
        MixerKind::Gdn => {
            let (hv, vw) = (h.gdn_value_heads, h.gdn_value_heads * h.gdn_value_dim);
            let w = 2 * h.gdn_key_heads * h.gdn_key_dim + vw;
            vec![
                vec![("attn_qkv", w, c)],
                vec![("attn_gate", vw, c)],
                vec![("ssm_beta", hv, c)],
                vec![("ssm_alpha", hv, c)],
                vec![("ssm_out", c, vw)],
            ]
        }
        MixerKind::Attn => {
            let (q, kv) = (cfg.n_head * h.head_dim, cfg.n_kv_head * h.head_dim);
            vec![
                vec![("attn_q", 2 * q, c), ("attn_k", kv, c), ("attn_v", kv, c)],
                vec![("attn_output", c, q)],
            ]
        }
    };
    p.push(vec![("ffn_gate", f, c), ("ffn_up", f, c)]);
    p.push(vec![("ffn_down", c, f)]);
    p
}

impl Layout {
    /// A LoRA run's layout on a qwen35 base (see [`Layout::new_lora`] for the llama one):
    /// per block its small tensors, then an adapter on each targeted part; product,
    /// embedding and head ranges are empty, those stay in the base file.
    pub fn new_lora_hybrid(cfg: &ModelConfig, targets: &[String], rank: usize) -> Self {
        let full = Layout::new(cfg);
        let mut lay = Layout::empty();
        // old range start -> new range, for the tensors this layout keeps
        let mut moved: HashMap<usize, Range<usize>> = HashMap::new();
        for (l, hr) in full.hybrid.iter().enumerate() {
            let prods = products(cfg, l);
            let is_product = |name: &str| {
                prods
                    .iter()
                    .flatten()
                    .any(|p| name == format!("blk.{l}.{}.weight", p.0))
            };
            let prefix = format!("blk.{l}.");
            for (info, init) in full.infos.iter().zip(&full.inits) {
                if info.name.starts_with(&prefix) && !is_product(&info.name) {
                    let r = lay.push(info.name.clone(), info.dims.clone(), false, *init);
                    moved.insert(info.range.start, r);
                }
            }
            let remap = |r: &Range<usize>| moved.get(&r.start).cloned().unwrap_or(0..0);
            lay.hybrid.push(remapped(hr, remap));
            let mut adapters = Vec::new();
            for &(part, rows, cols) in prods.iter().flatten() {
                if !targeted(targets, part) {
                    continue;
                }
                let base = format!("blk.{l}.{part}.weight");
                let (k, m, r) = (cols as u64, rows as u64, rank as u64);
                let bound = 1.0 / (k as f32).sqrt();
                let init = Init::Uniform(bound);
                let a = lay.push(format!("{base}.lora_a"), vec![k, r], true, init);
                let b = lay.push(format!("{base}.lora_b"), vec![r, m], true, Init::Zeros);
                adapters.push(LoraRanges { base, a, b });
            }
            lay.lora.push(adapters);
        }
        let c = vec![cfg.d_model as u64];
        lay.output_norm = lay.push("output_norm.weight".into(), c, false, Init::Ones);
        lay
    }
}

/// `hr` with each range mapped by `remap`.
fn remapped(hr: &HybridRanges, remap: impl Fn(&Range<usize>) -> Range<usize>) -> HybridRanges {
    HybridRanges {
        attn_norm: remap(&hr.attn_norm),
        mixer: match &hr.mixer {
            MixerRanges::Gdn(g) => MixerRanges::Gdn(GdnRanges {
                qkv: remap(&g.qkv),
                gate: remap(&g.gate),
                beta: remap(&g.beta),
                alpha: remap(&g.alpha),
                conv: remap(&g.conv),
                dt_bias: remap(&g.dt_bias),
                a_log: remap(&g.a_log),
                norm: remap(&g.norm),
                out: remap(&g.out),
            }),
            MixerRanges::Attn(a) => MixerRanges::Attn(AttnRanges {
                qkv: remap(&a.qkv),
                q_norm: remap(&a.q_norm),
                k_norm: remap(&a.k_norm),
                output: remap(&a.output),
            }),
        },
        ffn_norm: remap(&hr.ffn_norm),
        ffn_up: remap(&hr.ffn_up),
        ffn_down: remap(&hr.ffn_down),
    }
}

/// Block l's products as frozen layers of the base with the adapters `lora`, in
/// [`products`] order.
pub(crate) fn hybrid_frozen_lins(
    file: &Arc<GgufFile>,
    cfg: &ModelConfig,
    l: usize,
    lora: &[LoraRanges],
    scale: f32,
) -> Result<Vec<Lin>, TrainError> {
    products(cfg, l)
        .iter()
        .map(|parts| frozen_lin(file, l, parts, lora, scale))
        .collect()
}
