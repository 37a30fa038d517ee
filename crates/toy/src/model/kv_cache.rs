//! The key/value cache: preallocated for `ctx` positions at creation, so decoding never
//! allocates or copies old entries. Each layer holds K and V as (Hkv, P, D).
//! Entries are f16, as llama.cpp's default cache: half the memory of f32, and the values
//! llama.cpp attends over. Hybrid models' recurrent (Gated DeltaNet) layers keep a state of
//! fixed size instead, snapshotted at chunk boundaries so that a shared prefix can be resumed;
//! sliding-window layers (Gemma 3's local ones) keep only their window (`window_cache.rs`).

use super::window_cache::WindowKv;
use super::ModelError;
use half::f16;
use half::slice::HalfFloatSliceExt;
use tinynn::layers::gdn::{GdnShape, GdnState};

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

/// What one layer keeps of a sequence: an attention layer its keys and values, a Gated
/// DeltaNet layer its recurrent state (conv inputs and the delta-rule matrix), whose size
/// does not grow with the context.
pub enum LayerCache {
    /// K and V as (Hkv, P, D), f16.
    Attention {
        k: Vec<f16>,
        v: Vec<f16>,
    },
    /// A sliding-window layer's K and V: the last positions only.
    Window(WindowKv),
    Recurrent(GdnState),
}

/// What kind of cache a layer needs.
#[derive(Clone, Copy, Debug)]
pub enum CacheKind {
    /// Every position's keys and values.
    Attention,
    /// Sliding-window attention over this many positions.
    Window(usize),
    Recurrent(GdnShape),
}

/// One attention layer's keys and values as the attention kernel reads them: (Hkv, P, D)
/// each, slot 0 holding position `base`.
pub struct KvView<'a> {
    pub k: &'a [f16],
    pub v: &'a [f16],
    pub slots: usize,
    pub base: usize,
}

/// How many recurrent snapshots a hybrid cache keeps (the most recent ones): enough for a
/// chat's next turn to resume near the end of the last one.
const MAX_SNAPSHOTS: usize = 4;

/// Recurrent layers are snapshotted whenever a forward call leaves `pos` on a multiple of
/// this: where the server's prefill chunks start, so a resumed prefill splits as a cold one.
pub const SNAPSHOT_EVERY: usize = 64;

/// The per-sequence cache: one [`LayerCache`] per layer. Attention-only models can go back
/// to any position (`truncate`); a hybrid's recurrent layers only to a snapshot.
/// `Default` is an empty cache of no layers, a placeholder that allocates nothing.
#[derive(Default)]
pub struct KvCache {
    pub layers: Vec<LayerCache>,
    pub ctx: usize,
    pub n_kv_head: usize,
    pub head_dim: usize,
    /// Positions filled so far.
    pub pos: usize,
    /// (position, the recurrent layers' states there), oldest first.
    snapshots: Vec<(usize, Vec<GdnState>)>,
}

impl KvCache {
    /// Attention in every layer.
    pub fn new(n_layer: usize, n_kv_head: usize, head_dim: usize, ctx: usize) -> Self {
        Self::hybrid(
            &vec![CacheKind::Attention; n_layer],
            n_kv_head,
            head_dim,
            ctx,
        )
    }

    /// Layer l's cache of kind `kinds[l]`: only full attention layers hold `ctx` positions.
    pub fn hybrid(kinds: &[CacheKind], n_kv_head: usize, head_dim: usize, ctx: usize) -> Self {
        let size = n_kv_head * ctx * head_dim;
        let layers = kinds
            .iter()
            .map(|g| match g {
                CacheKind::Recurrent(sh) => LayerCache::Recurrent(GdnState::new(sh)),
                CacheKind::Window(w) => {
                    LayerCache::Window(WindowKv::new(*w, n_kv_head, head_dim, ctx))
                }
                CacheKind::Attention => LayerCache::Attention {
                    k: zeroed(size),
                    v: zeroed(size),
                },
            })
            .collect();
        Self {
            layers,
            ctx,
            n_kv_head,
            head_dim,
            pos: 0,
            snapshots: Vec::new(),
        }
    }

