//! Per-sequence inference state: the KV cache and the activation buffers of one batch,
//! allocated once for `n_batch` tokens and reused by every forward call.

use super::kv_cache::KvCache;
use super::Config;

/// Which logits a forward call returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logits {
    /// Only the last token's (V).
    Last,
    /// Every token's (T, V).
    All,
}

pub struct State {
    pub cache: KvCache,
    /// Most tokens one batch holds.
    pub n_batch: usize,
    /// Residual stream (B, C).
    pub x: Vec<f32>,
    /// Normalised input (B, C).
    pub h: Vec<f32>,
    /// Queries (B, H*D), keys and values (B, Hkv*D), or fused qkv for GPT-2 (B, 3C).
    pub q: Vec<f32>,
    pub k: Vec<f32>,
    pub v: Vec<f32>,
    pub qkv: Vec<f32>,
    /// Attention output (B, H*D).
    pub att: Vec<f32>,
    /// Projection back to the residual (B, C).
    pub proj: Vec<f32>,
    /// MLP hidden (B, F), twice for gate and up.
    pub ff_a: Vec<f32>,
    pub ff_b: Vec<f32>,
    /// Logits of the last forward, (V) or (T, V).
    pub logits: Vec<f32>,
    /// Hybrids: gated attention's joint query and gate (B, 2*H*D), and a GDN layer's
    /// projections qkv (B, W), z (B, Hv*Dv), b and a (B, Hv) and its output (B, Hv*Dv).
    pub qg: Vec<f32>,
    pub gdn_qkv: Vec<f32>,
    pub gdn_z: Vec<f32>,
    pub gdn_b: Vec<f32>,
    pub gdn_a: Vec<f32>,
    pub gdn_out: Vec<f32>,
    /// Activation taps (`super::tap`): None unless asked for.
    pub taps: Option<Box<super::tap::Taps>>,
}

/// `n` zeros where `used`, else nothing.
fn sized(used: bool, n: usize) -> Vec<f32> {
    if used {
        vec![0.0; n]
    } else {
        Vec::new()
    }
}

impl State {
    pub fn new(cfg: &Config, ctx: usize, n_batch: usize) -> Self {
        let b = n_batch.max(1);
        Self {
            cache: KvCache::hybrid(&cfg.cache_layers(), cfg.n_kv_head, cfg.head_dim, ctx),
            n_batch: b,
            x: vec![0.0; b * cfg.d_model],
            h: vec![0.0; b * cfg.d_model],
            q: vec![0.0; b * cfg.q_dim()],
            k: vec![0.0; b * cfg.kv_dim()],
            v: vec![0.0; b * cfg.kv_dim()],
            qkv: if cfg.arch == super::Arch::Gpt2 {
                vec![0.0; b * 3 * cfg.d_model]
            } else {
                Vec::new()
            },
            att: vec![0.0; b * cfg.q_dim()],
            proj: vec![0.0; b * cfg.d_model],
            ff_a: vec![0.0; b * cfg.d_ff],
            ff_b: vec![0.0; b * cfg.d_ff],
            logits: Vec::with_capacity(cfg.vocab),
            qg: sized(cfg.gdn.is_some(), b * 2 * cfg.q_dim()),
            gdn_qkv: sized(
                cfg.gdn.is_some(),
                b * cfg.gdn.map_or(0, |g| g.conv_channels()),
            ),
            gdn_z: sized(
                cfg.gdn.is_some(),
                b * cfg.gdn.map_or(0, |g| g.value_width()),
            ),
            gdn_b: sized(cfg.gdn.is_some(), b * cfg.gdn.map_or(0, |g| g.hv)),
            gdn_a: sized(cfg.gdn.is_some(), b * cfg.gdn.map_or(0, |g| g.hv)),
            gdn_out: sized(
                cfg.gdn.is_some(),
                b * cfg.gdn.map_or(0, |g| g.value_width()),
            ),
            taps: None,
        }
    }

    /// Positions filled in the cache.
    pub fn pos(&self) -> usize {
        self.cache.pos
    }

    /// Start a new sequence.
    pub fn reset(&mut self) {
        self.cache.truncate(0);
    }
}
