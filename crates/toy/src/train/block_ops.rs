//! Each op of a block (`model::ops::Op`) in training: its forward and, beside it, its
//! backward, and the block's two walks over them: `Block::forward` calls `op_forward` for the
//! ops in order, `Block::backward` calls `op_backward` in reverse. A `Walk` says where the walk is: which Norm op's output
//! the products read, and which residual stream a Norm reads and a Residual writes (x, xm,
//! out). A Residual's input is the output of the op before it (`Cur::after`).
//! Letters: B sequences, T positions, N = B*T rows, C width, H / Hkv heads, D head size,
//! S = (H + 2 Hkv) D, P = 2 H D + 2 Hkv D, F MLP width.

use super::block::{Block, BlockActs, Cur, Scratch};
use super::lin::grad2;
use crate::model::ops::{Act, BlockDef, Op};
use tinynn::layers::act::{geglu_backward, geglu_forward, gelu_backward, gelu_forward};
use tinynn::layers::act::{swiglu_backward, swiglu_forward};
use tinynn::layers::rope::RopeAt;

/// Where a walk over a block's ops is.
#[derive(Clone, Copy, Default)]
pub(super) struct Walk {
    /// Norm ops passed (forward) or still ahead (backward).
    norm: usize,
    /// Residual ops passed, likewise: the stream a Norm reads (0 x, 1 xm).
    res: usize,
}

impl Walk {
    /// Past the last op of `def`, for the backward.
    pub fn end(def: &BlockDef) -> Self {
        let count = |f: fn(&Op) -> bool| def.ops.iter().filter(|o| f(o)).count();
        Self {
            norm: count(|o| matches!(o, Op::Norm { .. })),
            res: count(|o| matches!(o, Op::Residual { .. })),
        }
    }
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

impl Block {
    /// a.x (B*T, C) -> out (B*T, C), keeping what the backward needs in `a`.
    pub fn forward(
        &self,
        p: &[f32],
        a: &mut BlockActs,
        out: &mut [f32],
        rope: RopeAt,
        b: usize,
        t: usize,
    ) {
        // a sliding-window layer turns by its own base
        let rope = self.rope_local.as_ref().map_or(rope, |r| r.at(rope.pos));
        let mut at = Walk::default();
        for (i, op) in self.def.ops.iter().enumerate() {
            let prev = i.checked_sub(1).map(|j| &self.def.ops[j]);
            self.op_forward(*op, prev, &mut at, p, a, out, rope, b, t);
        }
    }

    /// s.dx holds the gradient of the block's output; on return, that of its input. Parameter
    /// gradients are added into g.
    #[allow(clippy::too_many_arguments)]
    pub fn backward(
        &self,
        p: &[f32],
        g: &mut [f32],
        a: &mut BlockActs,
        s: &mut Scratch,
        rope: RopeAt,
        b: usize,
        t: usize,
    ) {
        let rope = self.rope_local.as_ref().map_or(rope, |r| r.at(rope.pos));
        let mut at = Walk::end(&self.def);
        for (i, op) in self.def.ops.iter().enumerate().rev() {
            let prev = i.checked_sub(1).map(|j| &self.def.ops[j]);
            self.op_backward(*op, prev, &mut at, p, g, a, s, rope, b, t);
        }
    }

