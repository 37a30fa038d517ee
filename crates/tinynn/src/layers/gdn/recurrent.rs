//! The gated delta rule token by token (the paper's recurrent form, as llama.cpp's
//! `ggml_gated_delta_net` runs it for decode), for one value head:
//! `S <- e^g S; u = beta (v - S^T k); S <- S + k u^T; o = S^T q`. O(1) state per sequence;
//! also the reference the chunked kernel is tested against.
//! Shapes: q, k (T, Dk); v, o (T, Dv); beta, g (T); S (Dk, Dv) row-major.

use super::delta::HeadIn;
use crate::layers::act::exp_approx;
use crate::layers::multiversion;
use std::cell::RefCell;

thread_local! {
    static SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// One token: S (Dk, Dv) updated in place, o (Dv) written, u (Dv) scratch.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn step(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    beta: f32,
    g: f32,
    s: &mut [f32],
    o: &mut [f32],
    u: &mut [f32],
) {
    let dv = v.len();
    let alpha = exp_approx(g);
    // u = beta (v - alpha S^T k), S^T k summed over the rows of S
    u.fill(0.0);
    for (row, &ki) in s.chunks_exact(dv).zip(k) {
        for (a, b) in u.iter_mut().zip(row) {
            *a += ki * b;
        }
    }
    for (a, b) in u.iter_mut().zip(v) {
        *a = beta * (b - alpha * *a);
    }
    // S = alpha S + k u^T and o = S^T q, in one pass over S
    o.fill(0.0);
    for ((row, &ki), &qi) in s.chunks_exact_mut(dv).zip(k).zip(q) {
        for ((x, a), y) in row.iter_mut().zip(u.iter()).zip(o.iter_mut()) {
            *x = alpha * *x + ki * a;
            *y += qi * *x;
        }
    }
}

multiversion! {
    fn tokens(x: HeadIn<'_>, s: &mut [f32], o: &mut [f32], u: &mut [f32]) {
        let (t, dv) = (x.beta.len(), u.len());
        let dk = s.len() / dv;
        for i in 0..t {
            let (q, k) = (&x.q[i * dk..(i + 1) * dk], &x.k[i * dk..(i + 1) * dk]);
            let v = &x.v[i * dv..(i + 1) * dv];
            step(q, k, v, x.beta[i], x.g[i], s, &mut o[i * dv..(i + 1) * dv], u);
        }
    }
}

/// All T tokens of one head: o (T, Dv) written, S carried in place.
pub(super) fn head_forward(x: HeadIn, s: &mut [f32], o: &mut [f32]) {
    let t = x.beta.len();
    let dv = x.v.len() / t.max(1);
    assert!(t > 0 && s.len() == (x.q.len() / t) * dv && o.len() == t * dv);
    crate::kernels::with_scratch(&SCRATCH, dv, |u| tokens(x, s, o, u));
}
