//! The key/value cache: preallocated for `ctx` positions at creation, so decoding never
//! allocates or copies old entries. Each layer holds K and V as (Hkv, P, D).
//! Entries are f16, as llama.cpp's default cache: half the memory of f32, and the values
//! llama.cpp attends over.

use crate::model::ModelError;
use half::f16;
use half::slice::HalfFloatSliceExt;

/// `x` rounded to the nearest f16.
pub fn round_f16(x: f32) -> f32 {
    half::f16::from_f32(x).to_f32()
}

/// Whether a batch of `t` queries runs attention as llama.cpp's one-chunk CPU flash attention
/// does (queries rounded to f16, values accumulated in f16), or, from `GGML_FA_TILE_Q` = 64
/// queries on, as its tiled kernel does (f32 queries and accumulation). Following it in both
/// regimes keeps short prompts and long chunks (perplexity) in agreement with llama.cpp.
pub fn f16_attention(t: usize) -> bool {
    t < 64
}

/// `n` zero halves from zeroed pages (calloc), so the cache costs memory only as it fills:
/// `vec![f16::ZERO; n]` would write every element.
fn zeroed(n: usize) -> Vec<f16> {
    use half::vec::HalfBitsVecExt;
    vec![0u16; n].reinterpret_into()
}

/// Round queries (T, H*D) as the K·Q product sees them.
pub fn round_queries(q: &mut [f32]) {
    q.iter_mut().for_each(|v| *v = round_f16(*v));
}

/// `Default` is an empty cache of no layers, a placeholder that allocates nothing.
#[derive(Default)]
pub struct KvCache {
    pub k: Vec<Vec<f16>>,
    pub v: Vec<Vec<f16>>,
    pub ctx: usize,
    pub n_kv_head: usize,
    pub head_dim: usize,
    /// Positions filled so far.
    pub pos: usize,
}

impl KvCache {
    pub fn new(n_layer: usize, n_kv_head: usize, head_dim: usize, ctx: usize) -> Self {
        let size = n_kv_head * ctx * head_dim;
        Self {
            k: (0..n_layer).map(|_| zeroed(size)).collect(),
            v: (0..n_layer).map(|_| zeroed(size)).collect(),
            ctx,
            n_kv_head,
            head_dim,
            pos: 0,
        }
    }

    /// Fail with the numbers when `n` more tokens do not fit.
    pub fn check_room(&self, n: usize) -> Result<(), ModelError> {
        if self.pos + n > self.ctx {
            return Err(ModelError::ContextOverflow {
                pos: self.pos,
                n,
                ctx: self.ctx,
            });
        }
        Ok(())
    }

    /// Store k, v rows (T, Hkv*D) of layer `l` for positions pos0..pos0+T.
    pub fn store(&mut self, l: usize, pos0: usize, k: &[f32], v: &[f32]) {
        let (d, hkv, ctx) = (self.head_dim, self.n_kv_head, self.ctx);
        for (t, (kr, vr)) in k
            .chunks_exact(hkv * d)
            .zip(v.chunks_exact(hkv * d))
            .enumerate()
        {
            for g in 0..hkv {
                let at = (g * ctx + pos0 + t) * d;
                self.k[l][at..at + d].convert_from_f32_slice(&kr[g * d..(g + 1) * d]);
                self.v[l][at..at + d].convert_from_f32_slice(&vr[g * d..(g + 1) * d]);
            }
        }
    }

    /// Forget everything after the first `pos` positions (to reuse a shared prefix).
    pub fn truncate(&mut self, pos: usize) {
        self.pos = self.pos.min(pos);
    }
}
