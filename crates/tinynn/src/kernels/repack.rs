//! Q4_0, Q4_1, Q5_0 and Q8_0 weights repacked at load for an output-stationary AVX-512 VNNI
//! kernel (`repack_vnni`), or its AVX2 counterpart (`repack_avx2`), in the manner
//! of ggml's interleaved `q4_0_8x8` layout: the 16 lanes of a vector are 16 weight rows, so one
//! `vpdpbusd` multiplies 4 weights of each of 16 rows by the same 4 broadcast activations, and
//! a block's scales, its conversion to f32 and its multiply-add are paid once per 16 rows
//! instead of once per row. The same kernel serves decode (one token) and prefill (a tile of
//! up to 4 tokens), so a batch gives the bits of token-by-token decoding.
//!
//! Layout, per group of 16 rows (a short last group is padded with zero rows) and per 32-block:
//! the 16 row scales as f16 (32 bytes), for Q4_1 the 16 mins (32 bytes), then for c in 0..4
//! the bytes 4c..4c+4 of each row's 16 nibble bytes (4 x 64 bytes): low nibbles are elements
//! 4c..4c+4, high ones 16+4c..16+4c+4. The copy is as large as the original, whose mapped
//! pages the model then releases.

use super::act_split::SplitAct;
use super::arena::{PackArena, PackBuf};
use super::QMat;
use crate::quant::GgmlType;

/// Rows per group (the lanes of a 512-bit vector of i32).
const G: usize = 16;
/// What a type's block holds for the kernel: the bytes per row of the field after the 16
/// scales (Q4_1's min, Q5_0's fifth bits, Q5_1's min and fifth bits; none for Q4_0 and Q8_0),
/// where the quants start in the block, and how many 4-byte chunks of quants a row has per
/// block.
fn layout(ty: GgmlType) -> (usize, usize, usize) {
    match ty {
        GgmlType::Q4_1 => (2, 4, 4),
        GgmlType::Q5_0 => (4, 6, 4),
        GgmlType::Q5_1 => (6, 8, 4),
        GgmlType::Q8_0 => (0, 2, 8),
        _ => (0, 2, 4),
    }
}

/// Where byte `i` of row `lane`'s field goes in a group's block: after the 16 scales, each
/// row's field together, except Q5_1's, whose two parts (the min, the fifth bits) each have
/// a region of 16 rows, so that each loads as one vector.
fn field_at(ty: GgmlType, lane: usize, i: usize) -> usize {
    match ty {
        GgmlType::Q5_1 if i < 2 => 32 + 2 * lane + i,
        GgmlType::Q5_1 => 64 + 4 * lane + i - 2,
        _ => 32 + layout(ty).0 * lane + i,
    }
}

/// Q8_0's signed weights are stored as w + 128 (the sign bit flipped): unsigned, they take
/// `vpdpbusd`'s unsigned side against the activations as they are (broadcast from memory),
/// and the kernel takes 128 · Σx off again, which it has per block (as Q4_0 takes 8 · Σx).
const Q8_FLIP: u8 = 0x80;

/// IQ4_NL and IQ4_XS: 4-bit indices into ggml's non-linear table, each 32-block with its
/// own scale (IQ4_XS: the super-block's d times the sub-block's 6-bit scale less 32).
fn is_iq4(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::IQ4_NL | GgmlType::IQ4_XS)
}

/// The lattice types whose 32-blocks are one f32 scale times small integers (IQ2_XXS,
/// IQ3_XXS, IQ3_S: `quant::iq_lattice::block32`), repacked as Q8_0 with f32 scales: each
/// weight a byte (2.6x IQ3_S's bits, read instead of decoding grids every product).
fn is_lattice(ty: GgmlType) -> bool {
    crate::quant::iq_lattice::has_block32(ty)
}

