//! Forward tests of the GDN mixer core: the chunked kernel against the recurrent one, the
//! whole forward against a plain f64 transcription of the spec (module doc), state carry
//! from prefill into decode, training forward against inference, and serial against parallel.
//! Shapes as in the module doc.

use super::delta::{self, Inputs, Kernel};
use super::*;
use crate::kernels::test_data;
use crate::layers::serial;

/// n samples of about N(0, 1) (Box-Muller on the uniform test data).
pub(super) fn normal(n: usize, seed: u64) -> Vec<f32> {
    let u = test_data(2 * n, seed);
    (0..n)
        .map(|i| {
            let (a, b) = ((u[2 * i] + 1.0) / 2.0, u[2 * i + 1]);
            let r = (-2.0 * (a.max(1e-7) as f64).ln()).sqrt();
            (r * (std::f64::consts::PI * b as f64).cos()) as f32
        })
        .collect()
}

/// Parameters and inputs of a realistic scale for t tokens.
pub(super) struct Case {
    pub conv_w: Vec<f32>,
    pub dt_bias: Vec<f32>,
    pub ssm_a: Vec<f32>,
    pub norm_w: Vec<f32>,
    pub qkv: Vec<f32>,
    pub z: Vec<f32>,
    pub b: Vec<f32>,
    pub a: Vec<f32>,
}

impl Case {
    pub fn new(sh: &GdnShape, t: usize, seed: u64) -> Self {
        let (w, hv) = (sh.conv_channels(), sh.hv);
        let scaled = |n, s, k: f32| normal(n, s).into_iter().map(|v| k * v).collect();
        Self {
            conv_w: scaled(w * sh.kernel, seed, 0.4),
            dt_bias: scaled(hv, seed + 1, 0.5),
            ssm_a: normal(hv, seed + 2)
                .iter()
                .map(|v| -(0.5 * v).exp())
                .collect(),
            norm_w: normal(sh.dv, seed + 3)
                .iter()
                .map(|v| 1.0 + 0.2 * v)
                .collect(),
            qkv: normal(t * w, seed + 4),
            z: normal(t * sh.value_width(), seed + 5),
            b: normal(t * hv, seed + 6),
            a: normal(t * hv, seed + 7),
        }
    }

    pub fn params(&self) -> GdnParams<'_> {
        GdnParams {
            conv_w: &self.conv_w,
            dt_bias: &self.dt_bias,
            ssm_a: &self.ssm_a,
            norm_w: &self.norm_w,
        }
    }

    pub fn inputs(&self) -> (&[f32], &[f32], &[f32], &[f32]) {
        (&self.qkv, &self.z, &self.b, &self.a)
    }
}

pub(super) fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Delta-rule inputs as the layer makes them: unit q (times 1/sqrt(Dk)) and k rows,
/// v ~ N(0, 1), beta = sigmoid(N(0, 1)), g = softplus(N(0, 1)) * -exp(N(0, 0.5)).
pub(super) fn rule_inputs(sh: &GdnShape, t: usize, seed: u64) -> [Vec<f32>; 4] {
    let mut qk = normal(2 * sh.hk * t * sh.dk, seed);
    for (r, row) in qk.chunks_exact_mut(sh.dk).enumerate() {
        let s = if r < sh.hk * t { sh.q_scale } else { 1.0 };
        let n = row.iter().map(|v| v * v).sum::<f32>().sqrt();
        row.iter_mut().for_each(|v| *v *= s / n);
    }
    let v = normal(sh.hv * t * sh.dv, seed + 1);
    let beta = normal(sh.hv * t, seed + 2)
        .iter()
        .map(|x| 1.0 / (1.0 + (-x).exp()))
        .collect();
    let (x, y) = (normal(sh.hv * t, seed + 3), normal(sh.hv * t, seed + 4));
    let g = x
        .iter()
        .zip(&y)
        .map(|(x, y)| -x.exp().ln_1p() * (0.5 * y).exp())
        .collect();
    [qk, v, beta, g]
}

#[test]
fn chunked_delta_rule_matches_recurrent() {
    for chunk in [64, 32, 16] {
        let mut sh = GdnShape::new(2, 4, 64, 64, 4, 1e-6);
        sh.chunk = chunk;
        chunked_matches_recurrent(&sh);
    }
}

