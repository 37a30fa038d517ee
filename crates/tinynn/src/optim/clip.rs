//! Global L2-norm gradient clipping (Pascanu et al. 2013), as PyTorch's `clip_grad_norm_`:
//! grads are scaled by max_norm / (norm + 1e-6) when the norm is over max_norm.

use super::CHUNK;
use rayon::prelude::*;

/// The L2 norm of all grads: chunk sums in f64, added up a binary tree whose shape depends
/// on the length alone (deterministic on any thread count, and nothing allocated).
pub fn grad_norm(grads: &[f32]) -> f32 {
    tree_sum_sq(grads).sqrt() as f32
}

fn tree_sum_sq(x: &[f32]) -> f64 {
    if x.len() <= CHUNK {
        return sum_sq(x);
    }
    let mid = x.len().div_ceil(2 * CHUNK) * CHUNK;
    let (a, b) = x.split_at(mid);
    let (sa, sb) = rayon::join(|| tree_sum_sq(a), || tree_sum_sq(b));
    sa + sb
}

fn sum_sq(x: &[f32]) -> f64 {
    let mut acc = [0f32; 16];
    let c = x.chunks_exact(16);
    let tail: f64 = c
        .remainder()
        .iter()
        .map(|v| (*v as f64) * (*v as f64))
        .sum();
    for ch in c {
        for i in 0..16 {
            acc[i] += ch[i] * ch[i];
        }
    }
    tail + acc.iter().map(|v| *v as f64).sum::<f64>()
}

/// The global L2 norm of grads and the factor that clips them to max_norm (1 when max_norm
/// is 0 or not exceeded), for an optimizer that scales the gradient as it reads it
/// (`AdamW::step_scaled`) instead of a pass that rewrites it.
pub fn clip_factor(grads: &[f32], max_norm: f32) -> (f32, f32) {
    let _prof = crate::profile::timer(crate::profile::Kind::Optimizer);
    let norm = grad_norm(grads);
    let k = if max_norm > 0.0 && norm > max_norm {
        max_norm / (norm + 1e-6)
    } else {
        1.0
    };
    (norm, k)
}

/// Scale grads so their global L2 norm is at most max_norm (if max_norm > 0); returns the
/// norm before clipping.
pub fn clip_grad_norm(grads: &mut [f32], max_norm: f32) -> f32 {
    let (norm, k) = clip_factor(grads, max_norm);
    if k != 1.0 {
        let _prof = crate::profile::timer(crate::profile::Kind::Optimizer);
        grads
            .par_chunks_mut(CHUNK)
            .for_each(|c| c.iter_mut().for_each(|g| *g *= k));
    }
    norm
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_scales_to_max_norm_and_reports_the_norm_before() {
        let mut g = vec![3.0f32, 4.0];
        assert_eq!(clip_grad_norm(&mut g, 10.0), 5.0);
        assert_eq!(g, vec![3.0, 4.0], "under the limit nothing changes");
        let n = clip_grad_norm(&mut g, 1.0);
        assert_eq!(n, 5.0);
        assert!((g[0] - 0.6).abs() < 1e-6 && (g[1] - 0.8).abs() < 1e-6);
        let mut g = vec![3.0f32, 4.0];
        clip_grad_norm(&mut g, 0.0);
        assert_eq!(g, vec![3.0, 4.0], "max_norm 0 disables clipping");
        // many chunks: the norm of n ones is sqrt(n)
        let mut big = vec![1.0f32; CHUNK * 3 + 7];
        let want = ((CHUNK * 3 + 7) as f32).sqrt();
        assert!((clip_grad_norm(&mut big, 0.0) - want).abs() < 1e-3);
    }
}