/// IQ2_XS, IQ2_S and Q3_K: a scale per 16 weights and small signed integers
/// (`quant::iq_lattice::block16x2`, `quant::kquants::q3_k_block16x2`). A group's
/// block: the 16 rows' scales of the first halves, of the second halves (f32, 2 x 64 bytes),
/// the rows' sums of their weights per half (i32, 2 x 64 bytes), then Q8_0's 8 chunks of
/// signed weights (not flipped: here the activations are). 1.5 bytes a weight.
fn is_halves(ty: GgmlType) -> bool {
    crate::quant::iq_lattice::has_block16x2(ty) || ty == GgmlType::Q3_K
}

/// 32-block `b` (of 8) of super-block `sb` of a halves type: two scales, 32 integers.
fn halves_block(ty: GgmlType, sb: &[u8], b: usize, q: &mut [i8; 32]) -> [f32; 2] {
    match ty {
        GgmlType::Q3_K => crate::quant::kquants::q3_k_block16x2(sb, b, q),
        _ => crate::quant::iq_lattice::block16x2(ty, sb, b, q),
    }
}

/// Bytes of the 16 row scales at the start of a group's block: f16, or for the IQ4 and
/// lattice types f32 (a sub-block's scale d · (ls - 32) is exact in f32, not in f16).
fn scale_bytes(ty: GgmlType) -> usize {
    if is_iq4(ty) || is_lattice(ty) {
        64
    } else {
        32
    }
}

/// Bytes per group and block: 16 scales, the 16 rows' extra field, the 16 rows' chunks:
/// exactly the original's size for Q4_0, Q4_1, Q5_0 and Q8_0.
fn group_block_bytes(ty: GgmlType) -> usize {
    if is_halves(ty) {
        return 256 + 8 * 64;
    }
    let (extra, _, chunks) = if is_lattice(ty) {
        layout(GgmlType::Q8_0)
    } else {
        layout(ty)
    };
    scale_bytes(ty) + G * extra + chunks * 64
}

/// Row `row`'s 32-block `b` of an IQ4 type: its scale and its 16 nibble bytes (low nibbles
/// elements 0..16, high ones 16..32, as Q4_0's).
fn iq4_block(ty: GgmlType, row: &[u8], b: usize) -> (f32, &[u8]) {
    let f16 = |x: &[u8]| half::f16::from_le_bytes([x[0], x[1]]).to_f32();
    if ty == GgmlType::IQ4_NL {
        let blk = &row[b * 18..(b + 1) * 18];
        return (f16(blk), &blk[2..18]);
    }
    let (sb, ib) = (&row[(b / 8) * 136..(b / 8 + 1) * 136], b % 8);
    let lo = ((sb[4 + ib / 2] >> (4 * (ib % 2))) & 0x0f) as i32;
    let hi = ((u16::from_le_bytes([sb[2], sb[3]]) as i32 >> (2 * ib)) & 3) << 4;
    (
        f16(sb) * ((lo | hi) - 32) as f32,
        &sb[8 + 16 * ib..8 + 16 * ib + 16],
    )
}

/// Tokens per tile in prefill.
pub(super) const TT: usize = 4;

#[derive(Debug)]
pub struct PackedQ4 {
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    /// Bytes per group and block.
    pub(super) gb: usize,
    data: PackBuf<u8>,
}

/// A weight matrix repacked for one of the interleaved-row kernels.
#[derive(Debug)]
pub enum Packed {
    /// Q4_0, Q4_1, Q5_0, Q8_0 on the VNNI kernel or the AVX2 one.
    Int8(PackedQ4),
    /// F16 on the F16C kernel (`repack_f16`).
    F16(super::repack_f16::PackedF16),
    /// Q4_K on its VNNI or AVX2 kernel (`repack_k`).
    K(super::repack_k::PackedK),
    /// Q6_K on its VNNI kernel (`repack_q6k`).
    Q6K(super::repack_q6k::PackedQ6K),
}

