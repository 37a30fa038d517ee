//! AdamW (Loshchilov & Hutter 2019, "Decoupled Weight Decay Regularization") in PyTorch's
//! form: `p *= 1 - lr wd` (only where decay applies), then
//! `p -= lr * m_hat / (sqrt(v_hat) + eps)` with bias-corrected moments. One fused pass over
//! params, grads and both moments, in parallel chunks.

use super::CHUNK;
use crate::layers::multiversion;
use rayon::prelude::*;
use std::ops::Range;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamWConfig {
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    pub weight_decay: f32,
}

impl Default for AdamWConfig {
    fn default() -> Self {
        Self {
            beta1: 0.9,
            beta2: 0.95,
            eps: 1e-8,
            weight_decay: 0.1,
        }
    }
}

#[derive(Clone, Debug)]
pub struct AdamW {
    pub cfg: AdamWConfig,
    /// First and second moments, one per parameter.
    pub m: Vec<f32>,
    pub v: Vec<f32>,
    /// Steps taken.
    pub t: u64,
}

/// Constants of one step.
#[derive(Clone, Copy)]
struct StepConsts {
    b1: f32,
    b2: f32,
    eps: f32,
    /// lr / (1 - beta1^t).
    step: f32,
    /// 1 / sqrt(1 - beta2^t).
    inv_sqrt_bc2: f32,
    /// What each gradient is multiplied by as it is read (a clipping factor, or 1).
    grad_scale: f32,
}

multiversion! {
    fn update(p: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32], k: StepConsts, decay: f32) {
        for i in 0..p.len() {
            let gi = g[i] * k.grad_scale;
            let mi = k.b1 * m[i] + (1.0 - k.b1) * gi;
            let vi = k.b2 * v[i] + (1.0 - k.b2) * gi * gi;
            m[i] = mi;
            v[i] = vi;
            p[i] = p[i] * decay - k.step * mi / (vi.sqrt() * k.inv_sqrt_bc2 + k.eps);
        }
    }
}

impl AdamW {
    pub fn new(n_params: usize, cfg: AdamWConfig) -> Self {
        Self {
            cfg,
            m: vec![0.0; n_params],
            v: vec![0.0; n_params],
            t: 0,
        }
    }

    /// One fused, multithreaded update. `decay_ranges` are the flat ranges of `params` that
    /// get weight decay, in increasing order and not overlapping (as a model lists them).
    pub fn step(
        &mut self,
        params: &mut [f32],
        grads: &[f32],
        lr: f32,
        decay_ranges: &[Range<usize>],
    ) {
        self.step_scaled(params, grads, 1.0, lr, decay_ranges)
    }

