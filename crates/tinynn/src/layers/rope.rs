//! Rotary position embedding (Su et al. 2021, "RoFormer") as ggml's `rope`, forward and
//! backward: NORMAL mode (llama) turns adjacent pairs (x[2i], x[2i+1]) of each head, NEOX mode
//! (GPT-NeoX, Qwen2/3, Qwen3.5) turns halves (x[i], x[i + R/2]); only the first R = `n_rot`
//! dims of each head of D turn; llama3 scaling divides pair i's frequency by
//! `freq_factors[i]` (GGUF `rope_freqs.weight`). theta_i = pos * base^(-2i/R) / factor_i, the
//! angles built exactly as [`crate::kernels::rope::Rope`] builds them (repeated f32
//! multiplication, then the divisor), so training and inference rotate by the same bits.
//! The backward turns the gradient back by -theta.
//! Shapes: rows (N, S) with the heads to turn at the start of each row (q then k), D head size.

use super::multiversion;

multiversion! {
    /// Turn each head (of `d` dims, the first 2 * cos.len() turning) in `x` by the angles
    /// whose cos / sin are given; pairs (k, k + R/2) when `neox`, else (2k, 2k + 1).
    fn rotate_heads(x: &mut [f32], d: usize, neox: bool, cos: &[f32], sin: &[f32], sign: f32) {
        let half = cos.len();
        // the two pairings as two loops: the branch stays out of the inner one
        for head in x.chunks_exact_mut(d) {
            if neox {
                let (lo, hi) = head[..2 * half].split_at_mut(half);
                for k in 0..half {
                    let (c, s) = (cos[k], sign * sin[k]);
                    let (x0, x1) = (lo[k], hi[k]);
                    lo[k] = x0 * c - x1 * s;
                    hi[k] = x0 * s + x1 * c;
                }
            } else {
                for k in 0..half {
                    let (c, s) = (cos[k], sign * sin[k]);
                    let (x0, x1) = (head[2 * k], head[2 * k + 1]);
                    head[2 * k] = x0 * c - x1 * s;
                    head[2 * k + 1] = x0 * s + x1 * c;
                }
            }
        }
    }
}

/// Which dims of a head turn, and how.
#[derive(Clone, Debug, PartialEq)]
pub struct RopeSpec {
    /// Head size D: the stride from one head to the next.
    pub head_dim: usize,
    /// Dims R <= D at the start of each head that turn (even).
    pub n_rot: usize,
    pub neox: bool,
    pub base: f32,
    /// llama3 scaling: a divisor per pair (R / 2), or none.
    pub freq_factors: Option<Vec<f32>>,
}