impl Packed {
    /// Repack `w` when a kernel for its type runs on this CPU.
    pub fn new(w: &QMat) -> Option<Self> {
        Self::new_in(w, None)
    }

    /// As `new`, with the copy in `arena` where it has room.
    pub fn new_in(w: &QMat, arena: Option<&PackArena>) -> Option<Self> {
        match w.ty {
            GgmlType::F16 => super::repack_f16::PackedF16::new_in(w, arena).map(Packed::F16),
            GgmlType::Q4_K => super::repack_k::PackedK::new_in(w, arena).map(Packed::K),
            GgmlType::Q6_K => super::repack_q6k::PackedQ6K::new_in(w, arena).map(Packed::Q6K),
            _ => PackedQ4::new_in(w, arena).map(Packed::Int8),
        }
    }

    /// The bytes `new` would take for a (rows, cols) matrix of `ty`; `None` where it would not
    /// repack it. Sizes an arena for a whole model.
    pub fn bytes_for(ty: GgmlType, rows: usize, cols: usize) -> Option<usize> {
        match ty {
            GgmlType::F16 => super::repack_f16::PackedF16::bytes_for(ty, rows, cols),
            GgmlType::Q4_K => super::repack_k::PackedK::bytes_for(ty, rows, cols),
            GgmlType::Q6_K => super::repack_q6k::PackedQ6K::bytes_for(ty, rows, cols),
            _ => PackedQ4::bytes_for(ty, rows, cols),
        }
    }

    /// Row `r` (`out` holds `cols` values) read back from the copy, with the values
    /// `quant::dequantize` gives for the original row: an embedding lookup in a tied table
    /// then never pages the released original back in.
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        match self {
            Packed::Int8(p) => p.dequantize_row(r, out),
            Packed::F16(p) => p.dequantize_row(r, out),
            Packed::K(p) => p.dequantize_row(r, out),
            Packed::Q6K(p) => p.dequantize_row(r, out),
        }
    }

    /// Groups of 16 rows.
    pub fn groups(&self) -> usize {
        match self {
            Packed::Int8(p) => p.groups(),
            Packed::F16(p) => p.groups(),
            Packed::K(p) => p.groups(),
            Packed::Q6K(p) => p.groups(),
        }
    }
}

/// Whether this CPU runs a packed kernel for `ty`: AVX-512 VNNI, or AVX2 with FMA and F16C.
pub fn has_packed_kernel(ty: GgmlType) -> bool {
    let avx2 = matches!(
        ty,
        GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q8_0
    ) && cfg!(target_arch = "x86_64")
        && super::qdot::has_fast_q4_1();
    avx2 || super::qgemm::has_vnni()
}

impl PackedQ4 {
    /// Repack `w` when it is Q4_0, Q4_1, Q5_0 or Q8_0 with whole 32-blocks and this CPU has
    /// the kernel.
    pub fn new(w: &QMat) -> Option<Self> {
        Self::new_in(w, None)
    }

    /// The bytes of the copy of a (rows, cols) matrix of `ty`, if this kernel takes it.
    pub fn bytes_for(ty: GgmlType, rows: usize, cols: usize) -> Option<usize> {
        let ok =
            matches!(
                ty,
                GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q8_0
            ) || (matches!(ty, GgmlType::Q5_1) || is_iq4(ty) || is_lattice(ty) || is_halves(ty))
                && super::qgemm::has_vnni();
        let block = ty.block_size();
        if !ok || !cols.is_multiple_of(block) || !has_packed_kernel(ty) {
            return None;
        }
        Some(rows.div_ceil(G) * (cols / 32) * group_block_bytes(ty))
    }

