//! bf16 matrix products for mixed-precision training (Micikevicius et al. 2018; llm.c's and
//! PyTorch autocast's bf16): the f32 operands are rounded to bf16 (nearest even) as they are
//! packed, and each product of a pair of k is summed into f32 by AVX512-BF16's `vdpbf16ps`
//! (Intel SDM, "VDPBF16PS"): twice the multiply-adds of an f32 FMA per instruction.
//!
//! `dst (m, n) = acc * dst + beta * A (m, k) B (k, n)`, A and B with any element strides (the
//! three products of a linear layer read them plain or transposed). A becomes bf16 rows of
//! even length Kp, padded with zero rows to a multiple of MR (for AMX: 32 rows, Kp a multiple
//! of 32, stored as 16 x 32 tiles); B becomes panels of NR columns,
//! each Kp/2 groups of NR u32, a u32 holding B(2p, j) low and B(2p+1, j) high, the layout
//! `vdpbf16ps` pairs with a broadcast A pair. A tile of MR x NR outputs sums k in order in
//! registers, so the result depends on the shapes only, not on the thread count.

use super::bf16pack::{pack_a, pack_b};
use rayon::prelude::*;

/// Rows and columns of one register tile (24 accumulators of 16 lanes).
pub const MR: usize = 12;
pub const NR: usize = 32;

/// An operand: element (i, k) at `ptr[i * rs + k * cs]`.
#[derive(Clone, Copy)]
pub struct View {
    pub ptr: *const f32,
    pub rs: isize,
    pub cs: isize,
}

// SAFETY: a View is read only, and its caller keeps the memory alive for the product.
unsafe impl Send for View {}
unsafe impl Sync for View {}

impl View {
    /// # Safety
    /// (i, k) must be inside the operand.
    #[inline(always)]
    pub(crate) unsafe fn at(&self, i: usize, k: usize) -> f32 {
        *self.ptr.offset(i as isize * self.rs + k as isize * self.cs)
    }
}

/// Whether this CPU has the instructions (AVX-512F, -BW and AVX512-BF16).
pub fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512bf16")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// f32 -> bf16 bits as `vcvtne2ps2bf16` rounds: to nearest even, NaN stays NaN (quieted),
/// denormals become a signed zero.
#[inline(always)]
pub fn to_bf16(x: f32) -> u16 {
    let b = x.to_bits();
    if x.is_nan() {
        return ((b >> 16) | 0x40) as u16;
    }
    if b & 0x7F80_0000 == 0 {
        return ((b >> 16) & 0x8000) as u16;
    }
    (b.wrapping_add(0x7FFF + ((b >> 16) & 1)) >> 16) as u16
}

/// The bf16 value nearest `x`, as f32 (what the products see of an operand).
pub fn round_bf16(x: f32) -> f32 {
    f32::from_bits((to_bf16(x) as u32) << 16)
}

thread_local! {
    /// The calling thread's pack buffers (A, B), kept between products so that packing
    /// neither clears nor faults in fresh memory; a nested product on the same thread finds
    /// them taken and starts its own.
    static PACKS: std::cell::RefCell<(Vec<u32>, Vec<u32>)> = const {
        std::cell::RefCell::new((Vec::new(), Vec::new()))
    };
}

/// Which kernel does the tiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    /// `vdpbf16ps`, MR x NR register tiles.
    Avx512,
    /// AMX `tdpbf16ps`, 32 x 32 blocks (`bf16amx`).
    Amx,
}

impl Kernel {
    /// The best this CPU has (AMX where Linux grants it), or None.
    pub fn best() -> Option<Kernel> {
        if !available() {
            None
        } else if super::bf16amx::available() {
            Some(Kernel::Amx)
        } else {
            Some(Kernel::Avx512)
        }
    }

    /// Row padding of A and the multiple k is padded to.
    pub(crate) fn pads(self) -> (usize, usize) {
        match self {
            Kernel::Avx512 => (MR, 2),
            Kernel::Amx => (32, 32),
        }
    }
}

