//! Fused softmax + cross-entropy: one pass per row of logits gives the row's loss
//! `log(sum(exp(z))) - z[target]` and overwrites the logits with the gradient
//! `(softmax(z) - onehot(target)) * scale`, so the probabilities are never stored apart.
//! Shapes: logits (N, V), targets (N), losses (N). A target of [`IGNORE`] (a padded or
//! masked position, as PyTorch's `ignore_index`) has loss 0 and a zero gradient.
//! [`cross_entropy_soft`] takes a distribution per row instead of a token (distillation, the
//! gradient of a KL divergence): loss `log(sum(exp(z))) - sum(p z)`, gradient
//! `(softmax(z) - p) * scale`.

use super::act::{exp_approx, exp_sum16, max16};
use super::{in_serial, multiversion};
use rayon::prelude::*;

multiversion! {
    /// Loss of one row; overwrites the row with its gradient times `scale` when `grad`.
    fn row_loss(z: &mut [f32], target: usize, scale: f32, grad: bool) -> f32 {
        let m = max16(z);
        let zt = z[target];
        if !grad {
            let mut acc = [0f32; 16];
            let c = z.chunks_exact(16);
            let mut sum: f32 = c.remainder().iter().map(|v| exp_approx(v - m)).sum();
            for ch in c {
                for i in 0..16 {
                    acc[i] += exp_approx(ch[i] - m);
                }
            }
            sum += acc.iter().sum::<f32>();
            return sum.ln() + m - zt;
        }
        let sum = exp_sum16(z, m);
        let k = scale / sum;
        for v in z.iter_mut() {
            *v *= k;
        }
        z[target] -= scale;
        sum.ln() + m - zt
    }
}

/// Per-row cross-entropies H(p, softmax(z)) (N) of logits (N, V) against distributions
/// `probs` (N, V); with `grad_scale`, the logits become the gradient of their sum times it.
/// A row of zeros in `probs` has loss 0 and a zero gradient.
pub fn cross_entropy_soft(
    logits: &mut [f32],
    probs: &[f32],
    losses: &mut [f32],
    v: usize,
    grad_scale: Option<f32>,
) {
    let n = probs.len() / v;
    let logits = &mut logits[..n * v];
    logits
        .par_chunks_mut(v)
        .zip(probs.par_chunks(v))
        .zip(losses[..n].par_iter_mut())
        .for_each(|((z, p), loss)| {
            if p.iter().all(|&q| q == 0.0) {
                // a row of zeros carries no loss (as IGNORE does for tokens)
                *loss = 0.0;
                if grad_scale.is_some() {
                    z.fill(0.0);
                }
                return;
            }
            let m = z.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
            let sum: f64 = z.iter().map(|&x| ((x - m) as f64).exp()).sum();
            let lse = sum.ln() + m as f64;
            let dot: f64 = z.iter().zip(p).map(|(&x, &q)| x as f64 * q as f64).sum();
            *loss = (lse - dot) as f32;
            if let Some(s) = grad_scale {
                for (x, &q) in z.iter_mut().zip(p) {
                    *x = ((((*x as f64) - lse).exp() - q as f64) * s as f64) as f32;
                }
            }
        });
}

/// The target of a row that carries no loss.
pub const IGNORE: u32 = u32::MAX;