fn chunked_matches_recurrent(sh: &GdnShape) {
    let sh = *sh;
    // a realistic incoming state: 50 tokens through the recurrent rule
    let [qk, v, beta, g] = rule_inputs(&sh, 50, 10);
    let mut s0 = vec![0.0; sh.ssm_state_len()];
    let mut o = vec![0.0; sh.hv * 50 * sh.dv];
    let x = Inputs::new(&sh, 50, &qk, &v, &beta, &g);
    delta::forward(&sh, Kernel::Recurrent, x, &mut s0, &mut o, None);
    let mut worst = 0f32;
    for (i, t) in [1, 7, 64, 100, 130].into_iter().enumerate() {
        let [qk, v, beta, g] = rule_inputs(&sh, t, 20 + i as u64);
        let x = Inputs::new(&sh, t, &qk, &v, &beta, &g);
        let run = |k| {
            let (mut s, mut o) = (s0.clone(), vec![0.0; sh.hv * t * sh.dv]);
            delta::forward(&sh, k, x, &mut s, &mut o, None);
            (s, o)
        };
        let ((sr, or), (sc, oc)) = (run(Kernel::Recurrent), run(Kernel::Chunked));
        let (ds, d_o) = (max_diff(&sr, &sc), max_diff(&or, &oc));
        assert!(
            ds <= 1e-5 && d_o <= 1e-5,
            "T = {t}: state {ds:e}, output {d_o:e}"
        );
        let big = or.iter().fold(0f32, |m, v| m.max(v.abs()));
        assert!(big > 0.02, "T = {t}: outputs too small to test");
        worst = worst.max(ds).max(d_o);
    }
    eprintln!(
        "chunk {}: chunked vs recurrent max |diff| {worst:e}",
        sh.chunk
    );
}

/// The whole forward from a zero state, in f64, written straight from the module doc.
fn reference(sh: &GdnShape, c: &Case, t: usize) -> Vec<f64> {
    let (w, hk, hv, dk, dv, kk) = (sh.conv_channels(), sh.hk, sh.hv, sh.dk, sh.dv, sh.kernel);
    let f = |x: &f32| *x as f64;
    let silu = |x: f64| x / (1.0 + (-x).exp());
    let mut x = vec![0f64; t * w];
    for tt in 0..t {
        for ch in 0..w {
            let mut acc = 0.0;
            for j in 0..kk {
                if let Some(r) = (tt + j).checked_sub(kk - 1) {
                    acc += f(&c.conv_w[ch * kk + j]) * f(&c.qkv[r * w + ch]);
                }
            }
            x[tt * w + ch] = silu(acc);
        }
    }
    for row in x.chunks_exact_mut(w) {
        for (hh, head) in row[..2 * hk * dk].chunks_exact_mut(dk).enumerate() {
            let n = (head.iter().map(|v| v * v).sum::<f64>() + sh.eps_l2 as f64).sqrt();
            let s = if hh < hk { sh.q_scale as f64 } else { 1.0 };
            head.iter_mut().for_each(|v| *v *= s / n);
        }
    }
    let mut out = vec![0f64; t * hv * dv];
    for h in 0..hv {
        let mut s = vec![0f64; dk * dv];
        for tt in 0..t {
            let row = &x[tt * w..(tt + 1) * w];
            let (q, k) = (
                &row[(h % hk) * dk..][..dk],
                &row[(hk + h % hk) * dk..][..dk],
            );
            let v = &row[2 * hk * dk + h * dv..][..dv];
            let beta = 1.0 / (1.0 + (-f(&c.b[tt * hv + h])).exp());
            let xg = f(&c.a[tt * hv + h]) + f(&c.dt_bias[h]);
            let g = xg.exp().ln_1p() * f(&c.ssm_a[h]);
            s.iter_mut().for_each(|e| *e *= g.exp());
            let mut o = vec![0f64; dv];
            for j in 0..dv {
                let sk: f64 = (0..dk).map(|i| s[i * dv + j] * k[i]).sum();
                let u = beta * (v[j] - sk);
                (0..dk).for_each(|i| s[i * dv + j] += k[i] * u);
                o[j] = (0..dk).map(|i| s[i * dv + j] * q[i]).sum();
            }
            let r = 1.0 / (o.iter().map(|v| v * v).sum::<f64>() / dv as f64 + sh.eps as f64).sqrt();
            for j in 0..dv {
                let zz = f(&c.z[tt * hv * dv + h * dv + j]);
                out[tt * hv * dv + h * dv + j] = o[j] * r * f(&c.norm_w[j]) * silu(zz);
            }
        }
    }
    out
}

