//! Rotary position embedding (Su et al. 2021, "RoFormer"), as ggml's `rope`: the "normal"
//! mode rotates adjacent pairs (x[2i], x[2i+1]) (Llama GGUFs have Q/K permuted for it), the
//! "neox" mode rotates halves (x[i], x[i + n/2]) (GPT-NeoX, Qwen2). Only the first `n_rot`
//! dims of each head turn. Optional per-frequency divisors implement llama3 scaling
//! (GGUF tensor `rope_freqs.weight`).

/// The frequencies of one rotary embedding.
#[derive(Clone, Debug)]
pub struct Rope {
    /// 1 / factor_i, for i < n_rot / 2 (all ones without llama3 scaling).
    inv_freq: Vec<f32>,
    /// base^(-2 / n_rot): theta_i = pos * theta_scale^i, built by repeated multiplication in
    /// f32 exactly as ggml's rope cache does, so angles match llama.cpp's to the bit.
    theta_scale: f32,
    pub n_rot: usize,
    pub neox: bool,
}

impl Rope {
    pub fn new(n_rot: usize, base: f32, neox: bool, freq_factors: Option<&[f32]>) -> Self {
        let inv_freq = (0..n_rot / 2)
            .map(|i| {
                1.0 / freq_factors
                    .and_then(|ff| ff.get(i))
                    .copied()
                    .unwrap_or(1.0)
            })
            .collect();
        Self {
            inv_freq,
            theta_scale: base.powf(-2.0 / n_rot as f32),
            n_rot,
            neox,
        }
    }

    /// Rotate every head of `x` (n_head, D) in place for position `pos`: the angles once,
    /// then each head.
    pub fn apply(&self, x: &mut [f32], head_dim: usize, pos: usize) {
        let half = self.n_rot / 2;
        let mut theta = pos as f32;
        let mut sc = [(0f32, 0f32); 256];
        let mut big = Vec::new();
        let sc: &mut [(f32, f32)] = if half <= sc.len() {
            &mut sc[..half]
        } else {
            big.resize(half, (0f32, 0f32));
            &mut big
        };
        for (sc, f) in sc.iter_mut().zip(&self.inv_freq) {
            *sc = (theta * f).sin_cos();
            theta *= self.theta_scale;
        }
        for head in x.chunks_exact_mut(head_dim) {
            for (i, &(sin, cos)) in sc.iter().enumerate() {
                let (a, b) = if self.neox {
                    (i, i + half)
                } else {
                    (2 * i, 2 * i + 1)
                };
                let (x0, x1) = (head[a], head[b]);
                head[a] = x0 * cos - x1 * sin;
                head[b] = x0 * sin + x1 * cos;
            }
        }
    }

    /// [`Self::apply`] to each row t of `width` in `x` (T, width) at its position `pos(t)`,
    /// rows in parallel.
    pub fn apply_rows(
        &self,
        x: &mut [f32],
        width: usize,
        head_dim: usize,
        pos: impl Fn(usize) -> usize + Sync,
    ) {
        crate::team::par_rows(x, width, 16, |r0, rows| {
            for (r, row) in rows.chunks_exact_mut(width).enumerate() {
                self.apply(row, head_dim, pos(r0 + r));
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn position_zero_is_identity_and_norm_is_kept() {
        let r = Rope::new(4, 10000.0, false, None);
        let mut x = [1.0f32, 2.0, 3.0, 4.0];
        r.apply(&mut x, 4, 0);
        assert_eq!(x, [1.0, 2.0, 3.0, 4.0]);
        r.apply(&mut x, 4, 7);
        let n: f32 = x.iter().map(|v| v * v).sum();
        assert!((n - 30.0).abs() < 1e-4);
    }

    #[test]
    fn first_pair_turns_by_pos_radians() {
        let r = Rope::new(4, 10000.0, false, None);
        let mut x = [1.0f32, 0.0, 1.0, 0.0];
        r.apply(&mut x, 4, 1);
        assert!((x[0] - 1f32.cos()).abs() < 1e-6 && (x[1] - 1f32.sin()).abs() < 1e-6);
        // second pair turns by 1/100 radians
        assert!((x[3] - 0.01f32.sin()).abs() < 1e-6);
        let n = Rope::new(4, 10000.0, true, None);
        let mut y = [1.0f32, 1.0, 0.0, 0.0];
        n.apply(&mut y, 4, 1);
        assert!((y[2] - 1f32.sin()).abs() < 1e-6 && (y[3] - 0.01f32.sin()).abs() < 1e-6);
        let s = Rope::new(4, 10000.0, false, Some(&[1.0, 2.0]));
        let mut z = [1.0f32, 0.0, 1.0, 0.0];
        s.apply(&mut z, 4, 1);
        assert!((z[3] - 0.005f32.sin()).abs() < 1e-6);
    }
}
