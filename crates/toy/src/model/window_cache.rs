//! The KV cache of a sliding-window attention layer (Gemma 3's local layers; llama.cpp's
//! `llama_kv_cache_iswa`): only the last `window` positions are ever attended to, so the
//! layer keeps those, a margin to go back by (speculative decoding's refused drafts), and
//! room for one batch, instead of the whole context. Positions `base..` sit at slots `0..`;
//! when a batch would not fit, the positions no query can reach any more are dropped by one
//! move to the front (once per few hundred tokens in decoding).

use half::f16;

/// How many positions behind the newest a sliding-window layer can still go back to
/// (`KvCache::truncate` for refused drafts); further back means prefilling again.
pub const ROLLBACK: usize = 64;

/// Batch room a window cache starts with; a larger batch grows it (up to the context).
const BATCH_ROOM: usize = 512;

/// K and V of one sliding-window layer: (Hkv, cap, D) each, slot s holding position base + s.
#[derive(Clone)]
pub struct WindowKv {
    pub k: Vec<f16>,
    pub v: Vec<f16>,
    /// Slots per head.
    pub cap: usize,
    /// The position in slot 0.
    pub base: usize,
    pub window: usize,
    n_kv_head: usize,
    head_dim: usize,
}

impl WindowKv {
    pub fn new(window: usize, n_kv_head: usize, head_dim: usize, ctx: usize) -> Self {
        let cap = (window + ROLLBACK + BATCH_ROOM).min(ctx);
        let n = n_kv_head * cap * head_dim;
        Self {
            k: vec![f16::ZERO; n],
            v: vec![f16::ZERO; n],
            cap,
            base: 0,
            window,
            n_kv_head,
            head_dim,
        }
    }

    /// The first position a query at `pos` reads.
    fn oldest_needed(&self, pos: usize) -> usize {
        (pos + 1).saturating_sub(self.window)
    }

    /// Whether a sequence cut back to `pos` positions can go on from here: the keys the
    /// next query needs are still held (always at 0).
    pub fn can_resume(&self, pos: usize) -> bool {
        pos == 0 || self.oldest_needed(pos) >= self.base
    }

    /// Make room for positions `pos0..pos0 + n`, keeping what their queries read and
    /// `ROLLBACK` positions before that; grows when one batch needs more than `cap`.
    pub fn make_room(&mut self, pos0: usize, n: usize) {
        debug_assert!(
            self.can_resume(pos0),
            "position {pos0} before the window's base {}",
            self.base
        );
        if pos0 + n <= self.base + self.cap {
            return;
        }
        let keep_from = self
            .oldest_needed(pos0)
            .saturating_sub(ROLLBACK)
            .max(self.base)
            .min(pos0);
        let need = pos0 + n - keep_from;
        if need > self.cap {
            self.grow(need);
        }
        let shift = keep_from - self.base;
        if shift > 0 {
            let (cap, d) = (self.cap, self.head_dim);
            for g in 0..self.n_kv_head {
                let head = g * cap * d..(g + 1) * cap * d;
                self.k[head.clone()].copy_within(shift * d.., 0);
                self.v[head].copy_within(shift * d.., 0);
            }
            self.base = keep_from;
        }
    }

    /// Re-lay the slots for `cap` per head.
    fn grow(&mut self, cap: usize) {
        let (old, d) = (self.cap, self.head_dim);
        let mut k = vec![f16::ZERO; self.n_kv_head * cap * d];
        let mut v = k.clone();
        for g in 0..self.n_kv_head {
            let (src, dst) = (g * old * d, g * cap * d);
            k[dst..dst + old * d].copy_from_slice(&self.k[src..src + old * d]);
            v[dst..dst + old * d].copy_from_slice(&self.v[src..src + old * d]);
        }
        (self.k, self.v, self.cap) = (k, v, cap);
    }

    /// The slot of position `pos` in head `g`'s rows, in elements.
    pub fn at(&self, g: usize, pos: usize) -> usize {
        (g * self.cap + pos - self.base) * self.head_dim
    }

    /// Take `src`'s positions up to `to` (the same tokens as this sequence's): its slots
    /// and base, as far as it holds them.
    pub fn copy_from(&mut self, src: &WindowKv, to: usize) {
        if self.cap != src.cap {
            self.grow(src.cap);
        }
        let n = (to - src.base) * self.head_dim;
        for g in 0..self.n_kv_head {
            let a = g * src.cap * self.head_dim;
            self.k[a..a + n].copy_from_slice(&src.k[a..a + n]);
            self.v[a..a + n].copy_from_slice(&src.v[a..a + n]);
        }
        self.base = src.base;
    }

    /// Back to an empty sequence.
    pub fn reset(&mut self) {
        self.base = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filled(w: &mut WindowKv, from: usize, to: usize) {
        for p in from..to {
            w.make_room(p, 1);
            let at = w.at(0, p);
            w.k[at] = f16::from_f32(p as f32);
        }
    }

    #[test]
    fn decoding_keeps_the_window_and_the_rollback_margin_in_a_bounded_buffer() {
        let mut w = WindowKv::new(8, 1, 1, 100_000);
        let cap = w.cap;
        filled(&mut w, 0, 5000);
        assert_eq!(w.cap, cap, "decoding never grows it");
        // every position the next query reads, and the margin, are still there
        for p in (5000 - 8 - ROLLBACK + 1)..5000 {
            assert!(p >= w.base);
            assert_eq!(w.k[w.at(0, p)], f16::from_f32(p as f32));
        }
        assert!(w.can_resume(5000) && w.can_resume(5000 - ROLLBACK));
        assert!(!w.can_resume(100), "long gone");
        assert!(w.can_resume(0));
    }

    #[test]
    fn a_batch_larger_than_the_room_grows_the_buffer() {
        let mut w = WindowKv::new(4, 2, 2, 10_000);
        filled(&mut w, 0, 700);
        w.make_room(700, 2000);
        assert!(w.base + w.cap >= 2700 && w.base <= 700 - 3);
        let at = w.at(1, 699);
        assert!(at < w.k.len());
    }
}