/// Per-row losses (N) of logits (N, V) against targets; if `grad_scale` is given, the logits
/// become d(sum of losses * grad_scale)/d logits. Rows run in parallel blocks.
pub fn cross_entropy(
    logits: &mut [f32],
    targets: &[u32],
    losses: &mut [f32],
    v: usize,
    grad_scale: Option<f32>,
) {
    let n = targets.len();
    let logits = &mut logits[..n * v];
    let (grad, scale) = (grad_scale.is_some(), grad_scale.unwrap_or(0.0));
    for &t in targets {
        assert!(
            t == IGNORE || (t as usize) < v,
            "target {t} is outside the vocabulary of {v}"
        );
    }
    let rows = if in_serial() {
        n.max(1)
    } else {
        (32768 / v).max(1)
    };
    logits
        .par_chunks_mut(rows * v)
        .zip(losses[..n].par_chunks_mut(rows))
        .zip(targets.par_chunks(rows))
        .for_each(|((z, l), t)| {
            for ((row, loss), &tg) in z.chunks_exact_mut(v).zip(l.iter_mut()).zip(t) {
                if tg == IGNORE {
                    *loss = 0.0;
                    if grad {
                        row.fill(0.0);
                    }
                    continue;
                }
                *loss = row_loss(row, tg as usize, scale, grad);
            }
        });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_data;
    use crate::layers::gradcheck::check;

    #[test]
    fn cross_entropy_gradient_matches_finite_differences() {
        let (n, v) = (3, 37);
        let z: Vec<f32> = test_data(n * v, 1).iter().map(|x| 3.0 * x).collect();
        let targets = [5u32, 0, 36];
        let mut losses = vec![0.0; n];
        let run = |z: &[f32]| {
            let mut z = z.to_vec();
            let mut l = vec![0.0; n];
            cross_entropy(&mut z, &targets, &mut l, v, None);
            l.iter().map(|x| *x as f64).sum::<f64>() * 0.5
        };
        let mut g = z.clone();
        cross_entropy(&mut g, &targets, &mut losses, v, Some(0.5));
        check("cross-entropy", &z, &g, 1e-2, 1e-3, run);
        // the loss of a row is -log softmax at the target
        let row = &z[..v];
        let lse = row.iter().map(|x| (*x as f64).exp()).sum::<f64>().ln();
        assert!((losses[0] as f64 - (lse - row[5] as f64)).abs() < 1e-5);
        // uniform logits give ln V
        let mut u = vec![0.25; v];
        let mut l = [0.0];
        cross_entropy(&mut u, &[3], &mut l, v, None);
        assert!((l[0] - (v as f32).ln()).abs() < 1e-5);
    }

    #[test]
    fn soft_cross_entropy_gradient_matches_finite_differences_and_one_hot_is_the_hard_loss() {
        let (n, v) = (3, 29);
        let z: Vec<f32> = test_data(n * v, 4).iter().map(|x| 3.0 * x).collect();
        // rows of a softmax of other logits: proper distributions
        let mut p: Vec<f32> = test_data(n * v, 5);
        for row in p.chunks_exact_mut(v) {
            let s: f32 = row.iter().map(|x| x.exp()).sum();
            row.iter_mut().for_each(|x| *x = x.exp() / s);
        }
        let run = |z: &[f32]| {
            let mut z = z.to_vec();
            let mut l = vec![0.0; n];
            cross_entropy_soft(&mut z, &p, &mut l, v, None);
            l.iter().map(|x| *x as f64).sum::<f64>() * 0.5
        };
        let (mut g, mut l) = (z.clone(), vec![0.0; n]);
        cross_entropy_soft(&mut g, &p, &mut l, v, Some(0.5));
        check("soft cross-entropy", &z, &g, 1e-2, 1e-3, run);
        let mut onehot = vec![0.0; v];
        onehot[7] = 1.0;
        let (mut a, mut b) = (z[..v].to_vec(), z[..v].to_vec());
        let (mut la, mut lb) = ([0.0], [0.0]);
        cross_entropy_soft(&mut a, &onehot, &mut la, v, None);
        cross_entropy(&mut b, &[7], &mut lb, v, None);
        assert!((la[0] - lb[0]).abs() < 1e-4, "{la:?} vs {lb:?}");
    }

    #[test]
    fn ignored_rows_have_no_loss_and_no_gradient() {
        let (n, v) = (3, 19);
        let z = test_data(n * v, 2);
        let mut g = z.clone();
        let mut losses = vec![9.0; n];
        cross_entropy(&mut g, &[4, IGNORE, 7], &mut losses, v, Some(1.0));
        assert_eq!(losses[1], 0.0);
        assert!(g[v..2 * v].iter().all(|x| *x == 0.0));
        assert!(losses[0] > 0.0 && losses[2] > 0.0);
        // the other rows are as without the ignored one
        let mut g2 = z.clone();
        let mut l2 = vec![0.0; n];
        cross_entropy(&mut g2, &[4, 0, 7], &mut l2, v, Some(1.0));
        assert_eq!((losses[0], losses[2]), (l2[0], l2[2]));
        assert_eq!(&g[..v], &g2[..v]);
    }
}
