//! A left operand packed once into `bf16gemm`'s layout and multiplied by several right
//! operands in turn (prefill on AMX, `qmatmul_amx`: the tokens X against a model's weights, a
//! chunk of rows at a time), each product on the calling thread.

use super::bf16gemm::{run_tiles, with_b_pack, Kernel, Out, View, NR};
use super::bf16pack::{pack_a, pack_b};

/// A left operand packed once for several products with different right operands (prefill:
/// the tokens X against a model's weights, a chunk of rows at a time).
pub struct PackedA {
    data: Vec<u32>,
    m: usize,
    k: usize,
    kp: usize,
    kernel: Kernel,
}

impl PackedA {
    /// Packs A (m, k) for `kernel`.
    ///
    /// # Safety
    /// The view must reach every (i, kk) with i < m, kk < k; the kernel must be available.
    pub unsafe fn new(kernel: Kernel, a: View, m: usize, k: usize, par: bool) -> Self {
        let (row_pad, k_pad) = kernel.pads();
        let kp = k.div_ceil(k_pad) * k_pad;
        let mut data = Vec::new();
        pack_a(&mut data, a, m, k, kp, row_pad, kernel == Kernel::Amx, par);
        Self {
            data,
            m,
            k,
            kp,
            kernel,
        }
    }

    /// `dst (m, n) = A B (k, n)` on this thread (the caller runs chunks of B side by side).
    ///
    /// # Safety
    /// `b` must reach every (kk, j) with kk < k, j < n, dst every element of (m, n) at row
    /// stride `dst_rs`, written by no one else.
    pub unsafe fn product(&self, n: usize, dst: *mut f32, dst_rs: isize, b: View) {
        with_b_pack(|bp| {
            pack_b(bp, b, self.k, n, self.kp, false);
            self.product_packed(n, dst, dst_rs, bp)
        })
    }

    /// As [`Self::product`] with B already packed: `n.div_ceil(NR)` panels of `kp / 2` rows
    /// of NR pairs (columns past n are not read into dst).
    ///
    /// # Safety
    /// As [`Self::product`]; `bp` must hold the panels.
    pub unsafe fn product_packed(&self, n: usize, dst: *mut f32, dst_rs: isize, bp: &[u32]) {
        assert!(bp.len() >= n.div_ceil(NR) * self.kp / 2 * NR, "B's panels");
        if self.m == 0 || n == 0 {
            return;
        }
        let o = Out {
            dst,
            rs: dst_rs,
            acc: false,
            beta: 1.0,
        };
        run_tiles(self.kernel, &self.data, bp, self.m, n, self.kp, &o, false);
    }

    /// k padded as the packs have it.
    pub fn kp(&self) -> usize {
        self.kp
    }
}
