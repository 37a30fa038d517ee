//! Rotary position embedding (Su et al. 2021, "RoFormer") in ggml's NORMAL mode, the one
//! llama.cpp uses for `general.architecture = llama`: adjacent pairs (x[2i], x[2i+1]) of each
//! head turn by theta_i = pos * base^(-2i/D). The angles are built exactly as
//! [`crate::kernels::rope::Rope`] builds them (repeated f32 multiplication), so training and
//! inference rotate by the same bits. The backward turns the gradient back by -theta.
//! Shapes: rows (N, S) with the heads to turn at the start of each row (q then k), D head size.

use super::multiversion;

multiversion! {
    /// Turn each head (of 2 * cos.len()) in `x` by the angles whose cos / sin are given.
    fn rotate_heads(x: &mut [f32], cos: &[f32], sin: &[f32], sign: f32) {
        let half = cos.len();
        for head in x.chunks_exact_mut(2 * half) {
            for k in 0..half {
                let (c, s) = (cos[k], sign * sin[k]);
                let (x0, x1) = (head[2 * k], head[2 * k + 1]);
                head[2 * k] = x0 * c - x1 * s;
                head[2 * k + 1] = x0 * s + x1 * c;
            }
        }
    }
}

#[derive(Clone, Debug)]
pub struct Rope {
    pub head_dim: usize,
    /// cos and sin of theta for (position, pair): (P, D/2) each.
    cos: Vec<f32>,
    sin: Vec<f32>,
}

impl Rope {
    /// Tables for positions 0..ctx.
    pub fn new(head_dim: usize, ctx: usize, base: f32) -> Self {
        let half = head_dim / 2;
        let theta_scale = base.powf(-2.0 / head_dim as f32);
        let (mut cos, mut sin) = (
            Vec::with_capacity(ctx * half),
            Vec::with_capacity(ctx * half),
        );
        for pos in 0..ctx {
            let mut theta = pos as f32;
            for _ in 0..half {
                let (s, c) = theta.sin_cos();
                cos.push(c);
                sin.push(s);
                theta *= theta_scale;
            }
        }
        Self { head_dim, cos, sin }
    }

    /// Positions the tables cover.
    pub fn ctx(&self) -> usize {
        self.cos.len() / (self.head_dim / 2).max(1)
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
        let half = self.head_dim / 2;
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
            rotate_heads(&mut row[..n_heads * self.head_dim], cos, sin, sign);
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
