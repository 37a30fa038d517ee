//! The tiled kernels of [`super::attention`]: per (sequence, head), blocks of QB query rows
//! against all the keys they may see, with the score block S = Q K^T and the products
//! P V, dO V^T, dS K, dS^T Q, P^T dO through `matmul::tile_product` (f32 on the `gemm` crate,
//! or bf16 operands on AMX in bf16 training; one thread each: the heads already
//! run in parallel). Scores live in a per-thread scratch of QB x T floats, grown once.
//! Short bidirectional sequences go to `attention_small` instead.
//! Shapes as in `attention`: qkv rows of S, out rows of H*D, D head size.

use super::act::{exp_approx, exp_sum16, max16};
use super::attention_small::{head_backward_small, head_forward_small, takes};
use super::matmul::tile_product;
use super::rmsnorm::dot16;
use super::{multiversion, SendPtr};
use std::cell::RefCell;

/// Query rows per tile.
pub(crate) const QB: usize = 64;

/// Where one (sequence, query head) task reads and writes: strides and column offsets.
#[derive(Clone, Copy)]
pub(crate) struct HeadJob {
    /// Row stride of qkv, and offsets of this head's q, k and v in a row.
    pub stride: usize,
    pub q: usize,
    pub k: usize,
    pub v: usize,
    /// Row stride of out, and this head's offset in it.
    pub out_stride: usize,
    pub o: usize,
    pub d: usize,
    pub t: usize,
    pub scale: f32,
    /// Row i sees keys 0..=i (language models) or all T keys (encoders such as ViT).
    pub causal: bool,
    /// Sliding window (causal only): row i sees keys i - window + 1 ..= i; 0: no window.
    pub window: usize,
}

