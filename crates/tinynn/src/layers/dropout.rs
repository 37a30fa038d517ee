//! Inverted dropout (Srivastava et al. 2014, JMLR 15): in training each element is kept with
//! probability 1 - p and scaled by 1 / (1 - p), so the expectation is unchanged. The mask is
//! counter-based (as Philox-style dropout in cuDNN / JAX): whether element (row, col) of an
//! (N, K) input is kept is a hash of (key, row0 + row, col). The backward regenerates the
//! forward's mask instead of storing it, and the result does not depend on how rows are
//! split among threads or shards.

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Dropout {
    /// Probability of dropping an element, in [0, 1).
    pub p: f32,
    /// Selects the mask: one per step, layer and product.
    pub key: u64,
    /// Global index of the first row given to [`Dropout::apply`].
    pub row0: usize,
}

/// SplitMix64's finaliser (Steele et al. 2014): a bijection that scatters nearby inputs.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Dropout {
    pub fn new(p: f32, key: u64) -> Self {
        assert!((0.0..1.0).contains(&p), "dropout {p} is outside [0, 1)");
        Self { p, key, row0: 0 }
    }

    /// Another, independent mask (of sub-product `i`).
    pub fn part(self, i: u64) -> Self {
        Self {
            key: mix(self.key ^ mix(i)),
            ..self
        }
    }

    /// The same mask for rows starting at global row `row0`.
    pub fn from_row(self, row0: usize) -> Self {
        Self { row0, ..self }
    }

    /// Whether element (row, col) is kept, row counted from `row0`.
    pub fn keep(&self, row: usize, col: usize) -> bool {
        let h = mix(self.key ^ (((self.row0 + row) as u64) << 24 ^ col as u64));
        // the top 24 bits as a uniform in [0, 1)
        (h >> 40) as f32 * (1.0 / (1u64 << 24) as f32) >= self.p
    }

    /// `out (N, K) = x ⊙ mask / (1 - p)`. Being linear, this is also its own backward
    /// (dx = dy ⊙ mask / (1 - p)).
    pub fn apply(&self, x: &[f32], out: &mut [f32], k: usize, n: usize) {
        let s = 1.0 / (1.0 - self.p);
        let rows = out[..n * k].chunks_exact_mut(k).zip(x.chunks_exact(k));
        for (i, (o, x)) in rows.enumerate() {
            for (j, (o, x)) in o.iter_mut().zip(x).enumerate() {
                *o = if self.keep(i, j) { x * s } else { 0.0 };
            }
        }
    }

    /// [`Dropout::apply`] in place.
    pub fn apply_in_place(&self, x: &mut [f32], k: usize, n: usize) {
        let s = 1.0 / (1.0 - self.p);
        for (i, row) in x[..n * k].chunks_exact_mut(k).enumerate() {
            for (j, v) in row.iter_mut().enumerate() {
                *v = if self.keep(i, j) { *v * s } else { 0.0 };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_about_one_minus_p_scaled_and_the_mask_is_a_function_of_the_global_row() {
        let (n, k) = (64, 100);
        let x = vec![1.0f32; n * k];
        let mut out = vec![0.0; n * k];
        let d = Dropout::new(0.25, 7);
        d.apply(&x, &mut out, k, n);
        let kept = out.iter().filter(|&&v| v != 0.0).count() as f64 / (n * k) as f64;
        assert!((kept - 0.75).abs() < 0.02, "kept {kept}");
        assert!(out
            .iter()
            .all(|&v| v == 0.0 || (v - 1.0 / 0.75).abs() < 1e-6));
        // rows 10.. alone, told where they start, get the same mask
        let mut tail = vec![0.0; (n - 10) * k];
        d.from_row(10).apply(&x[10 * k..], &mut tail, k, n - 10);
        assert_eq!(tail, out[10 * k..]);
        // in place equals out of place; another key or part is another mask
        let mut y = x.clone();
        d.apply_in_place(&mut y, k, n);
        assert_eq!(y, out);
        for other in [Dropout::new(0.25, 8), d.part(1)] {
            let mut o = vec![0.0; n * k];
            other.apply(&x, &mut o, k, n);
            assert_ne!(o, out);
        }
    }
}
