//! The search tables behind ggml's lattice quantizers: ports of ggml-quants.c's
//! `iq2xs_init_impl` (for `GGML_TYPE_IQ2_XXS`, `GGML_TYPE_IQ2_XS` and `GGML_TYPE_IQ2_S`: grid
//! sizes 256, 512 and 1024), `iq3xs_init_impl` (grid sizes 256 and 512) and
//! `iq2_find_best_neighbour` / `iq3_find_best_neighbour`, llama.cpp 0c1e570.
//!
//! A lattice point is `N` values (8 for the IQ2 types, 4 for the IQ3 types), each `2 l + 1`
//! for a level `l` (0..3 for IQ2, 0..8 for IQ3). ggml builds, once per grid:
//! - the points (`kgrid_q2xs` / `kgrid_q3xs`) from its `kgrid_*` tables of packed levels.
//!   Those tables are the decoders' grids with each byte replaced by its level (checked entry
//!   by entry against `kgrid_2bit_256`, `kgrid_2bit_512`, `kgrid_2bit_1024`, `kgrid_256` and
//!   `kgrid_512`), so they are derived here from `iq_grids` (`IQ2XXS_GRID`, `IQ2XS_GRID`,
//!   `IQ2S_GRID`, `IQ3XXS_GRID`, `IQ3S_GRID`) instead of being copied a second time;
//! - a map from every packed level vector (`bits` per value, little end first) to its point's
//!   index, or, for a vector that is not a point, to its list of nearest points;
//! - those lists: every point at one of the `nwant` smallest squared distances, nearest first
//!   and by index among equals (ggml's qsort of `(d2, index)` pairs, a total order).
//!
//! Each table is built on first use and shared (`OnceLock`).

use super::iq_grids::{IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID};
use std::sync::OnceLock;

/// One of ggml's search grids: `N` values per point, `bits` per packed level.
pub(super) struct Lattice<const N: usize> {
    /// `bits` per level in a packed index (2 for IQ2, 3 for IQ3).
    bits: u32,
    /// Point `k`'s values `2 l + 1`.
    points: Vec<[i8; N]>,
    /// Indexed by packed levels: `k >= 0` for point `k`, else `-(o + 1)` where
    /// `neighbours[o]` is the count of nearest points and `neighbours[o + 1..]` their indices
    /// (ggml's `kmap_q2xs` / `kmap_q3xs` and `kneighbors_q2xs` / `kneighbors_q3xs`).
    map: Vec<i32>,
    neighbours: Vec<u16>,
}

/// What the map holds for a packed level vector.
pub(super) enum Lookup<'a> {
    /// It is point `k` of the grid.
    OnGrid(usize),
    /// It is off the grid; these are the candidate points.
    Off(&'a [u16]),
}

impl<const N: usize> Lattice<N> {
    /// Builds the tables from each point's levels, as `iq2xs_init_impl` / `iq3xs_init_impl`.
    fn build(levels: &[[u8; N]], bits: u32, map_size: usize, nwant: usize) -> Self {
        let points: Vec<[i8; N]> = levels
            .iter()
            .map(|lv| lv.map(|l| 2 * l as i8 + 1))
            .collect();
        let mut map = vec![-1i32; map_size];
        for (k, p) in points.iter().enumerate() {
            map[pack_points(p, bits)] = k as i32;
        }
        // ggml counts the lists first (in parallel) and then fills them at prefix-summed
        // offsets; filling them in index order gives the same offsets.
        let mut neighbours = Vec::new();
        let mut dist = Vec::with_capacity(points.len());
        let mask = (1usize << bits) - 1;
        for (i, entry) in map.iter_mut().enumerate() {
            if *entry >= 0 {
                continue;
            }
            let pos: [i8; N] =
                std::array::from_fn(|k| 2 * ((i >> (bits as usize * k)) & mask) as i8 + 1);
            nearest(&points, &pos, nwant, &mut dist);
            *entry = -(neighbours.len() as i32 + 1);
            neighbours.push(dist.len() as u16);
            neighbours.extend(dist.iter().map(|&(_, j)| j));
        }
        Lattice {
            bits,
            points,
            map,
            neighbours,
        }
    }

    /// Packs levels `l` (one per value, each below `2^bits`) into a map index.
    #[inline]
    pub(super) fn pack(&self, l: &[i8]) -> usize {
        l.iter()
            .enumerate()
            .fold(0, |u, (i, &q)| u | (q as usize) << (self.bits as usize * i))
    }

