//! A linear layer of a trainable block, in one of two forms:
//! - `Dense`: f32 weights (and bias) in the flat params, all trained (from scratch, full
//!   fine-tune);
//! - `Frozen`: a base model's matrices kept in their stored ggml type (Q4_1, Q8_0, Q4_K, F16,
//!   ...) and never updated, each with an optional LoRA adapter whose A and B live in the flat
//!   params (Hu et al. 2021, arXiv 2106.09685). The forward runs the inference kernels
//!   (`qmatmul::matmul`, activations quantized as llama.cpp does); the input gradient runs
//!   `qmatmul_t::matmul_t` on dequantized panels. One fused product (q|k|v, gate|up) is one
//!   Frozen layer of several parts stacked along the output.
//!
//! Shapes: x (N, K), y (N, M) with M the sum of the parts' heights; u holds each adapter's
//! x A^T (N, r), one after another.

use crate::gguf::GgufFile;
use crate::model::weights::Weight;
use std::cell::RefCell;
use std::ops::Range;
use std::sync::Arc;
use tinynn::kernels::qmatmul::matmul;
use tinynn::kernels::qmatmul_t::matmul_t;
use tinynn::kernels::QMat;
use tinynn::layers::dropout::Dropout;
use tinynn::layers::linear::Linear;
use tinynn::layers::lora::Lora;

/// One matrix of the frozen base, held as inference holds it (`model::weights::Weight`: the
/// stored type, repacked for the interleaved-row kernels where this CPU has them, in the
/// loader's arena), beside the file its bytes are in. The products of a training batch are
/// prefill-sized.
#[derive(Clone)]
pub(crate) struct FrozenMat {
    pub file: Arc<GgufFile>,
    pub w: Weight,
}

impl FrozenMat {
    pub fn qmat(&self) -> QMat<'_> {
        self.w.qmat(self.file.bytes())
    }
}

/// An adapter on one part: the layer and where A (r, K) and B (M_part, r) are in params.
#[derive(Clone)]
pub(crate) struct LoraPart {
    pub lora: Lora,
    pub a: Range<usize>,
    pub b: Range<usize>,
}

#[derive(Clone)]
pub(crate) struct Part {
    pub mat: FrozenMat,
    pub lora: Option<LoraPart>,
}

#[derive(Clone)]
pub(crate) enum Lin {
    Dense(Linear),
    Frozen {
        parts: Vec<Part>,
        n_in: usize,
        n_out: usize,
    },
}

thread_local! {
    static TMP: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    static DU: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    /// The adapters' dropped-out input (N, K) and their share of dx (N, K).
    static XD: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    static DXD: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Run `f` on `len` floats of the per-thread buffer `buf`, or on a fresh one when this thread
/// already holds it (rayon may run another shard's layer on a thread that waits inside a
/// product).
fn with_buf<R>(
    buf: &'static std::thread::LocalKey<RefCell<Vec<f32>>>,
    len: usize,
    f: impl FnOnce(&mut [f32]) -> R,
) -> R {
    buf.with(|b| match b.try_borrow_mut() {
        Ok(mut b) => {
            if b.len() < len {
                b.resize(len, 0.0);
            }
            f(&mut b[..len])
        }
        Err(_) => f(&mut vec![0.0; len]),
    })
}

/// The mutable gradient of a weight and of its bias (the bias sits after the weight).
pub(crate) fn grad2<'a>(
    g: &'a mut [f32],
    w: &Range<usize>,
    b: &Option<Range<usize>>,
) -> (&'a mut [f32], Option<&'a mut [f32]>) {
    match b {
        None => (&mut g[w.clone()], None),
        Some(b) => {
            assert!(b.start >= w.end, "bias laid out after its weight");
            let (lo, hi) = g.split_at_mut(b.start);
            (&mut lo[w.clone()], Some(&mut hi[..b.len()]))
        }
    }
}

impl Lin {
    pub fn n_in(&self) -> usize {
        match self {
            Lin::Dense(l) => l.n_in,
            Lin::Frozen { n_in, .. } => *n_in,
        }
    }

    pub fn n_out(&self) -> usize {
        match self {
            Lin::Dense(l) => l.n_out,
            Lin::Frozen { n_out, .. } => *n_out,
        }
    }

    /// Floats of saved LoRA intermediates per row (the sum of the parts' ranks).
    pub fn u_width(&self) -> usize {
        match self {
            Lin::Dense(_) => 0,
            Lin::Frozen { parts, .. } => parts
                .iter()
                .filter_map(|p| p.lora.as_ref())
                .map(|l| l.lora.rank)
                .sum(),
        }
    }

