//! Finite-difference checks of the GDN backward ([`super::backward`]) for every input and
//! parameter, at T covering one partial chunk and several chunks plus a partial one; and the
//! chunked delta-rule backward against a token-by-token one in f64 at realistic sizes.
//! Shapes as in the module doc.

use super::delta::{self, GradsView, HeadIn, Inputs, Kernel};
use super::tests::{normal, rule_inputs, Case};
use super::*;
use crate::layers::gradcheck::{check, weighted_sum};

/// Which slice of a case a check perturbs.
#[derive(Clone, Copy, Debug)]
enum Arg {
    Qkv,
    Z,
    B,
    A,
    ConvW,
    DtBias,
    SsmA,
    NormW,
}

const ARGS: [Arg; 8] = [
    Arg::Qkv,
    Arg::Z,
    Arg::B,
    Arg::A,
    Arg::ConvW,
    Arg::DtBias,
    Arg::SsmA,
    Arg::NormW,
];

impl Case {
    fn arg_mut(&mut self, a: Arg) -> &mut Vec<f32> {
        match a {
            Arg::Qkv => &mut self.qkv,
            Arg::Z => &mut self.z,
            Arg::B => &mut self.b,
            Arg::A => &mut self.a,
            Arg::ConvW => &mut self.conv_w,
            Arg::DtBias => &mut self.dt_bias,
            Arg::SsmA => &mut self.ssm_a,
            Arg::NormW => &mut self.norm_w,
        }
    }
}

/// `sum(w * out)` of the training forward.
fn loss(sh: &GdnShape, c: &Case, t: usize, w: &[f32]) -> f64 {
    let mut saved = GdnSaved::new(sh, t);
    let mut out = vec![0.0; t * sh.value_width()];
    forward_train(
        sh,
        c.params(),
        &c.qkv,
        &c.z,
        &c.b,
        &c.a,
        &mut saved,
        &mut out,
    );
    weighted_sum(w, &out)
}

/// The analytic gradients of [`loss`], in the order of [`ARGS`].
fn analytic(sh: &GdnShape, c: &Case, t: usize, w: &[f32]) -> Vec<Vec<f32>> {
    let mut saved = GdnSaved::new(sh, t);
    let mut out = vec![0.0; t * sh.value_width()];
    forward_train(
        sh,
        c.params(),
        &c.qkv,
        &c.z,
        &c.b,
        &c.a,
        &mut saved,
        &mut out,
    );
    let mut g: Vec<Vec<f32>> = ARGS.iter().map(|&a| vec![0.0; c.clone_len(a)]).collect();
    let [dqkv, dz, db, da, dconv, ddt, dssm, dnorm] = &mut g[..] else {
        unreachable!("eight gradients")
    };
    let mut grads = GdnGrads {
        conv_w: dconv,
        dt_bias: ddt,
        ssm_a: dssm,
        norm_w: dnorm,
    };
    backward(sh, c.params(), &mut saved, w, dqkv, dz, db, da, &mut grads);
    g
}

impl Case {
    fn clone_len(&self, a: Arg) -> usize {
        match a {
            Arg::Qkv => self.qkv.len(),
            Arg::Z => self.z.len(),
            Arg::B => self.b.len(),
            Arg::A => self.a.len(),
            Arg::ConvW => self.conv_w.len(),
            Arg::DtBias => self.dt_bias.len(),
            Arg::SsmA => self.ssm_a.len(),
            Arg::NormW => self.norm_w.len(),
        }
    }
}

fn check_all(sh: &GdnShape, t: usize, seed: u64) {
    let mut c = Case::new(sh, t, seed);
    let w = normal(t * sh.value_width(), seed + 100);
    let g = analytic(sh, &c, t, &w);
    for (i, &a) in ARGS.iter().enumerate() {
        let x = c.arg_mut(a).clone();
        let name = format!("gdn T={t} {a:?}");
        check(&name, &x, &g[i], 3e-3, 5e-3, |p| {
            let old = std::mem::replace(c.arg_mut(a), p.to_vec());
            let l = loss(sh, &c, t, &w);
            *c.arg_mut(a) = old;
            l
        });
    }
}

fn small(hk: usize, hv: usize) -> GdnShape {
    let mut sh = GdnShape::new(hk, hv, 8, 8, 4, 1e-6);
    sh.chunk = 8;
    sh
}

#[test]
fn gdn_backward_matches_finite_differences_one_partial_chunk() {
    check_all(&small(2, 4), 5, 1);
}

#[test]
fn gdn_backward_matches_finite_differences_many_chunks() {
    check_all(&small(1, 2), 70, 2);
}

#[test]
fn gdn_backward_matches_finite_differences_shared_key_heads() {
    check_all(&small(2, 4), 21, 3);
}