/// Where a tile's sums go: rows `rows` and columns `cols` of it into dst at (i0, j0).
struct Out {
    dst: *mut f32,
    rs: isize,
    acc: bool,
    beta: f32,
}

// SAFETY: tasks write disjoint tiles of dst.
unsafe impl Send for Out {}
unsafe impl Sync for Out {}

impl Out {
    /// dst[i0 + r][j0 + c] = acc * dst + beta * sums[r][c] for the tile's live part.
    ///
    /// # Safety
    /// The live part of the tile must be inside dst and written by no one else; only where
    /// [`available`].
    #[cfg_attr(
        target_arch = "x86_64",
        target_feature(enable = "avx512f,avx512vl,avx2")
    )]
    unsafe fn add(
        &self,
        sums: &[f32],
        stride: usize,
        i0: usize,
        j0: usize,
        rows: usize,
        cols: usize,
    ) {
        for r in 0..rows {
            let d = std::slice::from_raw_parts_mut(
                self.dst.offset((i0 + r) as isize * self.rs).add(j0),
                cols,
            );
            let s = &sums[r * stride..r * stride + cols];
            if self.acc {
                d.iter_mut().zip(s).for_each(|(d, s)| *d += self.beta * s);
            } else {
                d.iter_mut().zip(s).for_each(|(d, s)| *d = self.beta * s);
            }
        }
    }
}

/// One MR x NR tile: A rows at `a` (u32 pairs, stride `ka`), panel `b`, `kp2` pairs of k.
///
/// # Safety
/// `a` must hold MR rows of `kp2` pairs at stride `ka`, `b` kp2 * NR u32, and the tile's
/// `rows` x `cols` part of dst must be valid and written by no one else.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16")]
#[allow(clippy::too_many_arguments)]
unsafe fn tile(
    a: *const u32,
    ka: usize,
    b: *const u32,
    kp2: usize,
    o: &Out,
    i0: usize,
    j0: usize,
    rows: usize,
    cols: usize,
) {
    use std::arch::x86_64::*;
    let mut acc = [[_mm512_setzero_ps(); 2]; MR];
    for p in 0..kp2 {
        let b0: __m512bh = std::mem::transmute(_mm512_loadu_si512(b.add(p * NR) as *const _));
        let b1: __m512bh = std::mem::transmute(_mm512_loadu_si512(b.add(p * NR + 16) as *const _));
        for (r, acc) in acc.iter_mut().enumerate() {
            let av: __m512bh = std::mem::transmute(_mm512_set1_epi32(*a.add(r * ka + p) as i32));
            acc[0] = _mm512_dpbf16_ps(acc[0], av, b0);
            acc[1] = _mm512_dpbf16_ps(acc[1], av, b1);
        }
    }
    let beta = _mm512_set1_ps(o.beta);
    for (r, acc) in acc.iter().enumerate().take(rows) {
        let row = o.dst.offset((i0 + r) as isize * o.rs).add(j0);
        for (h, &v) in acc.iter().enumerate() {
            let left = cols.saturating_sub(16 * h).min(16);
            if left == 0 {
                break;
            }
            let mask: __mmask16 = if left == 16 { !0 } else { (1u16 << left) - 1 };
            let ptr = row.add(16 * h);
            let mut y = _mm512_mul_ps(v, beta);
            if o.acc {
                y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(mask, ptr));
            }
            _mm512_mask_storeu_ps(ptr, mask, y);
        }
    }
}

/// `dst (m, n) = acc * dst + beta * A (m, k) B (k, n)` with A and B rounded to bf16, dst with
/// unit column stride and row stride `dst_rs`, on the best kernel of this CPU; rayon-parallel
/// when `par`.
///
/// # Safety
/// The views must reach every element of their operands, dst every element of (m, n), dst
/// must not overlap them, and [`available`] must be true.
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemm(
    m: usize,
    n: usize,
    k: usize,
    dst: *mut f32,
    dst_rs: isize,
    acc: bool,
    a: View,
    b: View,
    beta: f32,
    par: bool,
) {
    let kernel = Kernel::best().expect("bf16gemm::gemm without AVX512-BF16");
    gemm_with(kernel, m, n, k, dst, dst_rs, acc, a, b, beta, par)
}