impl RopeSpec {
    /// NORMAL mode over the whole head, no scaling.
    pub fn plain(head_dim: usize, base: f32) -> Self {
        Self {
            head_dim,
            n_rot: head_dim,
            neox: false,
            base,
            freq_factors: None,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Rope {
    /// Head size D (the stride between heads).
    pub head_dim: usize,
    /// Dims R that turn at the start of each head.
    pub n_rot: usize,
    pub neox: bool,
    /// cos and sin of theta for (position, pair): (P, R/2) each.
    cos: Vec<f32>,
    sin: Vec<f32>,
}

impl Rope {
    /// NORMAL-mode tables over whole heads of `head_dim` for positions 0..ctx.
    pub fn new(head_dim: usize, ctx: usize, base: f32) -> Self {
        Self::with(&RopeSpec::plain(head_dim, base), ctx)
    }

    /// Tables for positions 0..ctx of the rotation `spec` describes.
    pub fn with(spec: &RopeSpec, ctx: usize) -> Self {
        assert!(
            spec.n_rot <= spec.head_dim && spec.n_rot.is_multiple_of(2),
            "rope over {} of {} dims: expected an even count within the head",
            spec.n_rot,
            spec.head_dim
        );
        let half = spec.n_rot / 2;
        let theta_scale = spec.base.powf(-2.0 / spec.n_rot as f32);
        let inv: Vec<f32> = (0..half)
            .map(|i| {
                let ff = spec.freq_factors.as_ref().and_then(|f| f.get(i));
                1.0 / ff.copied().unwrap_or(1.0)
            })
            .collect();
        let (mut cos, mut sin) = (
            Vec::with_capacity(ctx * half),
            Vec::with_capacity(ctx * half),
        );
        for pos in 0..ctx {
            let mut theta = pos as f32;
            for f in &inv {
                let (s, c) = (theta * f).sin_cos();
                cos.push(c);
                sin.push(s);
                theta *= theta_scale;
            }
        }
        Self {
            head_dim: spec.head_dim,
            n_rot: spec.n_rot,
            neox: spec.neox,
            cos,
            sin,
        }
    }

    /// The (positions, R/2) cos and sin tables (for a device that turns by the same bits).
    pub fn tables(&self) -> (&[f32], &[f32]) {
        (&self.cos, &self.sin)
    }

    /// Positions the tables cover.
    pub fn ctx(&self) -> usize {
        self.cos.len() / (self.n_rot / 2).max(1)
    }

    /// Turn the first `n_heads` heads of each of the N rows of `x` (row stride `stride`);
    /// row i is at position `pos[i]`, or i % t without `pos`. `inverse` turns by -theta (the
    /// backward).
    #[allow(clippy::too_many_arguments)]
    fn apply(
        &self,
        x: &mut [f32],
        stride: usize,
        n_heads: usize,
        t: usize,
        n: usize,
        pos: Option<&[u32]>,
        inverse: bool,
    ) {
        assert!(
            t <= self.ctx(),
            "{t} positions, rope tables for {}",
            self.ctx()
        );
        let half = self.n_rot / 2;
        let sign = if inverse { -1.0 } else { 1.0 };
        let ctx = self.ctx();
        assert!(
            pos.is_none_or(|p| p.len() >= n && p[..n].iter().all(|&q| (q as usize) < ctx)),
            "pos must give every row a position inside the rope tables ({ctx})"
        );
        for (i, row) in x[..n * stride].chunks_exact_mut(stride).enumerate() {
            let p = pos.map_or(i % t, |p| p[i] as usize);
            let (cos, sin) = (
                &self.cos[p * half..(p + 1) * half],
                &self.sin[p * half..(p + 1) * half],
            );
            let d = self.head_dim;
            rotate_heads(&mut row[..n_heads * d], d, self.neox, cos, sin, sign);
        }
    }

    /// Rotate in place: x (N, S), the first `n_heads` heads of D in each row.
    pub fn forward(&self, x: &mut [f32], stride: usize, n_heads: usize, t: usize, n: usize) {
        self.apply(x, stride, n_heads, t, n, None, false)
    }

    /// [`Self::forward`] and [`Self::backward`] with row i at position `pos[i]` (packed
    /// samples, each counting from 0) when `pos` is given.
    pub fn at<'a>(&'a self, pos: Option<&'a [u32]>) -> RopeAt<'a> {
        RopeAt { rope: self, pos }
    }

    /// The gradient through the rotation, in place (a rotation's transpose is its inverse).
    pub fn backward(&self, dx: &mut [f32], stride: usize, n_heads: usize, t: usize, n: usize) {
        self.apply(dx, stride, n_heads, t, n, None, true)
    }
}

/// A [`Rope`] with the rows' positions: i % t, or `pos[i]` for packed samples.
#[derive(Clone, Copy)]
pub struct RopeAt<'a> {
    pub rope: &'a Rope,
    pub pos: Option<&'a [u32]>,
}

impl RopeAt<'_> {
    pub fn forward(&self, x: &mut [f32], stride: usize, n_heads: usize, t: usize, n: usize) {
        self.rope.apply(x, stride, n_heads, t, n, self.pos, false)
    }

    pub fn backward(&self, dx: &mut [f32], stride: usize, n_heads: usize, t: usize, n: usize) {
        self.rope.apply(dx, stride, n_heads, t, n, self.pos, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_data;
    use crate::layers::gradcheck::{check, weighted_sum};

    #[test]
    fn rope_matches_inference_kernel_bit_for_bit() {
        let (d, heads, t) = (8, 3, 5);
        let r = Rope::new(d, 16, 10000.0);
        let k = crate::kernels::rope::Rope::new(d, 10000.0, false, None);
        let x = test_data(t * heads * d, 1);
        let mut a = x.clone();
        r.forward(&mut a, heads * d, heads, t, t);
        let mut b = x.clone();
        for (pos, row) in b.chunks_exact_mut(heads * d).enumerate() {
            k.apply(row, d, pos);
        }
        assert_eq!(a, b);
    }

    #[test]
    fn neox_partial_scaled_rope_matches_inference_kernel_bit_for_bit() {
        // heads of 8 with 6 dims turning in neox halves, llama3-style divisors
        let (d, r, heads, t) = (8, 6, 3, 5);
        let ff = [1.0f32, 4.0, 8.0];
        for neox in [true, false] {
            let spec = RopeSpec {
                head_dim: d,
                n_rot: r,
                neox,
                base: 500.0,
                freq_factors: Some(ff.to_vec()),
            };
            let rope = Rope::with(&spec, 16);
            let k = crate::kernels::rope::Rope::new(r, 500.0, neox, Some(&ff));
            let x = test_data(t * heads * d, 4);
            let mut a = x.clone();
            rope.forward(&mut a, heads * d, heads, t, t);
            let mut b = x.clone();
            for (pos, row) in b.chunks_exact_mut(heads * d).enumerate() {
                k.apply(row, d, pos);
            }
            assert_eq!(a, b, "neox {neox}");
            assert_ne!(a, x, "the rows turned");
        }
    }

    #[test]
    fn neox_partial_backward_matches_finite_differences() {
        let (d, stride, t, n) = (8, 24, 3, 6);
        let spec = RopeSpec {
            head_dim: d,
            n_rot: 4,
            neox: true,
            base: 50.0,
            freq_factors: Some(vec![1.0, 3.0]),
        };
        let r = Rope::with(&spec, 8);
        let (x, dy) = (test_data(n * stride, 5), test_data(n * stride, 6));
        let run = |x: &[f32]| {
            let mut y = x.to_vec();
            r.forward(&mut y, stride, 2, t, n);
            weighted_sum(&dy, &y)
        };
        let mut dx = dy.clone();
        r.backward(&mut dx, stride, 2, t, n);
        check("rope neox", &x, &dx, 1e-2, 1e-3, run);
        assert_eq!(dx[4..8], dy[4..8], "dims past n_rot pass through");
    }

    #[test]
    fn rope_backward_matches_finite_differences() {
        // rows of 3 heads where only the first 2 turn; positions wrap every t = 3 rows
        let (d, stride, t, n) = (6, 18, 3, 6);
        let r = Rope::new(d, 8, 100.0);
        let (x, dy) = (test_data(n * stride, 2), test_data(n * stride, 3));
        let run = |x: &[f32]| {
            let mut y = x.to_vec();
            r.forward(&mut y, stride, 2, t, n);
            weighted_sum(&dy, &y)
        };
        let mut dx = dy.clone();
        r.backward(&mut dx, stride, 2, t, n);
        check("rope", &x, &dx, 1e-2, 1e-3, run);
        assert_eq!(dx[12..18], dy[12..18], "the third head passes through");
    }
}
