//! F16 weights repacked at load for an output-stationary AVX-512 kernel, the f16 sibling of
//! `repack`'s integer layout: the 16 lanes of a vector are 16 weight rows, so one `vcvtph2ps`
//! widens one column of 16 rows and that vector serves a multiply-add with each of up to
//! `TT` broadcast activations (tinyBLAS's trick in llama.cpp's `sgemm.cpp`, with the weights
//! rather than the activations in the lanes). Decode reads the copy as one sequential stream.
//!
//! Layout: per group of 16 rows (a short last group is padded with zero rows), K columns of
//! 16 f16 values, column-major within the group: element (r, k) of group g sits at
//! `(g * K + k) * 16 + r % 16`. The copy has the original's size; the model releases the
//! mapped original. Activations are rounded to f16 first, as ggml's F16 products see them.

use super::arena::{PackArena, PackBuf};
use super::QMat;
use crate::quant::GgmlType;

/// Rows per group (the lanes of a 512-bit vector of f32).
const G: usize = 16;
/// Tokens per tile in prefill: one widened weight vector serves TT multiply-adds.
const TT: usize = 12;
/// Columns per pass: a tile's activations for them (TT x KC f32, 12 KiB) stay in L1.
const KC: usize = 256;
/// Groups per task: their weights stay in L2 while a tile of tokens runs over them.
pub const GROUPS_PER_TASK: usize = 4;
/// Tokens per task in prefill (4 tiles): tasks over tokens as well as rows keep both threads
/// busy to the end when the rows alone split unevenly.
pub const TOKENS_PER_TASK: usize = 4 * TT;

#[derive(Debug)]
pub struct PackedF16 {
    pub rows: usize,
    pub cols: usize,
    data: PackBuf<u16>,
}

/// Whether this CPU runs the kernel (AVX-512F with F16C).
pub fn has_f16_kernel() -> bool {
    super::f16dot::has_fast_f16()
}

impl PackedF16 {
    /// Repack `w` when it is F16 and the CPU has the kernel.
    pub fn new(w: &QMat) -> Option<Self> {
        Self::new_in(w, None)
    }

    /// The bytes of the copy of a (rows, cols) matrix of `ty`, if this kernel takes it.
    pub fn bytes_for(ty: GgmlType, rows: usize, cols: usize) -> Option<usize> {
        (ty == GgmlType::F16 && has_f16_kernel()).then(|| rows.div_ceil(G) * G * cols * 2)
    }

    /// As `new`, with the copy in `arena` where it has room.
    pub fn new_in(w: &QMat, arena: Option<&PackArena>) -> Option<Self> {
        let bytes = Self::bytes_for(w.ty, w.rows, w.cols)?;
        let k = w.cols;
        let mut buf = PackBuf::<u16>::zeroed(bytes / 2, arena);
        let data = buf.as_mut_slice();
        for r in 0..w.rows {
            let (g, lane) = (r / G, r % G);
            for (c, b) in w.row(r).chunks_exact(2).enumerate() {
                data[(g * k + c) * G + lane] = u16::from_le_bytes([b[0], b[1]]);
            }
        }
        Some(Self {
            rows: w.rows,
            cols: w.cols,
            data: buf,
        })
    }

    pub fn groups(&self) -> usize {
        self.rows.div_ceil(G)
    }