    /// One op's forward; `prev` is the op before it.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn op_forward(
        &self,
        op: Op,
        prev: Option<&Op>,
        at: &mut Walk,
        p: &[f32],
        a: &mut BlockActs,
        out: &mut [f32],
        rope: RopeAt,
        b: usize,
        t: usize,
    ) {
        let (r, n, c, f) = (&self.r, b * t, self.c, self.f);
        let dr = a.drop;
        let drop = |i: usize| dr.map(|d| d.part(i as u64));
        let (hd, s) = (self.attn.n_head * self.attn.head_dim, self.attn.qkv_width());
        let heads = self.attn.n_head + self.attn.n_kv_head;
        match op {
            Op::Norm { .. } => {
                let (w, bias) = &r.norms[at.norm];
                let x = if at.res == 0 { &a.x } else { &a.xm };
                let na = &mut a.norms[at.norm];
                let bias = bias.as_ref().map(|b| &p[b.clone()]);
                let (h, mean, rstd) = (&mut na.h, &mut na.mean, &mut na.rstd);
                self.norm
                    .forward(x, &p[w.clone()], bias, self.scale, h, mean, rstd, n);
                at.norm += 1;
            }
            Op::Qkv { p: i, gated } => {
                let h = &a.norms[at.norm - 1].h;
                let (w, bias, u) = (&r.products[i], &r.biases[i], &mut a.u[i]);
                // (N, C) -> (N, S), or a gated query's (N, P) split into q|k|v and the gate
                let y = if gated { &mut a.proj } else { &mut a.qkv };
                self.lins[i].forward(p, w, bias, h, y, u, n, false, drop(i));
                if gated {
                    split_gate(
                        &a.proj,
                        &mut a.qkv,
                        &mut a.gate,
                        hd,
                        s,
                        self.attn.head_dim,
                        n,
                    );
                }
            }
            Op::QkNorm => {
                let qk = self.qk_norm.as_ref().expect("a QkNorm op has its norm");
                let (wq, wk) = r.qk_norm.as_ref().expect("and its weights");
                qk.forward(p, (wq, wk), &mut a.qkv, &mut a.qk, n);
            }
            Op::Rope => rope.forward(&mut a.qkv, s, heads, t, n),
            Op::Attention => {
                if self.inference_rounding {
                    self.attn.round_kv_f16(&mut a.qkv, n);
                }
                // (N, S) -> (N, H D)
                (self.attn).forward_packed(&a.qkv, &mut a.att, &mut a.lse, b, t, rope.pos);
            }
            Op::Gate => {
                let y = a.gated[..n * hd].iter_mut();
                for ((y, x), g) in y.zip(&a.att).zip(&a.gate) {
                    *y = x * sigmoid(*g);
                }
            }
            Op::GdnIn { p: i } => {
                let h = &a.norms[at.norm - 1].h;
                let ins = &mut a.gdn.as_mut().expect("GDN acts").ins;
                for (k, y) in ins.iter_mut().enumerate() {
                    let (w, bias, u) = (&r.products[i + k], &r.biases[i + k], &mut a.u[i + k]);
                    self.lins[i + k].forward(p, w, bias, h, y, u, n, false, drop(i + k));
                }
            }
            Op::DeltaNet => {
                let (g, ga) = (
                    self.gdn.as_ref().expect("GDN"),
                    a.gdn.as_mut().expect("acts"),
                );
                g.forward(p, r.gdn.as_ref().expect("GDN ranges"), ga, b, t);
            }
            Op::MlpIn { p: i } => {
                let h = &a.norms[at.norm - 1].h;
                let (w, bias, u) = (&r.products[i], &r.biases[i], &mut a.u[i]);
                self.lins[i].forward(p, w, bias, h, &mut a.ff, u, n, false, drop(i));
            }
            Op::Act(act) => {
                match act {
                    Act::SwiGlu => swiglu_forward(&a.ff, &mut a.act, n, f),
                    Act::Gelu if self.inference_rounding => {
                        // ggml's GELU through f16 (the inference kernel); the backward stays exact
                        a.act[..n * f].copy_from_slice(&a.ff[..n * f]);
                        tinynn::kernels::act::gelu(&mut a.act[..n * f]);
                    }
                    Act::Gelu => gelu_forward(&a.ff[..n * f], &mut a.act[..n * f]),
                    Act::GeGlu if self.inference_rounding => {
                        // ggml's GELU through f16 (the inference kernel) times up; the
                        // backward stays exact
                        let rows = a.ff[..n * 2 * f].chunks_exact(2 * f);
                        for (gu, y) in rows.zip(a.act[..n * f].chunks_exact_mut(f)) {
                            y.copy_from_slice(&gu[..f]);
                            tinynn::kernels::act::gelu(y);
                            y.iter_mut().zip(&gu[f..]).for_each(|(y, u)| *y *= u);
                        }
                    }
                    Act::GeGlu => geglu_forward(&a.ff, &mut a.act, n, f),
                }
            }
            Op::Residual { p: i, .. } => {
                // stream res+1 = stream res + product i of the last op's output
                let y: &mut [f32] = match at.res {
                    0 => {
                        a.xm[..n * c].copy_from_slice(&a.x[..n * c]);
                        &mut a.xm
                    }
                    _ => {
                        out[..n * c].copy_from_slice(&a.xm[..n * c]);
                        out
                    }
                };
                let x = match Cur::after(prev.expect("a Residual follows an op")) {
                    Cur::Att => &a.att,
                    Cur::Gated => &a.gated,
                    Cur::Gdn => &a.gdn.as_ref().expect("GDN acts").y,
                    Cur::Act => &a.act,
                };
                let (w, bias, u) = (&r.products[i], &r.biases[i], &mut a.u[i]);
                match (&r.posts[at.res], a.posts[at.res].as_mut()) {
                    (Some(pw), Some(pa)) => {
                        // Gemma 3: the product's output RMS-normalised, then added
                        self.lins[i].forward(p, w, bias, x, &mut pa.y, u, n, false, drop(i));
                        let (h, rstd) = (&mut pa.h, &mut pa.rstd);
                        self.norm
                            .forward(&pa.y, &p[pw.clone()], None, 1.0, h, &mut [], rstd, n);
                        let h = &pa.h[..n * c];
                        y[..n * c].iter_mut().zip(h).for_each(|(y, h)| *y += h);
                    }
                    _ => self.lins[i].forward(p, w, bias, x, y, u, n, true, drop(i)),
                }
                at.res += 1;
            }
        }
    }

