//! Token (and learned position) embedding lookup and its backward, a scatter-add of the
//! output gradient into the rows that were read. Shapes: tokens (N), table (V, C), out (N, C).

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Embedding {
    pub vocab: usize,
    pub dim: usize,
}

impl Embedding {
    pub fn new(vocab: usize, dim: usize) -> Self {
        Self { vocab, dim }
    }

    /// `out[i] = table[tokens[i]]`. Tokens must be below `vocab` (checked).
    pub fn forward(&self, tokens: &[u32], table: &[f32], out: &mut [f32]) {
        let c = self.dim;
        for (row, &tok) in out.chunks_exact_mut(c).zip(tokens) {
            let t = tok as usize;
            assert!(
                t < self.vocab,
                "token {t} is outside the vocabulary of {}",
                self.vocab
            );
            row.copy_from_slice(&table[t * c..(t + 1) * c]);
        }
    }

    /// `out[i] += table[i % t]`: learned positions for rows that are sequences of `t` tokens.
    pub fn forward_positions(&self, t: usize, table: &[f32], out: &mut [f32]) {
        let c = self.dim;
        for (i, row) in out.chunks_exact_mut(c).enumerate() {
            let p = i % t;
            row.iter_mut()
                .zip(&table[p * c..(p + 1) * c])
                .for_each(|(o, e)| *o += e);
        }
    }

    /// `dtable[tokens[i]] += dout[i]`, in row order (repeated tokens sum deterministically).
    pub fn backward(&self, tokens: &[u32], dout: &[f32], dtable: &mut [f32]) {
        let c = self.dim;
        for (row, &tok) in dout.chunks_exact(c).zip(tokens) {
            let t = tok as usize;
            dtable[t * c..(t + 1) * c]
                .iter_mut()
                .zip(row)
                .for_each(|(d, g)| *d += g);
        }
    }

    /// `dtable[i % t] += dout[i]`.
    pub fn backward_positions(&self, t: usize, dout: &[f32], dtable: &mut [f32]) {
        let c = self.dim;
        for (i, row) in dout.chunks_exact(c).enumerate() {
            let p = i % t;
            dtable[p * c..(p + 1) * c]
                .iter_mut()
                .zip(row)
                .for_each(|(d, g)| *d += g);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::test_data;
    use crate::layers::gradcheck::{check, weighted_sum};

    #[test]
    fn embedding_backward_matches_finite_differences() {
        let (v, c, t) = (5, 3, 2);
        let e = Embedding::new(v, c);
        let tokens = [1u32, 4, 1, 0];
        let (wte, wpe, dy) = (
            test_data(v * c, 1),
            test_data(t * c, 2),
            test_data(4 * c, 3),
        );
        let run = |wte: &[f32], wpe: &[f32]| {
            let mut out = vec![0.0; 4 * c];
            e.forward(&tokens, wte, &mut out);
            e.forward_positions(t, wpe, &mut out);
            weighted_sum(&dy, &out)
        };
        let (mut dwte, mut dwpe) = (vec![0.0; v * c], vec![0.0; t * c]);
        e.backward(&tokens, &dy, &mut dwte);
        e.backward_positions(t, &dy, &mut dwpe);
        check("embedding dwte", &wte, &dwte, 1e-2, 1e-3, |p| run(p, &wpe));
        check("embedding dwpe", &wpe, &dwpe, 1e-2, 1e-3, |p| run(&wte, p));
        // unused rows get no gradient; repeated token 1 gets both rows' gradients
        assert!(dwte[2 * c..4 * c].iter().all(|g| *g == 0.0));
        assert_eq!(dwte[c], dy[0] + dy[2 * c]);
    }
}
