//! The loop the interleaved-row kernels share (`repack`, `repack_k`, `repack_q6k`): for each
//! group of 16 weight rows and each tile of up to TT tokens, a kernel fills a (TT, 16) block
//! of results in registers' order, which then lands in the row-major output (T, N); and the
//! dispatch from a tile's token count to the kernels' constant (`by_tile_width`, also for
//! `qgemm`'s tiles).

use std::ops::Range;

/// Rows per group: the 16 lanes of a 512-bit vector.
pub(crate) const G: usize = 16;

/// Run `kernel(g, t0, tn, res)` for the groups `groups` of a matrix of `rows` rows and the
/// tiles of `tokens`, then write res[j][l] (j < tn, rows only) to out[(t0 + j) * ldo + 16g + l].
///
/// # Safety
/// `out` must be valid for writes at `t * ldo + r` for t in `tokens` and r in the rows of
/// these groups, and those places owned by the caller.
pub(crate) unsafe fn for_group_tiles<const TT: usize>(
    groups: Range<usize>,
    tokens: Range<usize>,
    rows: usize,
    out: *mut f32,
    ldo: usize,
    mut kernel: impl FnMut(usize, usize, usize, &mut [[f32; G]; TT]),
) {
    for g in groups {
        let mut t0 = tokens.start;
        while t0 < tokens.end {
            let tn = (tokens.end - t0).min(TT);
            let mut res = [[0f32; G]; TT];
            kernel(g, t0, tn, &mut res);
            let n = G.min(rows - g * G);
            for (j, rj) in res.iter().enumerate().take(tn) {
                for (l, v) in rj.iter().enumerate().take(n) {
                    *out.add((t0 + j) * ldo + g * G + l) = *v;
                }
            }
            t0 += TT;
        }
    }
}

/// [`for_group_tiles`] over `planes` activation rows per token (2: rows 2t and 2t + 1 are
/// token t's two planes, `Q8KAct::quantize_planes`): the kernel runs on the planes as tokens
/// (TT must be even, so a tile holds whole tokens) and each token's result is the sum of its
/// planes', first plus second. `tokens` counts tokens.
///
/// # Safety
/// As [`for_group_tiles`].
pub(crate) unsafe fn for_group_tiles_planes<const TT: usize>(
    groups: Range<usize>,
    tokens: Range<usize>,
    planes: usize,
    rows: usize,
    out: *mut f32,
    ldo: usize,
    mut kernel: impl FnMut(usize, usize, usize, &mut [[f32; G]; TT]),
) {
    if planes == 1 {
        return for_group_tiles(groups, tokens, rows, out, ldo, kernel);
    }
    debug_assert!(planes == 2 && TT.is_multiple_of(2));
    let (p0, p1) = (2 * tokens.start, 2 * tokens.end);
    for g in groups {
        let mut t0 = p0;
        while t0 < p1 {
            let tn = (p1 - t0).min(TT);
            let mut res = [[0f32; G]; TT];
            kernel(g, t0, tn, &mut res);
            let n = G.min(rows - g * G);
            for j in (0..tn).step_by(2) {
                let o = out.add((t0 + j) / 2 * ldo + g * G);
                for (l, (a, b)) in res[j].iter().zip(&res[j + 1]).enumerate().take(n) {
                    *o.add(l) = a + b;
                }
            }
            t0 += TT;
        }
    }
}

/// `$kernel::<TN, $c...>($args)` with TN = `$tn` (a tile's token count, 1 to 4) as the
/// constant the kernels are written for.
macro_rules! by_tile_width {
    ($tn:expr, $kernel:ident $(, $c:expr)* ; $($arg:expr),* $(,)?) => {
        match $tn {
            4 => $kernel::<4 $(, { $c })*>($($arg),*),
            3 => $kernel::<3 $(, { $c })*>($($arg),*),
            2 => $kernel::<2 $(, { $c })*>($($arg),*),
            _ => $kernel::<1 $(, { $c })*>($($arg),*),
        }
    };
}
pub(crate) use by_tile_width;

/// [`by_tile_width`] for tiles of 1 to 12 tokens: the k-quants' VNNI kernels, which unpack
/// each block of weights once a tile, so that a verify pass of up to 12 tokens (a draft of 8
/// and the token before it: one tile) unpacks it once, not three times.
macro_rules! by_wide_tile {
    ($tn:expr, $kernel:ident $(, $c:expr)* ; $($arg:expr),* $(,)?) => {
        match $tn {
            12 => $kernel::<12 $(, { $c })*>($($arg),*),
            11 => $kernel::<11 $(, { $c })*>($($arg),*),
            10 => $kernel::<10 $(, { $c })*>($($arg),*),
            9 => $kernel::<9 $(, { $c })*>($($arg),*),
            8 => $kernel::<8 $(, { $c })*>($($arg),*),
            7 => $kernel::<7 $(, { $c })*>($($arg),*),
            6 => $kernel::<6 $(, { $c })*>($($arg),*),
            5 => $kernel::<5 $(, { $c })*>($($arg),*),
            4 => $kernel::<4 $(, { $c })*>($($arg),*),
            3 => $kernel::<3 $(, { $c })*>($($arg),*),
            2 => $kernel::<2 $(, { $c })*>($($arg),*),
            _ => $kernel::<1 $(, { $c })*>($($arg),*),
        }
    };
}
pub(crate) use by_wide_tile;

/// A tile of `tn` tokens from `t0` (up to TT) run as tiles of at most 4 by `kernel(t0, tn,
/// res4)`, gathered into `res`: for kernels written for 4-token tiles (the AVX2 ones, with
/// half the registers) under a wider tile.
pub(crate) fn in_fours<const TT: usize>(
    t0: usize,
    tn: usize,
    res: &mut [[f32; G]; TT],
    mut kernel: impl FnMut(usize, usize, &mut [[f32; G]; 4]),
) {
    for c in (0..tn).step_by(4) {
        let n = (tn - c).min(4);
        let mut r4 = [[0f32; G]; 4];
        kernel(t0 + c, n, &mut r4);
        res[c..c + n].copy_from_slice(&r4[..n]);
    }
}

/// Lay `src`'s 4-byte chunks into lane `lane` of consecutive 64-byte vectors from `at`: chunk
/// c goes to bytes at + 64c + 4 lane .. + 4 (how the packers interleave 16 rows' quants).
pub(crate) fn interleave4(data: &mut [u8], at: usize, lane: usize, src: &[u8]) {
    for (c, four) in src.chunks_exact(4).enumerate() {
        let o = at + c * 64 + 4 * lane;
        data[o..o + 4].copy_from_slice(four);
    }
}