    /// One op's backward: from the gradient of its output (where the op after it left it)
    /// to that of its input; parameter gradients added into g. `prev` is the op before it.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn op_backward(
        &self,
        op: Op,
        prev: Option<&Op>,
        at: &mut Walk,
        p: &[f32],
        g: &mut [f32],
        a: &mut BlockActs,
        s: &mut Scratch,
        rope: RopeAt,
        b: usize,
        t: usize,
    ) {
        let (r, n, f) = (&self.r, b * t, self.f);
        let dr = a.drop;
        let drop = |i: usize| dr.map(|d| d.part(i as u64));
        let (hd, sw) = (self.attn.n_head * self.attn.head_dim, self.attn.qkv_width());
        let heads = self.attn.n_head + self.attn.n_kv_head;
        match op {
            Op::Residual { p: i, .. } => {
                // the skip passes s.dx through; the product's input gets W^T dx (through the
                // post-norm first, where there is one)
                at.res -= 1;
                let post = r.posts[at.res].as_ref().zip(a.posts[at.res].as_ref());
                if let Some((pw, pa)) = post {
                    let c = self.c;
                    s.dpost[..n * c].fill(0.0);
                    let (w, dw) = (&p[pw.clone()], &mut g[pw.clone()]);
                    let (y, rstd) = (&pa.y, &pa.rstd);
                    let dpost = &mut s.dpost;
                    self.norm
                        .backward(&s.dx, y, w, 1.0, &[], rstd, dpost, dw, None, n);
                }
                let cur = Cur::after(prev.expect("a Residual follows an op"));
                let (x, dx) = match cur {
                    Cur::Att => (&a.att, &mut s.datt),
                    Cur::Gated => (&a.gated, &mut s.datt),
                    Cur::Gdn => {
                        let gs = s.gdn.as_mut().expect("GDN scratch");
                        (&a.gdn.as_ref().expect("GDN acts").y, &mut gs.d[4])
                    }
                    Cur::Act => (&a.act, &mut s.dact),
                };
                let (w, bias, u) = (&r.products[i], &r.biases[i], &a.u[i]);
                let dx = Some(&mut dx[..]);
                let dy = if post.is_some() { &s.dpost } else { &s.dx };
                self.lins[i].backward(p, g, w, bias, dy, x, u, dx, false, n, drop(i));
            }
            Op::Act(act) => match act {
                Act::SwiGlu => swiglu_backward(&s.dact, &a.ff, &mut s.dff, n, f),
                Act::Gelu => gelu_backward(&s.dact[..n * f], &a.ff[..n * f], &mut s.dff[..n * f]),
                Act::GeGlu => geglu_backward(&s.dact, &a.ff, &mut s.dff, n, f),
            },
            Op::MlpIn { p: i } => {
                let h = &a.norms[at.norm - 1].h;
                let (w, bias, u) = (&r.products[i], &r.biases[i], &a.u[i]);
                let dh = Some(&mut s.dh[..]);
                self.lins[i].backward(p, g, w, bias, &s.dff, h, u, dh, false, n, drop(i));
            }
            Op::Norm { .. } => {
                at.norm -= 1;
                let (w, bias) = &r.norms[at.norm];
                let x = if at.res == 0 { &a.x } else { &a.xm };
                let na = &a.norms[at.norm];
                let (dw, db) = grad2(g, w, bias);
                let (mean, rstd) = (&na.mean, &na.rstd);
                self.norm.backward(
                    &s.dh,
                    x,
                    &p[w.clone()],
                    self.scale,
                    mean,
                    rstd,
                    &mut s.dx,
                    dw,
                    db,
                    n,
                );
            }
            Op::Gate => {
                // y = att * sig(gate): d gate from d y, then d att in place of d y
                let (dy, dgate) = (&mut s.datt[..n * hd], &mut s.dgate[..n * hd]);
                for (((dy, dg), x), gl) in dy.iter_mut().zip(dgate).zip(&a.att).zip(&a.gate) {
                    let sg = sigmoid(*gl);
                    *dg = *dy * x * sg * (1.0 - sg);
                    *dy *= sg;
                }
            }
            Op::Attention => {
                // (N, H D) -> (N, S)
                let (qkv, att, lse) = (&a.qkv, &a.att, &a.lse);
                (self.attn).backward_packed(&s.datt, qkv, att, lse, &mut s.dqkv, b, t, rope.pos);
            }
            Op::Rope => rope.backward(&mut s.dqkv, sw, heads, t, n),
            Op::QkNorm => {
                let qk = self.qk_norm.as_ref().expect("a QkNorm op has its norm");
                let (wq, wk) = r.qk_norm.as_ref().expect("and its weights");
                qk.backward(p, g, (wq, wk), &mut s.dqkv, &a.qk, &mut s.dqk, n);
            }
            Op::Qkv { p: i, gated } => {
                let h = &a.norms[at.norm - 1].h;
                let d = self.attn.head_dim;
                let dy = match gated {
                    true => {
                        join_gate(&s.dqkv, &s.dgate, &mut s.dproj, hd, sw, d, n);
                        &s.dproj
                    }
                    false => &s.dqkv,
                };
                let (w, bias, u) = (&r.products[i], &r.biases[i], &a.u[i]);
                let dh = Some(&mut s.dh[..]);
                self.lins[i].backward(p, g, w, bias, dy, h, u, dh, false, n, drop(i));
            }
            Op::DeltaNet => {
                let (gd, ga) = (
                    self.gdn.as_ref().expect("GDN"),
                    a.gdn.as_mut().expect("acts"),
                );
                let gs = s.gdn.as_mut().expect("GDN scratch");
                gd.backward(p, g, r.gdn.as_ref().expect("GDN ranges"), ga, gs, b, t);
            }
            Op::GdnIn { p: i } => {
                // four products of h: the first writes dh, the rest add
                let h = &a.norms[at.norm - 1].h;
                let gs = s.gdn.as_ref().expect("GDN scratch");
                for k in 0..4 {
                    let (w, bias, u) = (&r.products[i + k], &r.biases[i + k], &a.u[i + k]);
                    let (dy, dh) = (&gs.d[k], Some(&mut s.dh[..]));
                    let lin = &self.lins[i + k];
                    lin.backward(p, g, w, bias, dy, h, u, dh, k > 0, n, drop(i + k));
                }
            }
        }
    }
}