    /// The point at packed levels `u`, or the candidates to search instead.
    #[inline]
    pub(super) fn lookup(&self, u: usize) -> Lookup<'_> {
        let m = self.map[u];
        if m >= 0 {
            Lookup::OnGrid(m as usize)
        } else {
            let o = (-m - 1) as usize;
            let n = self.neighbours[o] as usize;
            Lookup::Off(&self.neighbours[o + 1..o + 1 + n])
        }
    }

    /// The index of the point with levels `l`. The quantizers only ever ask for points of
    /// the grid; anything else is a bug (ggml prints "Oops: found point .. not on grid" and
    /// aborts).
    pub(super) fn index_of(&self, l: &[i8]) -> usize {
        match self.lookup(self.pack(l)) {
            Lookup::OnGrid(k) => k,
            Lookup::Off(_) => panic!("levels {l:?} are not a point of the grid"),
        }
    }

    /// `iq2_find_best_neighbour` / `iq3_find_best_neighbour`: of the `candidates`, the point
    /// nearest to `xval` at `scale` under `weight` (the first of equals), its levels written
    /// to `l`; returns its index.
    pub(super) fn best_neighbour(
        &self,
        candidates: &[u16],
        xval: &[f32],
        weight: &[f32],
        scale: f32,
        l: &mut [i8],
    ) -> usize {
        let mut best_d2 = f32::MAX;
        let mut best = candidates[0] as usize;
        for &j in candidates {
            let pg = &self.points[j as usize];
            let mut d2 = 0f32;
            for i in 0..N {
                let diff = scale * pg[i] as f32 - xval[i];
                d2 += weight[i] * diff * diff;
            }
            if d2 < best_d2 {
                best_d2 = d2;
                best = j as usize;
            }
        }
        for (li, &p) in l.iter_mut().zip(&self.points[best]) {
            *li = (p - 1) / 2;
        }
        best
    }
}

/// Into `dist`, as `(d2, index)`: the points at the `nwant` smallest squared distances from
/// `pos` (all of them if there are fewer distances), nearest first and by index among equals.
/// ggml sorts all points so (qsort by `iq2_compare_func` / `iq3_compare_func`, a total order)
/// and takes them up to the first distance past the `nwant`-th; this finds that cut-off
/// first and sorts only what it keeps, the same list.
fn nearest<const N: usize>(
    points: &[[i8; N]],
    pos: &[i8; N],
    nwant: usize,
    dist: &mut Vec<(i32, u16)>,
) {
    // the smallest distinct distances, ascending (nwant is at most 3)
    let mut smallest = [i32::MAX; 3];
    let smallest = &mut smallest[..nwant];
    dist.clear();
    for (j, p) in points.iter().enumerate() {
        let mut d2 = 0i32;
        for (&a, &b) in p.iter().zip(pos) {
            let d = (a - b) as i32;
            d2 += d * d;
        }
        dist.push((d2, j as u16));
        if d2 < smallest[nwant - 1] && !smallest.contains(&d2) {
            smallest[nwant - 1] = d2;
            smallest.sort_unstable();
        }
    }
    let cutoff = smallest.iter().rev().find(|&&d| d != i32::MAX);
    let cutoff = *cutoff.unwrap_or(&i32::MAX);
    dist.retain(|&(d2, _)| d2 <= cutoff);
    dist.sort_unstable();
}

/// The packed levels of a point (values `2 l + 1`).
fn pack_points<const N: usize>(p: &[i8; N], bits: u32) -> usize {
    p.iter().enumerate().fold(0, |u, (i, &v)| {
        u | (((v - 1) / 2) as usize) << (bits as usize * i)
    })
}

/// The level of each byte of a decoder grid entry (`levels` are the grid's magnitudes in
/// increasing order).
fn grid_levels<const N: usize>(entry: u64, levels: &[u8]) -> [u8; N] {
    std::array::from_fn(|i| {
        let byte = (entry >> (8 * i)) as u8;
        let level = levels.iter().position(|&m| m == byte);
        level.expect("a decoder grid byte off its level table") as u8
    })
}