    /// `y (N, M) (+)= x W^T (+ b)`, plus the adapters' `s (x A^T) B^T`; u keeps x A^T. A
    /// frozen layer's bias stays frozen (its backward gives it no gradient).
    /// With `drop`, adapter j sees `drop.part(j)` applied to x (peft's `lora_dropout`).
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &self,
        p: &[f32],
        w: &Range<usize>,
        b: &Option<Range<usize>>,
        x: &[f32],
        y: &mut [f32],
        u: &mut [f32],
        n: usize,
        acc: bool,
        drop: Option<Dropout>,
    ) {
        let (parts, m) = match self {
            Lin::Dense(l) => {
                let bias = b.as_ref().map(|r| &p[r.clone()]);
                return l.forward(x, &p[w.clone()], bias, y, n, acc);
            }
            Lin::Frozen { parts, n_out, .. } => (parts, *n_out),
        };
        let k = self.n_in();
        let x = &x[..n * k];
        let (mut off, mut uoff) = (0, 0);
        for (j, part) in parts.iter().enumerate() {
            let mp = part.mat.w.rows;
            let q = part.mat.qmat();
            if parts.len() == 1 && !acc {
                matmul(&q, x, n, &mut y[..n * m]);
            } else {
                with_buf(&TMP, n * mp, |tmp| {
                    matmul(&q, x, n, tmp);
                    for (row, t) in y.chunks_exact_mut(m).zip(tmp.chunks_exact(mp)) {
                        let dst = &mut row[off..off + mp];
                        if acc {
                            dst.iter_mut().zip(t).for_each(|(d, v)| *d += v);
                        } else {
                            dst.copy_from_slice(t);
                        }
                    }
                });
            }
            if let Some(l) = &part.lora {
                let r = l.lora.rank;
                let ui = &mut u[uoff..uoff + n * r];
                let (pa, pb) = (&p[l.a.clone()], &p[l.b.clone()]);
                match drop {
                    None => l.lora.forward(x, pa, pb, ui, &mut y[off..], m, n),
                    Some(d) => with_buf(&XD, n * k, |xd| {
                        d.part(j as u64).apply(x, xd, k, n);
                        l.lora.forward(xd, pa, pb, ui, &mut y[off..], m, n)
                    }),
                }
                uoff += n * r;
            }
            off += mp;
        }
        // a frozen bias (qwen2's q/k/v) from params, after the products
        if let Some(b) = b {
            let bias = &p[b.clone()];
            for row in y[..n * m].chunks_exact_mut(m) {
                row.iter_mut().zip(bias).for_each(|(y, b)| *y += b);
            }
        }
    }

    /// From dy (N, M): weight (Dense) or adapter (Frozen) gradients into g, and
    /// `dx (N, K) (+)= dy W` (+ the adapters' share) when dx is given (added when dx_acc).
    /// `drop` as given to the forward.
    #[allow(clippy::too_many_arguments)]
    pub fn backward(
        &self,
        p: &[f32],
        g: &mut [f32],
        w: &Range<usize>,
        b: &Option<Range<usize>>,
        dy: &[f32],
        x: &[f32],
        u: &[f32],
        dx: Option<&mut [f32]>,
        dx_acc: bool,
        n: usize,
        drop: Option<Dropout>,
    ) {
        let (parts, m) = match self {
            Lin::Dense(l) => {
                let (dw, db) = grad2(g, w, b);
                return l.backward(dy, x, &p[w.clone()], dx, dx_acc, dw, db, n);
            }
            Lin::Frozen { parts, n_out, .. } => (parts, *n_out),
        };
        let k = self.n_in();
        let mut dx = dx;
        let (mut off, mut uoff) = (0, 0);
        for (i, part) in parts.iter().enumerate() {
            let mp = part.mat.w.rows;
            if let Some(dx) = dx.as_deref_mut() {
                let q = part.mat.qmat();
                let first_acc = dx_acc || i > 0;
                if parts.len() == 1 {
                    matmul_t(&q, &dy[..n * m], n, dx, first_acc);
                } else {
                    with_buf(&TMP, n * mp, |tmp| {
                        for (t, row) in tmp.chunks_exact_mut(mp).zip(dy.chunks_exact(m)) {
                            t.copy_from_slice(&row[off..off + mp]);
                        }
                        matmul_t(&q, tmp, n, dx, first_acc);
                    });
                }
            }
            if let Some(l) = &part.lora {
                let r = l.lora.rank;
                let ui = &u[uoff..uoff + n * r];
                let (ga, gb) = split2(g, &l.a, &l.b);
                let (pa, pb) = (&p[l.a.clone()], &p[l.b.clone()]);
                let dyp = &dy[off..];
                with_buf(&DU, n * r, |du| match drop {
                    None => {
                        let dx = dx.as_deref_mut();
                        l.lora
                            .backward(dyp, m, &x[..n * k], pa, pb, ui, du, ga, gb, dx, n);
                    }
                    Some(d) => with_buf(&XD, n * k, |xd| {
                        // the forward's mask again: on x for dA, on the adapter's dx
                        let d = d.part(i as u64);
                        d.apply(x, xd, k, n);
                        let Some(dx) = dx.as_deref_mut() else {
                            return l.lora.backward(dyp, m, xd, pa, pb, ui, du, ga, gb, None, n);
                        };
                        with_buf(&DXD, n * k, |dxd| {
                            dxd.fill(0.0);
                            l.lora
                                .backward(dyp, m, xd, pa, pb, ui, du, ga, gb, Some(dxd), n);
                            d.apply_in_place(dxd, k, n);
                            dx[..n * k].iter_mut().zip(&*dxd).for_each(|(a, b)| *a += b);
                        })
                    }),
                });
                uoff += n * r;
            }
            off += mp;
        }
    }
}

/// Two disjoint mutable ranges of g.
fn split2<'a>(
    g: &'a mut [f32],
    a: &Range<usize>,
    b: &Range<usize>,
) -> (&'a mut [f32], &'a mut [f32]) {
    if a.start < b.start {
        let (lo, hi) = g.split_at_mut(b.start);
        (&mut lo[a.clone()], &mut hi[..b.len()])
    } else {
        let (lo, hi) = g.split_at_mut(a.start);
        (&mut hi[..a.len()], &mut lo[b.clone()])
    }
}