    /// Row `r` as f32 (`cols` values), read down the lane of its group.
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        let (g, lane, k) = (r / G, r % G, self.cols);
        let col = &self.data.as_slice()[g * k * G..(g + 1) * k * G];
        for (o, w) in out[..k].iter_mut().zip(col.chunks_exact(G)) {
            *o = half::f16::from_bits(w[lane]).to_f32();
        }
    }

    /// Rows of groups g0..g1 (at most `GROUPS_PER_TASK`) for tokens `tokens` of `x` (T, K),
    /// already rounded to f16:
    /// out[t * ldo + r]. Token tiles run outside, groups inside, so a tile's activations stay
    /// in L1 and the groups' weights in L2.
    ///
    /// # Safety
    /// The CPU must have the kernel (`has_f16_kernel`); `out` must be valid for writes at
    /// `t * ldo + r` for t < T and the rows of these groups, and owned by the caller.
    pub unsafe fn gemm_groups(
        &self,
        g0: usize,
        g1: usize,
        x: &[f32],
        tokens: std::ops::Range<usize>,
        out: *mut f32,
        ldo: usize,
    ) {
        let t = tokens.end;
        assert!(x.len() >= t * self.cols, "activations are (T, K)");
        #[cfg(target_arch = "x86_64")]
        {
            assert!(
                g1 - g0 <= GROUPS_PER_TASK,
                "at most {GROUPS_PER_TASK} groups a call"
            );
            let k = self.cols;
            let mut t0 = tokens.start;
            while t0 < t {
                let tn = (t - t0).min(TT);
                let xs = &x[t0 * k..];
                if tn == 1 {
                    // decode: one stream through the groups, no tile of partial sums to clear
                    for g in g0..g1 {
                        let mut r = [0f32; G];
                        avx512::group_one(self, g, xs, &mut r);
                        let rows = G.min(self.rows - g * G);
                        for (l, v) in r.iter().enumerate().take(rows) {
                            *out.add(t0 * ldo + g * G + l) = *v;
                        }
                    }
                    t0 += TT;
                    continue;
                }
                // partial sums of each group, carried from one column pass to the next
                let mut res = [[[0f32; G]; TT]; GROUPS_PER_TASK];
                let mut c0 = 0;
                while c0 < k {
                    let c1 = (c0 + KC).min(k);
                    for g in g0..g1 {
                        let r = &mut res[g - g0];
                        match tn {
                            12 => avx512::group::<12>(self, g, xs, c0..c1, r),
                            11 => avx512::group::<11>(self, g, xs, c0..c1, r),
                            10 => avx512::group::<10>(self, g, xs, c0..c1, r),
                            9 => avx512::group::<9>(self, g, xs, c0..c1, r),
                            8 => avx512::group::<8>(self, g, xs, c0..c1, r),
                            7 => avx512::group::<7>(self, g, xs, c0..c1, r),
                            6 => avx512::group::<6>(self, g, xs, c0..c1, r),
                            5 => avx512::group::<5>(self, g, xs, c0..c1, r),
                            4 => avx512::group::<4>(self, g, xs, c0..c1, r),
                            3 => avx512::group::<3>(self, g, xs, c0..c1, r),
                            _ => avx512::group::<2>(self, g, xs, c0..c1, r),
                        }
                    }
                    c0 = c1;
                }
                for g in g0..g1 {
                    let rows = G.min(self.rows - g * G);
                    for (j, rj) in res[g - g0].iter().enumerate().take(tn) {
                        for (l, v) in rj.iter().enumerate().take(rows) {
                            *out.add((t0 + j) * ldo + g * G + l) = *v;
                        }
                    }
                }
                t0 += TT;
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (g0, g1, x, tokens, out, ldo);
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::*;
    use std::arch::x86_64::*;

    /// One group of 16 rows against TN tokens (x is (TN, K)) over columns `cols`, one
    /// accumulator per token, carried in `res` between passes (zero before the first).
    #[target_feature(enable = "avx512f,fma,f16c")]
    pub unsafe fn group<const TN: usize>(
        p: &PackedF16,
        g: usize,
        x: &[f32],
        cols: std::ops::Range<usize>,
        res: &mut [[f32; G]; TT],
    ) {
        let k = p.cols;
        let w = p.data.as_slice().as_ptr().add(g * k * G);
        let xp = x.as_ptr();
        let mut acc = [_mm512_setzero_ps(); TN];
        for (j, a) in acc.iter_mut().enumerate() {
            *a = _mm512_loadu_ps(res[j].as_ptr());
        }
        for c in cols {
            let wv = _mm512_cvtph_ps(_mm256_loadu_si256(w.add(c * G) as *const __m256i));
            for (j, a) in acc.iter_mut().enumerate() {
                *a = _mm512_fmadd_ps(wv, _mm512_set1_ps(*xp.add(j * k + c)), *a);
            }
        }
        for (j, a) in acc.iter().enumerate() {
            _mm512_storeu_ps(res[j].as_mut_ptr(), *a);
        }
    }

    /// One group against one token (decode): four accumulators over the columns, so the
    /// multiply-adds do not wait on each other while the weights stream in.
    #[target_feature(enable = "avx512f,fma,f16c")]
    pub unsafe fn group_one(p: &PackedF16, g: usize, x: &[f32], res: &mut [f32; G]) {
        let k = p.cols;
        let w = p.data.as_slice().as_ptr().add(g * k * G);
        let xp = x.as_ptr();
        let mut acc = [_mm512_setzero_ps(); 4];
        let whole = k / 4 * 4;
        for c in (0..whole).step_by(4) {
            // 4 columns of 16 f16 rows: two cache lines
            crate::kernels::stream::prefetch_ahead(w.add(c * G) as *const u8, 4 * G * 2);
            for (u, a) in acc.iter_mut().enumerate() {
                let wv = _mm512_cvtph_ps(_mm256_loadu_si256(w.add((c + u) * G) as *const __m256i));
                *a = _mm512_fmadd_ps(wv, _mm512_set1_ps(*xp.add(c + u)), *a);
            }
        }
        for c in whole..k {
            let wv = _mm512_cvtph_ps(_mm256_loadu_si256(w.add(c * G) as *const __m256i));
            acc[0] = _mm512_fmadd_ps(wv, _mm512_set1_ps(*xp.add(c)), acc[0]);
        }
        let sum = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
        _mm512_storeu_ps(res.as_mut_ptr(), sum);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::f16dot::dot_f16_ref;
    use half::f16;

    #[test]
    fn packed_f16_matches_row_dots() {
        if !has_f16_kernel() {
            eprintln!("no AVX-512 F16C here: the portable row dots run instead (tested there)");
            return;
        }
        for (rows, k, t) in [
            (16, 64, 1),
            (37, 576, 3),
            (5, 80, 9),
            (64, 1536, 17),
            (33, 7, 2),
        ] {
            let wf = crate::kernels::test_data(rows * k, (rows + k) as u64);
            let bytes: Vec<u8> = wf
                .iter()
                .flat_map(|v| f16::from_f32(*v).to_le_bytes())
                .collect();
            let q = QMat::new(GgmlType::F16, rows, k, &bytes).expect("matrix");
            let p = PackedF16::new(&q).expect("packs");
            let mut row = vec![0f32; k];
            for r in 0..rows {
                p.dequantize_row(r, &mut row);
                let want = &wf[r * k..(r + 1) * k];
                let want: Vec<f32> = want.iter().map(|v| f16::from_f32(*v).to_f32()).collect();
                assert_eq!(row, want, "row {r} read back from the copy");
            }
            let x: Vec<f32> = crate::kernels::test_data(t * k, 5)
                .iter()
                .map(|v| f16::from_f32(*v).to_f32())
                .collect();
            let mut y = vec![0f32; t * rows];
            // SAFETY: the kernel exists (checked above); y is (T, rows), written by this call only.
            for g0 in (0..p.groups()).step_by(GROUPS_PER_TASK) {
                let g1 = (g0 + GROUPS_PER_TASK).min(p.groups());
                // two token ranges, as the parallel driver splits them
                unsafe { p.gemm_groups(g0, g1, &x, 0..t / 2, y.as_mut_ptr(), rows) };
                unsafe { p.gemm_groups(g0, g1, &x, t / 2..t, y.as_mut_ptr(), rows) };
            }
            for i in 0..t {
                for r in 0..rows {
                    let want = dot_f16_ref(q.row(r), &x[i * k..(i + 1) * k]);
                    let got = y[i * rows + r];
                    assert!(
                        (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
                        "rows={rows} k={k} t={i} r={r}: {got} vs {want}"
                    );
                }
            }
        }
    }
}