    /// As `new`, with the copy in `arena` where it has room.
    pub fn new_in(w: &QMat, arena: Option<&PackArena>) -> Option<Self> {
        let bytes = Self::bytes_for(w.ty, w.rows, w.cols)?;
        let (nb, gb) = (w.cols / 32, group_block_bytes(w.ty));
        let (extra, qs_at, chunks) = layout(w.ty);
        let size = w.ty.type_size();
        let mut buf = PackBuf::<u8>::zeroed(bytes, arena);
        let data = buf.as_mut_slice();
        for r in 0..w.rows {
            let (g, lane) = (r / G, r % G);
            let row = w.row(r);
            if is_halves(w.ty) {
                let mut q = [0i8; 32];
                for b in 0..nb {
                    let sb = &row[(b / 8) * size..(b / 8 + 1) * size];
                    let sc = halves_block(w.ty, sb, b % 8, &mut q);
                    let at = (g * nb + b) * gb;
                    for h in 0..2 {
                        let sum: i32 = q[16 * h..16 * h + 16].iter().map(|&v| v as i32).sum();
                        let (s_at, w_at) = (at + 64 * h + 4 * lane, at + 128 + 64 * h + 4 * lane);
                        data[s_at..s_at + 4].copy_from_slice(&sc[h].to_le_bytes());
                        data[w_at..w_at + 4].copy_from_slice(&sum.to_le_bytes());
                    }
                    for c in 0..8 {
                        let o = at + 256 + c * 64 + 4 * lane;
                        for (d, q) in data[o..o + 4].iter_mut().zip(&q[4 * c..4 * c + 4]) {
                            *d = *q as u8;
                        }
                    }
                }
                continue;
            }
            if is_lattice(w.ty) {
                let mut q = [0i8; 32];
                for b in 0..nb {
                    let sb = &row[(b / 8) * size..(b / 8 + 1) * size];
                    let scale = crate::quant::iq_lattice::block32(w.ty, sb, b % 8, &mut q);
                    let at = (g * nb + b) * gb;
                    data[at + 4 * lane..at + 4 * lane + 4].copy_from_slice(&scale.to_le_bytes());
                    for c in 0..8 {
                        let o = at + 64 + c * 64 + 4 * lane;
                        for (d, q) in data[o..o + 4].iter_mut().zip(&q[4 * c..4 * c + 4]) {
                            *d = *q as u8 ^ Q8_FLIP;
                        }
                    }
                }
                continue;
            }
            if is_iq4(w.ty) {
                for b in 0..nb {
                    let (scale, qs) = iq4_block(w.ty, row, b);
                    let at = (g * nb + b) * gb;
                    data[at + 4 * lane..at + 4 * lane + 4].copy_from_slice(&scale.to_le_bytes());
                    super::group_tiles::interleave4(data, at + 64, lane, qs);
                }
                continue;
            }
            for b in 0..nb {
                let blk = &row[b * size..(b + 1) * size];
                let at = (g * nb + b) * gb;
                data[at + 2 * lane..at + 2 * lane + 2].copy_from_slice(&blk[0..2]);
                for (i, v) in blk[2..2 + extra].iter().enumerate() {
                    data[at + field_at(w.ty, lane, i)] = *v;
                }
                let flip = if w.ty == GgmlType::Q8_0 { Q8_FLIP } else { 0 };
                for c in 0..chunks {
                    let o = at + 32 + G * extra + c * 64 + 4 * lane;
                    let four = &blk[qs_at + 4 * c..qs_at + 4 * c + 4];
                    for (d, q) in data[o..o + 4].iter_mut().zip(four) {
                        *d = q ^ flip;
                    }
                }
            }
        }
        Some(Self {
            ty: w.ty,
            rows: w.rows,
            cols: w.cols,
            gb,
            data: buf,
        })
    }

    pub fn groups(&self) -> usize {
        self.rows.div_ceil(G)
    }