/// A gated query's product (N, P), per row [q_0 | gate_0 | q_1 | gate_1 ... | k | v], into
/// q|k|v (N, S) and the gates (N, H D).
fn split_gate(
    proj: &[f32],
    qkv: &mut [f32],
    gate: &mut [f32],
    hd: usize,
    s: usize,
    d: usize,
    n: usize,
) {
    let pw = hd + s;
    for i in 0..n {
        let (row, out) = (&proj[i * pw..(i + 1) * pw], &mut qkv[i * s..(i + 1) * s]);
        for hh in 0..hd / d {
            let (dst, src) = (hh * d, 2 * hh * d);
            out[dst..dst + d].copy_from_slice(&row[src..src + d]);
            let gi = i * hd + dst;
            gate[gi..gi + d].copy_from_slice(&row[src + d..src + 2 * d]);
        }
        out[hd..].copy_from_slice(&row[2 * hd..]);
    }
}

/// The backward of `split_gate`: dqkv (N, S) and dgate (N, H D) into dproj (N, P).
fn join_gate(
    dqkv: &[f32],
    dgate: &[f32],
    dproj: &mut [f32],
    hd: usize,
    s: usize,
    d: usize,
    n: usize,
) {
    let pw = hd + s;
    for i in 0..n {
        let (row, dq) = (&mut dproj[i * pw..(i + 1) * pw], &dqkv[i * s..(i + 1) * s]);
        for hh in 0..hd / d {
            let (src, dst) = (hh * d, 2 * hh * d);
            row[dst..dst + d].copy_from_slice(&dq[src..src + d]);
            let gi = i * hd + src;
            row[dst + d..dst + 2 * d].copy_from_slice(&dgate[gi..gi + d]);
        }
        row[2 * hd..].copy_from_slice(&dq[hd..]);
    }
}