/// [`gemm`] on the given kernel.
///
/// # Safety
/// As [`gemm`], and the kernel must be available.
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemm_with(
    kernel: Kernel,
    m: usize,
    n: usize,
    k: usize,
    dst: *mut f32,
    dst_rs: isize,
    acc: bool,
    a: View,
    b: View,
    beta: f32,
    par: bool,
) {
    if m == 0 || n == 0 {
        return;
    }
    let (row_pad, k_pad) = kernel.pads();
    let kp = k.div_ceil(k_pad) * k_pad;
    let (mut ap, mut bp) = PACKS.with(|p| std::mem::take(&mut *p.borrow_mut()));
    pack_a(&mut ap, a, m, k, kp, row_pad, kernel == Kernel::Amx, par);
    pack_b(&mut bp, b, k, n, kp, par);
    let o = Out {
        dst,
        rs: dst_rs,
        acc,
        beta,
    };
    let (nt, kp2) = (n.div_ceil(NR), kp / 2);
    let panel = kp2 * NR;
    // panels in blocks of about 512 KiB, reused from L2 by every row tile
    let block = (512 * 1024 / (panel * 4).max(1)).clamp(1, nt);
    let rows = match kernel {
        Kernel::Avx512 => MR,
        Kernel::Amx => 32,
    };
    let run = |ti: usize, b0: usize| {
        let (i0, live) = (ti * rows, rows.min(m - ti * rows));
        let panels = b0..(b0 + block).min(nt);
        match kernel {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the packs hold the tile's rows and panels; tiles are disjoint.
            Kernel::Avx512 => unsafe {
                for t in panels {
                    let (j0, cols) = (t * NR, NR.min(n - t * NR));
                    let a = ap.as_ptr().add(i0 * kp2);
                    tile(
                        a,
                        kp2,
                        bp.as_ptr().add(t * panel),
                        kp2,
                        &o,
                        i0,
                        j0,
                        live,
                        cols,
                    );
                }
            },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above; AMX is available, so the tiles can be configured here.
            Kernel::Amx => unsafe {
                super::bf16amx::configure();
                let mut c = [0f32; 32 * 32];
                for t in panels {
                    let (j0, cols) = (t * NR, NR.min(n - t * NR));
                    let (a, b) = (
                        ap.as_ptr().add(i0 * kp2) as *const u16,
                        bp.as_ptr().add(t * panel),
                    );
                    if live == 32 && cols == 32 && o.beta == 1.0 && o.rs > 0 {
                        // a whole block with plain sums: the tiles load and store dst itself
                        let d = o.dst.offset(i0 as isize * o.rs).add(j0);
                        super::bf16amx::block_into(a, kp, b, d, o.rs as usize, o.acc);
                    } else {
                        super::bf16amx::block(a, kp, b, &mut c);
                        o.add(&c, 32, i0, j0, live, cols);
                    }
                }
                super::bf16amx::release();
            },
            #[cfg(not(target_arch = "x86_64"))]
            _ => unreachable!("bf16 kernels are x86-64 only"),
        }
    };
    let mt = m.div_ceil(rows);
    for b0 in (0..nt).step_by(block) {
        if par {
            (0..mt).into_par_iter().for_each(|ti| run(ti, b0));
        } else {
            (0..mt).for_each(|ti| run(ti, b0));
        }
    }
    PACKS.with(|p| *p.borrow_mut() = (ap, bp));
}