    /// Keys and values of attention layer `l` as the kernel reads them.
    pub fn kv(&self, l: usize) -> KvView<'_> {
        match &self.layers[l] {
            LayerCache::Attention { k, v } => KvView {
                k,
                v,
                slots: self.ctx,
                base: 0,
            },
            LayerCache::Window(w) => KvView {
                k: &w.k,
                v: &w.v,
                slots: w.cap,
                base: w.base,
            },
            LayerCache::Recurrent(_) => panic!("layer {l} is recurrent, not attention"),
        }
    }

    /// The state of recurrent layer `l`.
    pub fn recurrent(&mut self, l: usize) -> &mut GdnState {
        match &mut self.layers[l] {
            LayerCache::Recurrent(s) => s,
            _ => panic!("layer {l} is attention, not recurrent"),
        }
    }

    fn has_recurrent(&self) -> bool {
        self.layers
            .iter()
            .any(|l| matches!(l, LayerCache::Recurrent(_)))
    }

    /// Bytes this cache holds for one sequence: K and V of the attention layers for `ctx`
    /// positions, the recurrent layers' state (snapshots not counted).
    pub fn bytes(&self) -> usize {
        self.layers
            .iter()
            .map(|l| match l {
                LayerCache::Attention { k, v } => 2 * (k.len() + v.len()),
                LayerCache::Window(w) => 2 * (w.k.len() + w.v.len()),
                LayerCache::Recurrent(s) => 4 * (s.conv.len() + s.s.len()),
            })
            .sum()
    }

    /// Called after a forward call moved `pos`: keep the recurrent states of a chunk
    /// boundary.
    pub fn after_forward(&mut self) {
        if self.pos == 0 || !self.pos.is_multiple_of(SNAPSHOT_EVERY) || !self.has_recurrent() {
            return;
        }
        if self.snapshots.last().is_some_and(|(p, _)| *p == self.pos) {
            return;
        }
        let states = self.recurrent_states();
        self.snapshots.push((self.pos, states));
        if self.snapshots.len() > MAX_SNAPSHOTS {
            self.snapshots.remove(0);
        }
    }

    /// A copy of every recurrent layer's state, in layer order.
    fn recurrent_states(&self) -> Vec<GdnState> {
        self.layers
            .iter()
            .filter_map(|l| match l {
                LayerCache::Recurrent(s) => Some(s.clone()),
                _ => None,
            })
            .collect()
    }

    /// Keep the recurrent states of the current position too, so `truncate` can come back
    /// here (speculative decoding checks drafted tokens it may refuse).
    pub fn mark(&mut self) {
        if !self.has_recurrent() || self.snapshots.last().is_some_and(|(p, _)| *p == self.pos) {
            return;
        }
        let states = self.recurrent_states();
        self.snapshots.push((self.pos, states));
        if self.snapshots.len() > MAX_SNAPSHOTS + 1 {
            self.snapshots.remove(0);
        }
    }

    /// Forget a `mark` at `pos` (snapshots of chunk boundaries stay).
    pub fn unmark(&mut self, pos: usize) {
        if !pos.is_multiple_of(SNAPSHOT_EVERY) {
            self.snapshots.retain(|(p, _)| *p != pos);
        }
    }

    /// The furthest position at most `pos` this cache can go back to: `pos` itself for
    /// attention-only models, else the current position or a snapshot's (0 at worst); 0
    /// where a sliding-window layer no longer holds what the next query would read.
    pub fn resume_at(&self, pos: usize) -> usize {
        let to = self.recurrent_resume_at(pos);
        let windows_hold = self.layers.iter().all(|l| match l {
            LayerCache::Window(w) => w.can_resume(to),
            _ => true,
        });
        if windows_hold {
            to
        } else {
            0
        }
    }

    fn recurrent_resume_at(&self, pos: usize) -> usize {
        let pos = pos.min(self.pos);
        if pos == self.pos || !self.has_recurrent() {
            return pos;
        }
        self.snapshots
            .iter()
            .map(|(p, _)| *p)
            .filter(|&p| p <= pos)
            .max()
            .unwrap_or(0)
    }

    /// Set the recurrent layers to their state at `pos` (a position `resume_at` gave).
    fn restore(&mut self, pos: usize) {
        if pos == self.pos {
            return;
        }
        let snap = self.snapshots.iter().find(|(p, _)| *p == pos);
        let mut states = snap.map(|(_, s)| s.iter());
        for l in &mut self.layers {
            if let LayerCache::Recurrent(s) = l {
                match states.as_mut().and_then(|it| it.next()) {
                    Some(saved) => s.clone_from(saved),
                    None => s.reset(),
                }
            }
        }
        self.snapshots.retain(|(p, _)| *p <= pos);
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

    /// Store k, v rows (T, Hkv*D) of attention layer `l` for positions pos0..pos0+T.
    pub fn store(&mut self, l: usize, pos0: usize, k: &[f32], v: &[f32]) {
        let (d, hkv, ctx) = (self.head_dim, self.n_kv_head, self.ctx);
        // slot of position p in head g: (g * slots + p - base) * d
        let (kc, vc, slots, base) = match &mut self.layers[l] {
            LayerCache::Attention { k, v } => (k, v, ctx, 0),
            LayerCache::Window(w) => {
                w.make_room(pos0, k.len() / (hkv * d));
                (&mut w.k, &mut w.v, w.cap, w.base)
            }
            LayerCache::Recurrent(_) => panic!("layer {l} is recurrent, not attention"),
        };
        for (t, (kr, vr)) in k
            .chunks_exact(hkv * d)
            .zip(v.chunks_exact(hkv * d))
            .enumerate()
        {
            for g in 0..hkv {
                let at = (g * slots + pos0 + t - base) * d;
                kc[at..at + d].convert_from_f32_slice(&kr[g * d..(g + 1) * d]);
                vc[at..at + d].convert_from_f32_slice(&vr[g * d..(g + 1) * d]);
            }
        }
    }

    /// Forget everything after the first `pos` positions (to reuse a shared prefix), or
    /// after the furthest point before it that recurrent layers can go back to
    /// ([`KvCache::resume_at`]); `self.pos` says where it ended.
    pub fn truncate(&mut self, pos: usize) {
        let to = self.resume_at(pos);
        self.restore(to);
        if to == 0 {
            self.reset_windows();
        }
        self.pos = to;
    }

    fn reset_windows(&mut self) {
        for l in &mut self.layers {
            if let LayerCache::Window(w) = l {
                w.reset();
            }
        }
    }

    /// Take positions `from..to` from `src`, a cache of the same model and context holding
    /// the same tokens there, after this cache's first `from` (= `self.pos`) positions. A
    /// hybrid takes them only up to a snapshot of `src` (or all of `src`): returns how far
    /// it got, which is also `self.pos` after.
    pub fn copy_prefix_from(&mut self, src: &KvCache, from: usize, to: usize) -> usize {
        debug_assert_eq!(from, self.pos);
        let to = src.resume_at(to);
        if to <= from {
            return self.pos;
        }
        let (d, ctx) = (src.head_dim, src.ctx);
        let src_states = if to == src.pos {
            None
        } else {
            src.snapshots.iter().find(|(p, _)| *p == to).map(|(_, s)| s)
        };
        let mut snap = src_states.map(|s| s.iter());
        for (s, t) in src.layers.iter().zip(self.layers.iter_mut()) {
            match (s, t) {
                (LayerCache::Attention { k: sk, v: sv }, LayerCache::Attention { k, v }) => {
                    for g in 0..src.n_kv_head {
                        let (a, b) = ((g * ctx + from) * d, (g * ctx + to) * d);
                        k[a..b].copy_from_slice(&sk[a..b]);
                        v[a..b].copy_from_slice(&sv[a..b]);
                    }
                }
                (LayerCache::Window(sw), LayerCache::Window(w)) => w.copy_from(sw, to),
                (LayerCache::Recurrent(now), LayerCache::Recurrent(t)) => {
                    let at = snap.as_mut().and_then(|it| it.next()).unwrap_or(now);
                    t.clone_from(at);
                }
                _ => panic!("copying between caches of different models"),
            }
        }
        self.snapshots.retain(|(p, _)| *p <= from);
        self.snapshots.extend(
            src.snapshots
                .iter()
                .filter(|(p, _)| *p > from && *p <= to)
                .cloned(),
        );
        self.pos = to;
        to
    }
}
