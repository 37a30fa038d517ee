//! The per-head RMSNorm of queries and keys (Qwen3, llama.cpp `llm_build_qwen3`:
//! `attn_q_norm` / `attn_k_norm`, one weight of D shared by every head), forward and
//! backward, on the packed q | k | v rows of a block. It runs after the qkv product and
//! before RoPE. Letters: N rows, S = (H + 2 Hkv) D, H / Hkv heads, D head size.

use std::ops::Range;
use tinynn::layers::rmsnorm::RmsNorm;

/// What the forward keeps (all empty for families without the norm).
#[derive(Default)]
pub(crate) struct QkActs {
    /// q (N H, D) and k (N Hkv, D) before the norm, and their rstds (N H), (N Hkv).
    q: Vec<f32>,
    k: Vec<f32>,
    rstd_q: Vec<f32>,
    rstd_k: Vec<f32>,
    /// (N max(H, Hkv), D): one of them normalised, on its way back into the rows.
    tmp: Vec<f32>,
}

/// The norm of one block and the heads it runs over.
pub(crate) struct QkNorm {
    pub norm: RmsNorm,
    pub h: usize,
    pub hkv: usize,
}

/// Where the q and k norm weights (D each) are in params.
pub(crate) type QkRanges<'a> = (&'a Range<usize>, &'a Range<usize>);

/// Rows of `len` at offset `off` of each row (stride s) of qkv copied into dst (N, len).
fn gather(qkv: &[f32], s: usize, off: usize, len: usize, dst: &mut [f32], n: usize) {
    for (row, d) in qkv.chunks_exact(s).zip(dst.chunks_exact_mut(len)).take(n) {
        d.copy_from_slice(&row[off..off + len]);
    }
}

fn scatter(src: &[f32], s: usize, off: usize, len: usize, qkv: &mut [f32], n: usize) {
    for (row, x) in qkv.chunks_exact_mut(s).zip(src.chunks_exact(len)).take(n) {
        row[off..off + len].copy_from_slice(x);
    }
}

impl QkNorm {
    fn d(&self) -> usize {
        self.norm.dim
    }

    pub fn acts(&self, n: usize) -> QkActs {
        let (h, hkv, d) = (self.h, self.hkv, self.d());
        QkActs {
            q: vec![0.0; n * h * d],
            k: vec![0.0; n * hkv * d],
            rstd_q: vec![0.0; n * h],
            rstd_k: vec![0.0; n * hkv],
            tmp: vec![0.0; n * h.max(hkv) * d],
        }
    }

    /// Floats of backward scratch for n rows.
    pub fn scratch_len(&self, n: usize) -> usize {
        2 * n * self.h.max(self.hkv) * self.d()
    }

    /// The q and k heads of qkv (N, S) normalised in place.
    pub fn forward(&self, p: &[f32], w: QkRanges, qkv: &mut [f32], a: &mut QkActs, n: usize) {
        let (q, kv) = (self.h * self.d(), self.hkv * self.d());
        let s = q + 2 * kv;
        for (off, len, heads, raw, rstd, w) in [
            (0, q, self.h, &mut a.q, &mut a.rstd_q, w.0),
            (q, kv, self.hkv, &mut a.k, &mut a.rstd_k, w.1),
        ] {
            gather(qkv, s, off, len, raw, n);
            let out = &mut a.tmp[..n * len];
            self.norm
                .forward(&raw[..n * len], &p[w.clone()], 1.0, out, rstd, n * heads);
            scatter(out, s, off, len, qkv, n);
        }
    }

    /// dqkv (N, S) holds the gradient of the normalised q and k; on return, of the raw ones.
    /// The weights' gradients are added into g; `buf` is scratch of `scratch_len`.
    #[allow(clippy::too_many_arguments)]
    pub fn backward(
        &self,
        p: &[f32],
        g: &mut [f32],
        w: QkRanges,
        dqkv: &mut [f32],
        a: &QkActs,
        buf: &mut [f32],
        n: usize,
    ) {
        let (q, kv) = (self.h * self.d(), self.hkv * self.d());
        let s = q + 2 * kv;
        let (dy, dx) = buf.split_at_mut(buf.len() / 2);
        for (off, len, heads, raw, rstd, w) in [
            (0, q, self.h, &a.q, &a.rstd_q, w.0),
            (q, kv, self.hkv, &a.k, &a.rstd_k, w.1),
        ] {
            let (dy, dx) = (&mut dy[..n * len], &mut dx[..n * len]);
            gather(dqkv, s, off, len, dy, n);
            dx.fill(0.0);
            let gw = &mut g[w.clone()];
            self.norm.backward(
                dy,
                &raw[..n * len],
                &p[w.clone()],
                1.0,
                rstd,
                dx,
                gw,
                n * heads,
            );
            scatter(dx, s, off, len, dqkv, n);
        }
    }
}
