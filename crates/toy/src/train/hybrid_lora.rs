//! LoRA on a qwen35 hybrid base kept as stored: the layout of such a run (the blocks' small
//! tensors, as f32 params the trainer keeps frozen, and the adapters). The products and
//! their GGUF part names are the table's (`model::tensors`, llama.cpp
//! `src/models/qwen35.cpp`): a GDN layer's attn_qkv, attn_gate, ssm_beta, ssm_alpha and
//! ssm_out; an attention layer's attn_q|attn_k|attn_v (q with its gate heads) and
//! attn_output; every layer's ffn_gate|ffn_up and ffn_down. The conv, dt bias, A_log and the
//! norms stay f32, frozen.

use super::params::{targeted, Init, Layout, LoraRanges};
use super::ModelConfig;
use std::collections::HashMap;
use std::ops::Range;

impl Layout {
    /// A LoRA run's layout on a qwen35 base (see [`Layout::new_lora`] for the llama one):
    /// per block its small tensors, then an adapter on each targeted part; product,
    /// embedding and head ranges are empty, those stay in the base file.
    pub fn new_lora_hybrid(cfg: &ModelConfig, targets: &[String], rank: usize) -> Self {
        let full = Layout::new(cfg);
        let mut lay = Layout::empty();
        // old range start -> new range, for the tensors this layout keeps
        let mut moved: HashMap<usize, Range<usize>> = HashMap::new();
        for (l, br) in full.blocks.iter().enumerate() {
            let prods = cfg.products(l);
            let is_product = |name: &str| {
                prods
                    .iter()
                    .flatten()
                    .any(|p| name == format!("blk.{l}.{}.weight", p.name))
            };
            let prefix = format!("blk.{l}.");
            for (info, init) in full.infos.iter().zip(&full.inits) {
                if info.name.starts_with(&prefix) && !is_product(&info.name) {
                    let r = lay.push(info.name.clone(), info.dims.clone(), false, *init);
                    moved.insert(info.range.start, r);
                }
            }
            let remap = |r: &Range<usize>| moved.get(&r.start).cloned().unwrap_or(0..0);
            lay.blocks.push(br.map(remap));
            let mut adapters = Vec::new();
            for p in prods.iter().flatten() {
                if !targeted(targets, p.name) {
                    continue;
                }
                let base = format!("blk.{l}.{}.weight", p.name);
                let (k, m, r) = (p.cols as u64, p.rows as u64, rank as u64);
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