    /// [`AdamW::step`] on `grad_scale` times the gradient (a clipping factor from
    /// `clip_factor`), without a pass that rewrites it: the same bits as scaling the
    /// gradient first, since each gradient is scaled by the same one f32 product.
    pub fn step_scaled(
        &mut self,
        params: &mut [f32],
        grads: &[f32],
        grad_scale: f32,
        lr: f32,
        decay_ranges: &[Range<usize>],
    ) {
        let _prof = crate::profile::timer(crate::profile::Kind::Optimizer);
        let n = self.m.len();
        assert!(
            params.len() == n && grads.len() == n,
            "AdamW for {n} params got {} params, {} grads",
            params.len(),
            grads.len()
        );
        assert!(
            decay_ranges.windows(2).all(|w| w[0].end <= w[1].start)
                && decay_ranges.iter().all(|r| r.start <= r.end && r.end <= n),
            "decay ranges must be increasing, disjoint and inside the {n} params"
        );
        self.t += 1;
        let c = self.cfg;
        let k = StepConsts {
            b1: c.beta1,
            b2: c.beta2,
            eps: c.eps,
            step: lr / (1.0 - (c.beta1 as f64).powi(self.t as i32)) as f32,
            inv_sqrt_bc2: (1.0 / (1.0 - (c.beta2 as f64).powi(self.t as i32)).sqrt()) as f32,
            grad_scale,
        };
        let decay = 1.0 - lr * c.weight_decay;
        params
            .par_chunks_mut(CHUNK)
            .zip(grads.par_chunks(CHUNK))
            .zip(
                self.m
                    .par_chunks_mut(CHUNK)
                    .zip(self.v.par_chunks_mut(CHUNK)),
            )
            .enumerate()
            .for_each(|(ci, ((p, g), (m, v)))| {
                // walk the chunk as segments alternating between no decay and decay
                let (s, e) = (ci * CHUNK, ci * CHUNK + p.len());
                let mut pos = s;
                let mut seg = |a: usize, b: usize, d: f32| {
                    let r = a - s..b - s;
                    update(
                        &mut p[r.clone()],
                        &g[r.clone()],
                        &mut m[r.clone()],
                        &mut v[r],
                        k,
                        d,
                    );
                };
                for r in decay_ranges {
                    let (a, b) = (r.start.max(pos), r.end.min(e));
                    if a >= b {
                        continue;
                    }
                    seg(pos, a, 1.0);
                    seg(a, b, decay);
                    pos = b;
                }
                seg(pos, e, 1.0);
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Textbook AdamW in f64, one parameter.
    fn reference(p0: f64, grads: &[f64], lr: f64, wd: f64, decay: bool) -> f64 {
        let (b1, b2, eps) = (0.9f64, 0.95f64, 1e-8f64);
        let (mut p, mut m, mut v) = (p0, 0.0, 0.0);
        for (t, g) in grads.iter().enumerate() {
            let t = (t + 1) as i32;
            if decay {
                p *= 1.0 - lr * wd;
            }
            m = b1 * m + (1.0 - b1) * g;
            v = b2 * v + (1.0 - b2) * g * g;
            let (mh, vh) = (m / (1.0 - b1.powi(t)), v / (1.0 - b2.powi(t)));
            p -= lr * mh / (vh.sqrt() + eps);
        }
        p
    }

    #[test]
    fn adamw_matches_reference_and_decays_only_given_ranges() {
        // sizes over CHUNK so ranges cross chunk boundaries
        let n = CHUNK * 2 + 100;
        let mut params: Vec<f32> = (0..n).map(|i| ((i % 97) as f32 - 48.0) / 50.0).collect();
        let p0 = params.clone();
        let grad_of = |i: usize, step: usize| ((i * 7 + step * 13) % 31) as f32 / 31.0 - 0.4;
        let ranges = [10..CHUNK + 5, CHUNK * 2 + 50..CHUNK * 2 + 60];
        let mut opt = AdamW::new(n, AdamWConfig::default());
        let lr = 1e-2;
        for step in 0..3 {
            let g: Vec<f32> = (0..n).map(|i| grad_of(i, step)).collect();
            opt.step(&mut params, &g, lr, &ranges);
        }
        assert_eq!(opt.t, 3);
        for i in [
            0,
            9,
            10,
            11,
            CHUNK - 1,
            CHUNK,
            CHUNK + 4,
            CHUNK + 5,
            n - 45,
            n - 40,
            n - 1,
        ] {
            let decay = ranges.iter().any(|r| r.contains(&i));
            let gs: Vec<f64> = (0..3).map(|s| grad_of(i, s) as f64).collect();
            let want = reference(p0[i] as f64, &gs, lr as f64, 0.1, decay);
            assert!(
                (params[i] as f64 - want).abs() < 1e-6,
                "param {i}: {} vs {want} (decay {decay})",
                params[i]
            );
        }
        // with zero gradients, only decayed params move
        let mut p = vec![1.0f32; 4];
        let mut o = AdamW::new(4, AdamWConfig::default());
        let only_second = [1..2, 4..4];
        o.step(&mut p, &[0.0; 4], 0.5, &only_second);
        assert_eq!(p, vec![1.0, 0.95, 1.0, 1.0]);
    }

    /// Clipping inside the update gives the bits of clipping the gradient first.
    #[test]
    fn scaled_step_equals_clipping_then_stepping() {
        let n = CHUNK + 33;
        let g: Vec<f32> = (0..n)
            .map(|i| ((i * 11 % 29) as f32 - 14.0) * 0.7)
            .collect();
        let p0: Vec<f32> = (0..n).map(|i| (i % 13) as f32 * 0.1).collect();
        let (mut a, mut b) = (p0.clone(), p0);
        let (mut oa, mut ob) = (
            AdamW::new(n, AdamWConfig::default()),
            AdamW::new(n, AdamWConfig::default()),
        );
        for _ in 0..2 {
            let mut gc = g.clone();
            let norm = crate::optim::clip_grad_norm(&mut gc, 1.0);
            oa.step(&mut a, &gc, 1e-2, &[0..n / 2, n - 3..n]);
            let (norm2, k) = crate::optim::clip_factor(&g, 1.0);
            assert_eq!(norm, norm2);
            assert!(k < 1.0, "the test gradient is over the limit");
            ob.step_scaled(&mut b, &g, k, 1e-2, &[0..n / 2, n - 3..n]);
        }
        assert_eq!(a, b);
        assert_eq!((oa.m, oa.v), (ob.m, ob.v));
    }
}