/// The delta rule's backward token by token in f64 for one head from a zero state, with
/// do rows at `d_o[t * stride + off..]`: [dq, dk (T, Dk), dv (T, Dv), dbeta, dg (T)].
fn recurrent_backward(x: HeadIn, d_o: &[f32], stride: usize, off: usize) -> [Vec<f64>; 5] {
    let t = x.beta.len();
    let (dk, dv) = (x.q.len() / t, x.v.len() / t);
    let f = |a: &[f32]| a.iter().map(|v| *v as f64).collect::<Vec<_>>();
    let (q, k, v, beta, g) = (f(x.q), f(x.k), f(x.v), f(x.beta), f(x.g));
    // states[t + 1] = S after token t
    let mut states = vec![vec![0f64; dk * dv]];
    for i in 0..t {
        let mut s: Vec<f64> = states[i].iter().map(|e| e * g[i].exp()).collect();
        for j in 0..dv {
            let sk: f64 = (0..dk).map(|a| s[a * dv + j] * k[i * dk + a]).sum();
            let u = beta[i] * (v[i * dv + j] - sk);
            (0..dk).for_each(|a| s[a * dv + j] += k[i * dk + a] * u);
        }
        states.push(s);
    }
    let mut r = [
        vec![0f64; t * dk],
        vec![0f64; t * dk],
        vec![0f64; t * dv],
        vec![0f64; t],
        vec![0f64; t],
    ];
    let mut ds = vec![0f64; dk * dv];
    for i in (0..t).rev() {
        let (st, alpha) = (&states[i + 1], g[i].exp());
        let st0: Vec<f64> = states[i].iter().map(|e| e * alpha).collect();
        let d_oi: Vec<f64> = d_o[i * stride + off..][..dv]
            .iter()
            .map(|v| *v as f64)
            .collect();
        for a in 0..dk {
            for j in 0..dv {
                ds[a * dv + j] += q[i * dk + a] * d_oi[j];
                r[0][i * dk + a] += st[a * dv + j] * d_oi[j];
            }
        }
        for j in 0..dv {
            let sk: f64 = (0..dk).map(|a| st0[a * dv + j] * k[i * dk + a]).sum();
            let u = beta[i] * (v[i * dv + j] - sk);
            let du: f64 = (0..dk).map(|a| ds[a * dv + j] * k[i * dk + a]).sum();
            r[3][i] += du * (v[i * dv + j] - sk);
            r[2][i * dv + j] = beta[i] * du;
            for a in 0..dk {
                r[1][i * dk + a] += ds[a * dv + j] * u - st0[a * dv + j] * beta[i] * du;
                ds[a * dv + j] -= k[i * dk + a] * beta[i] * du;
            }
        }
        r[4][i] = (0..dk * dv).map(|e| ds[e] * st0[e]).sum();
        ds.iter_mut().for_each(|e| *e *= alpha);
    }
    r
}

#[test]
fn chunked_backward_matches_recurrent_backward() {
    for chunk in [64, 16] {
        let mut sh = GdnShape::new(2, 4, 32, 32, 4, 1e-6);
        sh.chunk = chunk;
        let (t, vw) = (130, sh.value_width());
        let [qk, v, beta, g] = rule_inputs(&sh, t, 70);
        let x = Inputs::new(&sh, t, &qk, &v, &beta, &g);
        let (mut s, mut o) = (vec![0.0; sh.ssm_state_len()], vec![0.0; t * vw]);
        let mut states = vec![0.0; sh.n_chunks(t) * sh.ssm_state_len()];
        delta::forward(&sh, Kernel::Chunked, x, &mut s, &mut o, Some(&mut states));
        let d_o = normal(t * vw, 71);
        let mut grads = vec![0.0; sh.hv * delta::grad_len(&sh, t)];
        delta::backward(&sh, x, &states, &d_o, &mut grads);
        let gv = GradsView::new(&sh, t, &grads);
        for h in 0..sh.hv {
            let want = recurrent_backward(x.head(h), &d_o, vw, h * sh.dv);
            let got: [Vec<f32>; 5] = [
                (0..t).flat_map(|i| gv.dq(h, i).to_vec()).collect(),
                (0..t).flat_map(|i| gv.dk(h, i).to_vec()).collect(),
                (0..t).flat_map(|i| gv.dv(h, i).to_vec()).collect(),
                gv.dbeta(h).to_vec(),
                gv.dg(h).to_vec(),
            ];
            for (n, (a, b)) in got.iter().zip(&want).enumerate() {
                let scale = b.iter().fold(0f64, |m, v| m.max(v.abs()));
                let err = a
                    .iter()
                    .zip(b)
                    .map(|(x, y)| (*x as f64 - y).abs())
                    .fold(0.0, f64::max);
                assert!(
                    err <= 1e-4 * scale,
                    "chunk {chunk} head {h} grad {n}: {err:e} of {scale:e}"
                );
            }
        }
    }
}