thread_local! {
    static SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Run `f` on this file's per-thread scratch of `len` floats.
fn with_scratch<R>(len: usize, f: impl FnOnce(&mut [f32]) -> R) -> R {
    crate::kernels::with_scratch(&SCRATCH, len, f)
}

multiversion! {
    /// Rows of scores (qb, nk) -> softmax probabilities in place; with `causal` row i sees
    /// keys 0..=i0+i (and with a `window` w > 0 only the last w of them). Writes each row's
    /// log-sum-exp. Whole rows with the masked part at -inf (exp gives exactly 0 there), so
    /// every loop runs over full vectors.
    fn softmax_rows(s: &mut [f32], nk: usize, i0: usize, lse: &mut [f32], causal: bool, window: usize) {
        for (i, (row, l)) in s.chunks_exact_mut(nk).zip(lse.iter_mut()).enumerate() {
            if causal {
                row[i0 + i + 1..].fill(f32::NEG_INFINITY);
            }
            if window > 0 {
                row[..(i0 + i + 1).saturating_sub(window)].fill(f32::NEG_INFINITY);
            }
            let m = max16(row);
            let sum = exp_sum16(row, m);
            let inv = 1.0 / sum;
            row.iter_mut().for_each(|v| *v *= inv);
            *l = m + sum.ln();
        }
    }
}

multiversion! {
    /// Scores (qb, nk) -> P = exp(S - lse) (0 where masked) in `s`; dP (qb, nk) -> dS = P (dP - D)
    /// in `dp`, with D_i = dO_i . O_i.
    fn grad_rows(
        s: &mut [f32],
        dp: &mut [f32],
        nk: usize,
        i0: usize,
        lse: &[f32],
        di: &[f32],
        causal: bool,
        window: usize,
    ) {
        for (i, (row, drow)) in s.chunks_exact_mut(nk).zip(dp.chunks_exact_mut(nk)).enumerate() {
            if causal {
                row[i0 + i + 1..].fill(f32::NEG_INFINITY);
            }
            if window > 0 {
                row[..(i0 + i + 1).saturating_sub(window)].fill(f32::NEG_INFINITY);
            }
            let (l, d) = (lse[i], di[i]);
            for (x, g) in row.iter_mut().zip(drow.iter_mut()) {
                let p = exp_approx(*x - l);
                *x = p;
                *g = p * (*g - d);
            }
        }
    }
}

/// One (sequence, query head): qkv holds the sequence's T rows, out its T output rows
/// (written through `out`), lse its T log-sum-exps.
impl HeadJob {
    /// The keys the query tile starting at row i0 sees: up to its last row when causal.
    fn keys(&self, i0: usize) -> usize {
        if self.causal {
            (i0 + QB).min(self.t)
        } else {
            self.t
        }
    }

    /// S = scale Q K^T for query rows i0..i0+qb against keys 0..nk: (qb, nk) into s. Forward
    /// and backward both compute it (flash attention recomputes rather than stores it).
    ///
    /// # Safety
    /// Rows i0..i0+qb and 0..nk of qkv hold this head's q and k columns; s has qb * nk floats.
    unsafe fn scores(&self, qkv: &[f32], i0: usize, qb: usize, nk: usize, s: &mut [f32]) {
        let st = self.stride as isize;
        tile_product(
            qb,
            nk,
            self.d,
            s.as_mut_ptr(),
            nk as isize,
            false,
            qkv.as_ptr().add(i0 * self.stride + self.q),
            1,
            st,
            qkv.as_ptr().add(self.k),
            st,
            1,
            self.scale,
        );
    }
}

/// One (sequence, query head) forward: the short bidirectional kernels or the tiles.
pub(crate) fn head_forward(qkv: &[f32], job: HeadJob, out: SendPtr, lse: &mut [f32]) {
    if takes(&job) {
        head_forward_small(qkv, job, out, lse)
    } else {
        head_forward_tiled(qkv, job, out, lse)
    }
}

pub(crate) fn head_forward_tiled(qkv: &[f32], job: HeadJob, out: SendPtr, lse: &mut [f32]) {
    let HeadJob {
        stride,
        v,
        out_stride,
        o,
        d,
        t,
        ..
    } = job;
    assert!(qkv.len() >= t * stride && lse.len() >= t);
    let (st, os) = (stride as isize, out_stride as isize);
    with_scratch(QB.min(t) * t, |s| {
        for i0 in (0..t).step_by(QB) {
            let (qb, nk) = ((t - i0).min(QB), job.keys(i0));
            let s = &mut s[..qb * nk];
            // SAFETY: Q rows i0..i0+qb and K / V rows 0..nk lie inside qkv (checked above); the
            // output rows i0..i0+qb, columns o..o+d, belong to this task.
            unsafe {
                // (qb, D) x (D, nk) -> (qb, nk)
                job.scores(qkv, i0, qb, nk, s);
                softmax_rows(s, nk, i0, &mut lse[i0..i0 + qb], job.causal, job.window);
                // (qb, nk) x (nk, D) -> (qb, D)
                let dst = out.get().add(i0 * out_stride + o);
                tile_product(
                    qb,
                    d,
                    nk,
                    dst,
                    os,
                    false,
                    s.as_ptr(),
                    1,
                    nk as isize,
                    qkv.as_ptr().add(v),
                    1,
                    st,
                    1.0,
                );
            }
        }
    })
}

/// The gradient of one (sequence, query head) into dqkv (same layout as qkv, written through
/// `dqkv`): sets this head's dq, adds into its kv head's dk and dv.
pub(crate) fn head_backward(
    dout: &[f32],
    qkv: &[f32],
    out: &[f32],
    lse: &[f32],
    job: HeadJob,
    dqkv: SendPtr,
) {
    if takes(&job) {
        head_backward_small(dout, qkv, out, lse, job, dqkv)
    } else {
        head_backward_tiled(dout, qkv, out, lse, job, dqkv)
    }
}

pub(crate) fn head_backward_tiled(
    dout: &[f32],
    qkv: &[f32],
    out: &[f32],
    lse: &[f32],
    job: HeadJob,
    dqkv: SendPtr,
) {
    let HeadJob {
        stride,
        q,
        k,
        v,
        out_stride,
        o,
        d,
        t,
        scale,
        causal,
        window,
    } = job;
    assert!(
        qkv.len() >= t * stride
            && dout.len() >= t * out_stride
            && out.len() >= t * out_stride
            && lse.len() >= t
    );
    let (st, os) = (stride as isize, out_stride as isize);
    let mut di = [0f32; QB];
    with_scratch(2 * QB.min(t) * t, |buf| {
        for i0 in (0..t).step_by(QB) {
            let (qb, nk) = ((t - i0).min(QB), job.keys(i0));
            let (s, dp) = buf.split_at_mut(qb * nk);
            let dp = &mut dp[..qb * nk];
            for (i, x) in di[..qb].iter_mut().enumerate() {
                let r = (i0 + i) * out_stride + o;
                *x = dot16(&dout[r..r + d], &out[r..r + d]);
            }
            // SAFETY: all reads lie inside the checked slices; dqkv's q columns of rows
            // i0..i0+qb and the kv head's k / v columns belong to this task.
            unsafe {
                let qp = qkv.as_ptr().add(i0 * stride + q);
                let dop = dout.as_ptr().add(i0 * out_stride + o);
                // S = scale Q K^T, dP = dO V^T: (qb, nk)
                job.scores(qkv, i0, qb, nk, s);
                tile_product(
                    qb,
                    nk,
                    d,
                    dp.as_mut_ptr(),
                    nk as isize,
                    false,
                    dop,
                    1,
                    os,
                    qkv.as_ptr().add(v),
                    st,
                    1,
                    1.0,
                );
                grad_rows(s, dp, nk, i0, &lse[i0..i0 + qb], &di[..qb], causal, window);
                // dQ = scale dS K: (qb, nk) x (nk, D)
                let dq = dqkv.get().add(i0 * stride + q);
                tile_product(
                    qb,
                    d,
                    nk,
                    dq,
                    st,
                    false,
                    dp.as_ptr(),
                    1,
                    nk as isize,
                    qkv.as_ptr().add(k),
                    1,
                    st,
                    scale,
                );
                // dK += scale dS^T Q, dV += P^T dO: (nk, qb) x (qb, D)
                let dk = dqkv.get().add(k);
                tile_product(
                    nk,
                    d,
                    qb,
                    dk,
                    st,
                    true,
                    dp.as_ptr(),
                    nk as isize,
                    1,
                    qp,
                    1,
                    st,
                    scale,
                );
                let dv = dqkv.get().add(v);
                tile_product(
                    nk,
                    d,
                    qb,
                    dv,
                    st,
                    true,
                    s.as_ptr(),
                    nk as isize,
                    1,
                    dop,
                    1,
                    os,
                    1.0,
                );
            }
        }
    })
}