    /// Row `r` as f32: each block put back together from the 16-row layout and dequantized.
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        let (g, lane, nb) = (r / G, r % G, self.cols / 32);
        let (extra, qs_at, chunks) = layout(self.ty);
        let data = self.data.as_slice();
        if is_halves(self.ty) {
            let f32_at =
                |i: usize| f32::from_le_bytes([data[i], data[i + 1], data[i + 2], data[i + 3]]);
            for (b, out) in out[..self.cols].chunks_exact_mut(32).enumerate() {
                let at = (g * nb + b) * self.gb;
                let sc = [f32_at(at + 4 * lane), f32_at(at + 64 + 4 * lane)];
                for c in 0..8 {
                    let o = at + 256 + c * 64 + 4 * lane;
                    for (i, q) in data[o..o + 4].iter().enumerate() {
                        out[4 * c + i] = sc[c / 4] * *q as i8 as f32;
                    }
                }
            }
            return;
        }
        if is_lattice(self.ty) {
            for (b, out) in out[..self.cols].chunks_exact_mut(32).enumerate() {
                let at = (g * nb + b) * self.gb;
                let s = &data[at + 4 * lane..at + 4 * lane + 4];
                let scale = f32::from_le_bytes([s[0], s[1], s[2], s[3]]);
                for c in 0..8 {
                    let o = at + 64 + c * 64 + 4 * lane;
                    for (i, q) in data[o..o + 4].iter().enumerate() {
                        out[4 * c + i] = scale * (q ^ Q8_FLIP) as i8 as f32;
                    }
                }
            }
            return;
        }
        if is_iq4(self.ty) {
            use crate::quant::iq4::KVALUES_IQ4NL as KV;
            for (b, out) in out[..self.cols].chunks_exact_mut(32).enumerate() {
                let at = (g * nb + b) * self.gb;
                let s = &data[at + 4 * lane..at + 4 * lane + 4];
                let scale = f32::from_le_bytes([s[0], s[1], s[2], s[3]]);
                for c in 0..4 {
                    let o = at + 64 + c * 64 + 4 * lane;
                    for (i, q) in data[o..o + 4].iter().enumerate() {
                        out[4 * c + i] = scale * KV[(q & 0x0f) as usize] as f32;
                        out[16 + 4 * c + i] = scale * KV[(q >> 4) as usize] as f32;
                    }
                }
            }
            return;
        }
        let mut blk = [0u8; 34];
        let blk = &mut blk[..self.ty.type_size()];
        for (b, out) in out[..self.cols].chunks_exact_mut(32).enumerate() {
            let at = (g * nb + b) * self.gb;
            blk[0..2].copy_from_slice(&data[at + 2 * lane..at + 2 * lane + 2]);
            for (i, v) in blk[2..2 + extra].iter_mut().enumerate() {
                *v = data[at + field_at(self.ty, lane, i)];
            }
            let flip = if self.ty == GgmlType::Q8_0 {
                Q8_FLIP
            } else {
                0
            };
            for c in 0..chunks {
                let o = at + 32 + G * extra + c * 64 + 4 * lane;
                for (q, d) in blk[qs_at + 4 * c..qs_at + 4 * c + 4]
                    .iter_mut()
                    .zip(&data[o..o + 4])
                {
                    *q = d ^ flip;
                }
            }
            crate::quant::dequantize(self.ty, blk, out).expect("packed types dequantize");
        }
    }

    /// The bytes of group `g`'s block `b`.
    pub(super) fn block(&self, g: usize, b: usize) -> *const u8 {
        self.data.as_slice()[(g * (self.cols / 32) + b) * self.gb..].as_ptr()
    }

    /// Rows of groups g0..g1 for all T tokens: out[t * ldo + r]. `act` holds X (T, K) as
    /// two 8-bit planes (`act_split`). With COARSE, the coarse plane alone (half the integer
    /// work, for a draft model's proposals: `coarse_activations`).
    ///
    /// # Safety
    /// The CPU must have the kernel (`has_packed_kernel`, which packing checked); `out` must
    /// be valid for writes at `t * ldo + r` for t < T and the rows of these groups, and owned
    /// by the caller.
    pub unsafe fn gemm_groups<const COARSE: bool>(
        &self,
        g0: usize,
        g1: usize,
        act: &SplitAct,
        t: usize,
        out: *mut f32,
        ldo: usize,
    ) {
        let vnni = super::qgemm::has_vnni();
        #[cfg(target_arch = "x86_64")]
        super::group_tiles::for_group_tiles::<TT>(
            g0..g1,
            0..t,
            self.rows,
            out,
            ldo,
            |g, t0, tn, res| {
                use super::group_tiles::by_tile_width;
                use super::repack_avx2::group as avx2_group;
                use super::repack_avx2::{group_q5 as avx2_group_q5, group_q8 as avx2_group_q8};
                use super::repack_vnni::{group, group_halves, group_iq4, group_q5, group_q8};
                match (vnni, self.ty) {
                    (true, GgmlType::Q5_0) => {
                        by_tile_width!(tn, group_q5, false, COARSE; self, g, act, t0, res)
                    }
                    (true, GgmlType::Q5_1) => {
                        by_tile_width!(tn, group_q5, true, COARSE; self, g, act, t0, res)
                    }
                    (true, GgmlType::Q8_0) => {
                        by_tile_width!(tn, group_q8, false, COARSE; self, g, act, t0, res)
                    }
                    (true, GgmlType::IQ2_XXS | GgmlType::IQ3_XXS | GgmlType::IQ3_S) => {
                        by_tile_width!(tn, group_q8, true, COARSE; self, g, act, t0, res)
                    }
                    (true, GgmlType::IQ2_XS | GgmlType::IQ2_S | GgmlType::Q3_K) => {
                        by_tile_width!(tn, group_halves, COARSE; self, g, act, t0, res)
                    }
                    (true, GgmlType::Q4_1) => {
                        by_tile_width!(tn, group, true, COARSE; self, g, act, t0, res)
                    }
                    (true, GgmlType::IQ4_NL | GgmlType::IQ4_XS) => {
                        by_tile_width!(tn, group_iq4, COARSE; self, g, act, t0, res)
                    }
                    (true, _) => by_tile_width!(tn, group, false, COARSE; self, g, act, t0, res),
                    (false, GgmlType::Q5_0) => {
                        by_tile_width!(tn, avx2_group_q5, COARSE; self, g, act, t0, res)
                    }
                    (false, GgmlType::Q8_0) => {
                        by_tile_width!(tn, avx2_group_q8, COARSE; self, g, act, t0, res)
                    }
                    (false, GgmlType::Q4_1) => {
                        by_tile_width!(tn, avx2_group, true, COARSE; self, g, act, t0, res)
                    }
                    (false, _) => {
                        by_tile_width!(tn, avx2_group, false, COARSE; self, g, act, t0, res)
                    }
                }
            },
        );
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (g0, g1, act, t, out, ldo, vnni);
    }
}