#[test]
fn forward_matches_f64_reference() {
    let mut sh = GdnShape::new(2, 4, 16, 8, 4, 1e-6);
    sh.chunk = 8;
    for t in [1, 2, 5, 20, 37] {
        let c = Case::new(&sh, t, 30 + t as u64);
        let want = reference(&sh, &c, t);
        for k in [Kernel::Recurrent, Kernel::Chunked] {
            let (mut st, mut out) = (GdnState::new(&sh), vec![0.0; t * sh.value_width()]);
            forward_with(&sh, c.params(), c.inputs(), &mut st, &mut out, k);
            let err = out
                .iter()
                .zip(&want)
                .map(|(a, b)| (*a as f64 - b).abs())
                .fold(0.0, f64::max);
            assert!(err < 1e-4, "T = {t}, {k:?}: max error {err:e}");
        }
    }
}

#[test]
fn prefill_then_decode_matches_one_call() {
    let sh = GdnShape::new(2, 4, 32, 32, 4, 1e-6);
    let (t, t1, vw) = (100, 60, sh.value_width());
    let (w, hv) = (sh.conv_channels(), sh.hv);
    let c = Case::new(&sh, t, 40);
    let (mut st, mut out) = (GdnState::new(&sh), vec![0.0; t * vw]);
    forward(&sh, c.params(), &c.qkv, &c.z, &c.b, &c.a, &mut st, &mut out);
    let (mut st2, mut out2) = (GdnState::new(&sh), vec![0.0; t * vw]);
    let p = c.params();
    forward(
        &sh,
        p,
        &c.qkv[..t1 * w],
        &c.z[..t1 * vw],
        &c.b[..t1 * hv],
        &c.a[..t1 * hv],
        &mut st2,
        &mut out2[..t1 * vw],
    );
    for i in t1..t {
        let (x, z) = (&c.qkv[i * w..(i + 1) * w], &c.z[i * vw..(i + 1) * vw]);
        let (b, a) = (&c.b[i * hv..(i + 1) * hv], &c.a[i * hv..(i + 1) * hv]);
        forward(
            &sh,
            p,
            x,
            z,
            b,
            a,
            &mut st2,
            &mut out2[i * vw..(i + 1) * vw],
        );
    }
    let (d_o, dc, ds) = (
        max_diff(&out, &out2),
        max_diff(&st.conv, &st2.conv),
        max_diff(&st.s, &st2.s),
    );
    assert!(
        d_o <= 1e-5 && dc == 0.0 && ds <= 1e-5,
        "output {d_o:e}, conv state {dc:e}, state {ds:e}"
    );
    // the conv state is the last K-1 input rows
    assert_eq!(st.conv, c.qkv[(t - 3) * w..]);
}

#[test]
fn forward_train_matches_forward() {
    let mut sh = GdnShape::new(2, 4, 8, 8, 4, 1e-6);
    sh.chunk = 8;
    for t in [5, 70] {
        let c = Case::new(&sh, t, 50 + t as u64);
        let (mut st, mut out) = (GdnState::new(&sh), vec![0.0; t * sh.value_width()]);
        forward(&sh, c.params(), &c.qkv, &c.z, &c.b, &c.a, &mut st, &mut out);
        let (mut saved, mut out2) = (GdnSaved::new(&sh, t), vec![0.0; t * sh.value_width()]);
        forward_train(
            &sh,
            c.params(),
            &c.qkv,
            &c.z,
            &c.b,
            &c.a,
            &mut saved,
            &mut out2,
        );
        let d = max_diff(&out, &out2);
        assert!(d <= 1e-5, "T = {t}: {d:e}");
    }
}

#[test]
fn serial_matches_parallel_bit_for_bit() {
    let sh = GdnShape::new(2, 8, 64, 64, 4, 1e-6);
    let t = 150;
    let c = Case::new(&sh, t, 60);
    let run = || {
        let (mut st, mut out) = (GdnState::new(&sh), vec![0.0; t * sh.value_width()]);
        forward(&sh, c.params(), &c.qkv, &c.z, &c.b, &c.a, &mut st, &mut out);
        (st, out)
    };
    assert!(run() == serial(run));
}