/// IQ2_XXS's grid (`grid_size` 256, `nwant` 2), IQ2_XS's (512, `nwant` 2) or IQ2_S's (1024,
/// `nwant` 1): points of 8 levels in 0..3 (magnitudes 8, 25, 43); `kmap_size` 43692 (every
/// 16-bit packing up to 0xaaab).
pub(super) fn iq2_lattice(grid_size: usize) -> &'static Lattice<8> {
    static CELLS: [OnceLock<Lattice<8>>; 3] = [OnceLock::new(), OnceLock::new(), OnceLock::new()];
    let (cell, grid, nwant): (_, &[u64], _) = match grid_size {
        256 => (&CELLS[0], &IQ2XXS_GRID, 2),
        512 => (&CELLS[1], &IQ2XS_GRID, 2),
        1024 => (&CELLS[2], &IQ2S_GRID, 1),
        _ => panic!("no IQ2 grid of {grid_size} points"),
    };
    cell.get_or_init(|| {
        let levels: Vec<[u8; 8]> = grid
            .iter()
            .map(|&g| grid_levels(g, &[0x08, 0x19, 0x2b]))
            .collect();
        Lattice::build(&levels, 2, 43692, nwant)
    })
}

/// IQ3_XXS's grid (`grid_size` 256, `nwant` 2) or IQ3_S's (512, `nwant` 3): points of 4
/// levels in 0..8; `kmap_size` 4096.
pub(super) fn iq3_lattice(grid_size: usize) -> &'static Lattice<4> {
    static CELLS: [OnceLock<Lattice<4>>; 2] = [OnceLock::new(), OnceLock::new()];
    let (cell, grid, magnitudes, nwant): (_, &[u32], [u8; 8], _) = match grid_size {
        256 => (&CELLS[0], &IQ3XXS_GRID, [4, 12, 20, 28, 36, 44, 52, 62], 2),
        512 => (&CELLS[1], &IQ3S_GRID, [1, 3, 5, 7, 9, 11, 13, 15], 3),
        _ => panic!("no IQ3 grid of {grid_size} points"),
    };
    cell.get_or_init(|| {
        let levels: Vec<[u8; 4]> = grid
            .iter()
            .map(|&g| grid_levels(g as u64, &magnitudes))
            .collect();
        Lattice::build(&levels, 3, 4096, nwant)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Packed levels of point `k`, as in ggml's `kgrid_*` tables.
    fn kgrid<const N: usize>(lat: &Lattice<N>, k: usize) -> usize {
        pack_points(&lat.points[k], lat.bits)
    }

    #[test]
    fn grids_are_ggml_kgrid_tables() {
        // first and last entries of kgrid_2bit_256, kgrid_2bit_512, kgrid_2bit_1024, kgrid_256
        // and kgrid_512 in ggml-quants.c
        let q2xxs = iq2_lattice(256);
        let want = [0, 2, 5, 8, 10, 17, 20, 32];
        assert_eq!((0..8).map(|k| kgrid(q2xxs, k)).collect::<Vec<_>>(), want);
        assert_eq!(kgrid(q2xxs, 255), 43268);
        let q2s = iq2_lattice(1024);
        let want = [0, 2, 5, 8, 10, 17, 20, 22];
        assert_eq!((0..8).map(|k| kgrid(q2s, k)).collect::<Vec<_>>(), want);
        assert_eq!(kgrid(q2s, 1023), 43690);
        let q2 = iq2_lattice(512);
        let want = [0, 2, 5, 8, 10, 17, 20, 22];
        assert_eq!((0..8).map(|k| kgrid(q2, k)).collect::<Vec<_>>(), want);
        assert_eq!(kgrid(q2, 510), 43665);
        assert_eq!(kgrid(q2, 511), 43690);
        let q3 = iq3_lattice(256);
        assert_eq!(
            (0..6).map(|k| kgrid(q3, k)).collect::<Vec<_>>(),
            [0, 2, 4, 9, 11, 15]
        );
        assert_eq!(kgrid(q3, 255), 3992);
        let q3s = iq3_lattice(512);
        assert_eq!(
            (0..6).map(|k| kgrid(q3s, k)).collect::<Vec<_>>(),
            [0, 1, 2, 5, 7, 8]
        );
        assert_eq!(kgrid(q3s, 511), 4032);
    }

    #[test]
    fn off_grid_vectors_list_their_nearest_points() {
        let q3 = iq3_lattice(256);
        let mut off = 0;
        for u in 0..4096 {
            match q3.lookup(u) {
                Lookup::OnGrid(k) => assert_eq!(kgrid(q3, k), u),
                Lookup::Off(list) => {
                    off += 1;
                    assert!(!list.is_empty());
                    assert!(list.iter().all(|&j| (j as usize) < 256));
                }
            }
        }
        assert_eq!(off, 4096 - 256);
        for grid_size in [256, 512, 1024] {
            let q2 = iq2_lattice(grid_size);
            let off = (0..43692)
                .filter(|&u| matches!(q2.lookup(u), Lookup::Off(l) if !l.is_empty()))
                .count();
            assert_eq!(off, 43692 - grid_size);
        }
    }
}