#[cfg(test)]
#[path = "repack_tests.rs"]
mod bits;

#[cfg(test)]
mod tests {
    use super::*;

    /// Σ w·x in f64 over dequantized row `r` and the values `x` (K).
    fn exact(w: &QMat, r: usize, x: &[f32]) -> f64 {
        let mut row = vec![0f32; w.cols];
        crate::quant::dequantize(w.ty, w.row(r), &mut row).unwrap();
        row.iter().zip(x).map(|(a, b)| *a as f64 * *b as f64).sum()
    }

    #[test]
    fn packed_products_equal_the_dequantized_rows_against_both_planes() {
        if !has_packed_kernel(GgmlType::Q4_0) {
            eprintln!("no AVX2 or AVX-512 VNNI here: the legacy types stay on the row kernels");
            assert!(PackedQ4::new(&QMat {
                ty: GgmlType::Q4_0,
                rows: 0,
                cols: 32,
                data: &[],
                packed: None
            })
            .is_none());
            return;
        }
        for (ty, n, k, t) in [
            (GgmlType::Q4_0, 16, 64, 1),
            (GgmlType::Q4_0, 37, 576, 5),
            (GgmlType::Q4_0, 5, 1536, 2),
            (GgmlType::Q4_1, 37, 576, 5),
            (GgmlType::Q4_1, 16, 1536, 1),
            (GgmlType::Q8_0, 37, 576, 5),
            (GgmlType::Q8_0, 3, 64, 1),
            (GgmlType::Q5_0, 37, 576, 5),
            (GgmlType::Q5_0, 16, 1536, 1),
            (GgmlType::Q5_1, 37, 576, 5),
            (GgmlType::Q5_1, 16, 1536, 1),
            (GgmlType::IQ4_NL, 37, 576, 5),
            (GgmlType::IQ4_XS, 37, 512, 5),
            (GgmlType::IQ4_XS, 16, 1536, 1),
            (GgmlType::IQ3_S, 37, 512, 5),
            (GgmlType::IQ3_XXS, 16, 1536, 1),
            (GgmlType::IQ2_XXS, 21, 256, 3),
            (GgmlType::IQ2_XS, 37, 512, 5),
            (GgmlType::IQ2_S, 16, 1536, 1),
            (GgmlType::Q3_K, 37, 512, 5),
            (GgmlType::Q3_K, 16, 1536, 1),
        ] {
            if PackedQ4::bytes_for(ty, n, k).is_none() {
                continue;
            }
            let bytes = super::super::test_matrix(ty, n, k, 3);
            let w = QMat::new(ty, n, k, &bytes).unwrap();
            let p = PackedQ4::new(&w).expect("packable");
            let (mut got, mut want) = (vec![0f32; k], vec![0f32; k]);
            for r in 0..n {
                p.dequantize_row(r, &mut got);
                crate::quant::dequantize(ty, w.row(r), &mut want).unwrap();
                assert_eq!(got, want, "{ty} row {r} read back from the copy");
            }
            let mut x = super::super::test_data(t * k, 4);
            x[3] = 9.0; // an outlier: the rest of its block keeps its precision in the fine plane
            let mut act = SplitAct::default();
            act.quantize(&x);
            let mut y = vec![0f32; t * n];
            // SAFETY: kernel detected; y is (t, n).
            unsafe { p.gemm_groups::<false>(0, p.groups(), &act, t, y.as_mut_ptr(), n) };
            let nb = k / 32;
            for i in 0..t {
                let xr: Vec<f32> = (0..k).map(|e| act.value(i * nb + e / 32, e % 32)).collect();
                let xi = &x[i * k..(i + 1) * k];
                for r in 0..n {
                    // the kernel equals the dequantized row against the planes' values (f32
                    // sums), and those lie within 2^-15 of the block's amax from x
                    let (want, truth) = (exact(&w, r, &xr), exact(&w, r, xi));
                    let got = y[i * n + r] as f64;
                    assert!(
                        (got - want).abs() <= 2e-5 * (1.0 + want.abs()),
                        "{ty} n={n} k={k} ({i},{r}): {got} vs {want}"
                    );
                    assert!(
                        (got - truth).abs() <= 2e-3 * (1.0 + truth.abs()),
                        "{ty} ({i},{r}): {got} vs the unrounded {truth}"
                    );
                }
            }
            // one token at a time gives the same bits as the batch
            for i in 0..t {
                let mut a1 = SplitAct::default();
                a1.quantize(&x[i * k..(i + 1) * k]);
                let mut y1 = vec![0f32; n];
                // SAFETY: as above.
                unsafe { p.gemm_groups::<false>(0, p.groups(), &a1, 1, y1.as_mut_ptr(), n) };
                assert_eq!(&y1[..], &y[i * n..(i + 1) * n]);
            }
        }
    }
}