/// The reference: the same product with each operand rounded to bf16, summed in f64.
pub fn reference(m: usize, n: usize, k: usize, a: &[f32], b: &[f32]) -> Vec<f64> {
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            out[i * n + j] = (0..k)
                .map(|kk| round_bf16(a[i * k + kk]) as f64 * round_bf16(b[kk * n + j]) as f64)
                .sum();
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernels this CPU runs.
    fn kernels() -> Vec<Kernel> {
        let mut v = Vec::new();
        if available() {
            v.push(Kernel::Avx512);
        }
        if Kernel::best() == Some(Kernel::Amx) {
            v.push(Kernel::Amx);
        }
        eprintln!("bf16 kernels on this CPU: {v:?}");
        v
    }

    #[allow(clippy::too_many_arguments)]
    fn run(
        kernel: Kernel,
        m: usize,
        n: usize,
        k: usize,
        a: &[f32],
        b: &[f32],
        transposed: bool,
    ) -> Vec<f32> {
        let mut y = vec![0.0f32; m * n];
        // the plain layout, or A and B read through transposed copies (column strides)
        let (at, bt): (Vec<f32>, Vec<f32>) = if transposed {
            (
                (0..k * m).map(|x| a[(x % m) * k + x / m]).collect(),
                (0..n * k).map(|x| b[(x % k) * n + x / k]).collect(),
            )
        } else {
            (a.to_vec(), b.to_vec())
        };
        let (va, vb) = if transposed {
            (
                View {
                    ptr: at.as_ptr(),
                    rs: 1,
                    cs: m as isize,
                },
                View {
                    ptr: bt.as_ptr(),
                    rs: 1,
                    cs: k as isize,
                },
            )
        } else {
            (
                View {
                    ptr: at.as_ptr(),
                    rs: k as isize,
                    cs: 1,
                },
                View {
                    ptr: bt.as_ptr(),
                    rs: n as isize,
                    cs: 1,
                },
            )
        };
        // SAFETY: the views cover (m, k) and (k, n); y is (m, n).
        unsafe {
            gemm_with(
                kernel,
                m,
                n,
                k,
                y.as_mut_ptr(),
                n as isize,
                false,
                va,
                vb,
                1.0,
                m > 20,
            )
        };
        y
    }

    /// Small integers and halves are bf16 values whose products and sums f32 holds exactly: the
    /// kernel must then equal the reference bit for bit, on edge shapes (odd k, partial tiles).
    #[test]
    fn exact_on_bf16_representable_inputs_on_edge_shapes() {
        if !available() {
            eprintln!("no AVX512-BF16 on this CPU: the bf16 kernel is not used here");
            return;
        }
        for kernel in kernels() {
            for &(m, n, k) in &[
                (1, 1, 1),
                (13, 33, 7),
                (12, 32, 64),
                (25, 70, 31),
                (5, 17, 130),
                (40, 64, 96),
                (70, 50, 100),
            ] {
                let a: Vec<f32> = (0..m * k)
                    .map(|x| ((x * 7 % 9) as f32 - 4.0) * 0.5)
                    .collect();
                let b: Vec<f32> = (0..k * n)
                    .map(|x| ((x * 5 % 11) as f32 - 5.0) * 0.25)
                    .collect();
                let want = reference(m, n, k, &a, &b);
                for transposed in [false, true] {
                    let got = run(kernel, m, n, k, &a, &b, transposed);
                    for (g, w) in got.iter().zip(&want) {
                        assert_eq!(
                            *g as f64, *w,
                            "{kernel:?} ({m}, {n}, {k}) transposed {transposed}"
                        );
                    }
                }
                // acc with beta 1 (whole AMX blocks start from dst): dst + A B, also exact
                let mut y: Vec<f32> = (0..m * n).map(|x| (x % 13) as f32).collect();
                let (va, vb) = (
                    View {
                        ptr: a.as_ptr(),
                        rs: k as isize,
                        cs: 1,
                    },
                    View {
                        ptr: b.as_ptr(),
                        rs: n as isize,
                        cs: 1,
                    },
                );
                // SAFETY: the views cover (m, k) and (k, n); y is (m, n).
                unsafe {
                    gemm_with(
                        kernel,
                        m,
                        n,
                        k,
                        y.as_mut_ptr(),
                        n as isize,
                        true,
                        va,
                        vb,
                        1.0,
                        true,
                    )
                };
                for (x, (g, w)) in y.iter().zip(&want).enumerate() {
                    assert_eq!(
                        *g as f64,
                        (x % 13) as f64 + w,
                        "{kernel:?} acc ({m}, {n}, {k})"
                    );
                }
            }
        }
    }

    /// Operands with neither stride 1 (the packers' scalar path) give the plain layout's sums.
    #[test]
    fn strided_operands_equal_the_plain_layout() {
        if !available() {
            eprintln!("no AVX512-BF16 on this CPU: the bf16 kernel is not used here");
            return;
        }
        let (m, n, k) = (19, 37, 45);
        let a = crate::kernels::test_data(m * k, 3);
        let b = crate::kernels::test_data(k * n, 4);
        // every element twice: element (i, kk) of A at 2 (i k + kk)
        let (a2, b2): (Vec<f32>, Vec<f32>) = (
            a.iter().flat_map(|&x| [x, 0.0]).collect(),
            b.iter().flat_map(|&x| [x, 0.0]).collect(),
        );
        for kernel in kernels() {
            let want = run(kernel, m, n, k, &a, &b, false);
            let mut y = vec![0.0f32; m * n];
            let va = View {
                ptr: a2.as_ptr(),
                rs: 2 * k as isize,
                cs: 2,
            };
            let vb = View {
                ptr: b2.as_ptr(),
                rs: 2 * n as isize,
                cs: 2,
            };
            // SAFETY: the views cover (m, k) and (k, n) of the doubled copies; y is (m, n).
            unsafe {
                gemm_with(
                    kernel,
                    m,
                    n,
                    k,
                    y.as_mut_ptr(),
                    n as isize,
                    false,
                    va,
                    vb,
                    1.0,
                    true,
                )
            };
            assert_eq!(y, want, "{kernel:?}");
        }
    }

    /// Any f32 inputs: within f32 summation error of the bf16-rounded reference, and within
    /// bf16's rounding (2^-8 relative per operand) of the f32 product.
    #[test]
    fn bounded_error_on_any_inputs_and_accumulates() {
        if !available() {
            eprintln!("no AVX512-BF16 on this CPU: the bf16 kernel is not used here");
            return;
        }
        let (m, n, k) = (37, 45, 203);
        let a = crate::kernels::test_data(m * k, 1);
        let b = crate::kernels::test_data(k * n, 2);
        let want = reference(m, n, k, &a, &b);
        for kernel in kernels() {
            let got = run(kernel, m, n, k, &a, &b, false);
            let scale: Vec<f64> = (0..m * n)
                .map(|x| {
                    let (i, j) = (x / n, x % n);
                    (0..k)
                        .map(|kk| (a[i * k + kk] * b[kk * n + j]).abs() as f64)
                        .sum()
                })
                .collect();
            for (x, ((g, w), s)) in got.iter().zip(&want).zip(&scale).enumerate() {
                assert!((*g as f64 - w).abs() <= 1e-6 * s, "{g} vs {w} (scale {s})");
                let (i, j) = (x / n, x % n);
                let exact: f64 = (0..k)
                    .map(|kk| a[i * k + kk] as f64 * b[kk * n + j] as f64)
                    .sum();
                assert!(
                    (*g as f64 - exact).abs() <= 2.0 * 2f64.powi(-8) * s,
                    "{g} vs f32 {exact}"
                );
            }
            // acc adds beta times the product into what dst holds
            let mut y: Vec<f32> = (0..m * n).map(|x| x as f32).collect();
            let (va, vb) = (
                View {
                    ptr: a.as_ptr(),
                    rs: k as isize,
                    cs: 1,
                },
                View {
                    ptr: b.as_ptr(),
                    rs: n as isize,
                    cs: 1,
                },
            );
            // SAFETY: as in `run`.
            unsafe {
                gemm_with(
                    kernel,
                    m,
                    n,
                    k,
                    y.as_mut_ptr(),
                    n as isize,
                    true,
                    va,
                    vb,
                    2.0,
                    true,
                )
            };
            for (x, (yv, g)) in y.iter().zip(&got).enumerate() {
                assert!(
                    (yv - (x as f32 + 2.0 * g)).abs() <= 1e-4 * (1.0 + yv.abs()),
                    "{yv}"
                );
            }
        }
    }
}
