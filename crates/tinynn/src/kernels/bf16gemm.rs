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

/// `f` with the calling thread's B pack buffer (see `PACKS`).
pub(super) fn with_b_pack<R>(f: impl FnOnce(&mut Vec<u32>) -> R) -> R {
    let mut bp = PACKS.with(|p| std::mem::take(&mut p.borrow_mut().1));
    let r = f(&mut bp);
    PACKS.with(|p| p.borrow_mut().1 = bp);
    r
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
pub(super) struct Out {
    pub(super) dst: *mut f32,
    pub(super) rs: isize,
    pub(super) acc: bool,
    pub(super) beta: f32,
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
    run_tiles(kernel, &ap, &bp, m, n, kp, &o, par);
    PACKS.with(|p| *p.borrow_mut() = (ap, bp));
}

/// The tiles of `dst (m, n)` from packed A (`ap`) and B (`bp`), k padded to `kp`.
///
/// # Safety
/// As [`gemm_with`], with `ap` and `bp` packed for this kernel, m, n and kp.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn run_tiles(
    kernel: Kernel,
    ap: &[u32],
    bp: &[u32],
    m: usize,
    n: usize,
    kp: usize,
    o: &Out,
    par: bool,
) {
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
                        o,
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
