//! `repack`'s kernels (VNNI or AVX2, whichever this CPU runs) bit for bit against a scalar
//! model of their arithmetic: per block the exact integer Σ w·(128·hi + lo), then
//! acc = isum · (d · lo.d) + acc and, for Q4_1, macc = m · s + macc, each one fma; the row's
//! result acc + macc. Both kernels follow this model, so both CPUs give the same bits. Their
//! coarse mode (a draft's) follows the same model on the coarse plane alone (Σ w·hi, hi's
//! scale and sum).

use super::*;
use crate::quant::float::f16_at;

/// The model for one row of `ty` and token `tok` of `act`, both planes or the coarse one.
fn model(ty: GgmlType, row: &[u8], act: &SplitAct, tok: usize, coarse: bool) -> f32 {
    let size = ty.type_size();
    let nb = row.len() / size;
    let (mut acc, mut macc) = (0f32, 0f32);
    for (b, blk) in row.chunks_exact(size).enumerate() {
        let tb = tok * nb + b;
        let w = |e: usize| -> i32 {
            match ty {
                GgmlType::Q8_0 => blk[2 + e] as i8 as i32,
                GgmlType::Q5_0 => {
                    let byte = blk[6 + e % 16];
                    let q = if e < 16 { byte & 15 } else { byte >> 4 } as i32;
                    let qh = u32::from_le_bytes(blk[2..6].try_into().unwrap());
                    q + (((qh >> e) & 1) << 4) as i32 - 16
                }
                _ => {
                    let byte = blk[if ty == GgmlType::Q4_1 { 4 } else { 2 } + e % 16];
                    let q = if e < 16 { byte & 15 } else { byte >> 4 } as i32;
                    if ty == GgmlType::Q4_0 {
                        q - 8
                    } else {
                        q
                    }
                }
            }
        };
        let isum: i32 = (0..32)
            .map(|e| {
                let (hi, lo) = (act.hi.qs[tb * 32 + e] as i32, act.lo.qs[tb * 32 + e] as i32);
                w(e) * if coarse { hi } else { 128 * hi + lo }
            })
            .sum();
        let (unit, s) = if coarse {
            (act.hi.d[tb], act.hi.s[tb])
        } else {
            (act.lo.d[tb], act.s[tb])
        };
        acc = (isum as f32).mul_add(f16_at(blk, 0) * unit, acc);
        if ty == GgmlType::Q4_1 {
            macc = f16_at(blk, 2).mul_add(s, macc);
        }
    }
    if ty == GgmlType::Q4_1 {
        acc + macc
    } else {
        acc
    }
}

/// Y (t, n) from the kernel over all groups, the tokens in two calls split at `split`.
fn run(p: &PackedQ4, x: &[f32], split: usize, coarse: bool) -> Vec<f32> {
    let (n, k) = (p.rows, p.cols);
    let t = x.len() / k;
    let mut y = vec![f32::NAN; t * n];
    // each part quantized on its own, as a caller with fewer tokens would (per 32-block, so
    // the planes are the whole's)
    let (mut first, mut second) = (SplitAct::default(), SplitAct::default());
    first.quantize(&x[..split * k]);
    second.quantize(&x[split * k..]);
    // SAFETY: the kernel exists (the matrix was packed); y is (t, n), the parts disjoint.
    unsafe {
        let f = if coarse {
            PackedQ4::gemm_groups::<true>
        } else {
            PackedQ4::gemm_groups::<false>
        };
        f(p, 0, p.groups(), &first, split, y.as_mut_ptr(), n);
        f(
            p,
            0,
            p.groups(),
            &second,
            t - split,
            y.as_mut_ptr().add(split * n),
            n,
        );
    }
    y
}

fn check(ty: GgmlType, bytes: &[u8], n: usize, k: usize, x: &[f32], what: &str) {
    let w = QMat::new(ty, n, k, bytes).unwrap();
    let Some(p) = PackedQ4::new(&w) else {
        return;
    };
    let t = x.len() / k;
    let mut act = SplitAct::default();
    act.quantize(x);
    for (&coarse, split) in [false, true]
        .iter()
        .flat_map(|c| [0, 1, t / 2, t].map(|s| (c, s)))
    {
        let y = run(&p, x, split, coarse);
        for j in 0..t {
            for r in 0..n {
                let want = model(ty, w.row(r), &act, j, coarse);
                assert_eq!(
                    y[j * n + r].to_bits(),
                    want.to_bits(),
                    "{ty} {what} n={n} k={k} token {j} row {r} (split {split}, coarse \
                     {coarse}): {} vs {want}",
                    y[j * n + r]
                );
            }
        }
    }
}

#[test]
fn kernels_equal_the_scalar_model_bit_for_bit() {
    for ty in [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q8_0,
    ] {
        if !has_packed_kernel(ty) {
            eprintln!("no packed kernel for {ty} on this CPU");
            continue;
        }
        for (n, k, t) in [(16, 32, 1), (37, 576, 5), (5, 1536, 3), (40, 96, 9)] {
            let bytes = crate::kernels::test_matrix(ty, n, k, 7 + n as u64);
            let mut x = crate::kernels::test_data(t * k, 3 + k as u64);
            x[5] = -6.0; // an outlier block
            check(ty, &bytes, n, k, &x, "random");
        }
    }
}

/// The largest sums the kernels can meet: 4-bit weights all 15, Q5_0's all 31 (and Q8_0's at
/// -128 and 127)
/// against blocks whose planes sit at their extremes (hi ±126, lo ±64), so that a kernel
/// keeping more products in 16 bits than they hold would wrap.
#[test]
fn the_largest_sums_do_not_wrap() {
    let (n, k, t) = (16, 64, 2);
    // per block: one element at the block's amax, the rest where hi = ±126 and lo = ±64; one
    // sign per token, so that no block's sum cancels another's
    let x: Vec<f32> = (0..t * k)
        .map(|i| {
            let sign = if i / k == 0 { 1.0 } else { -1.0 };
            sign * if i % 32 == 0 { 1.0 } else { 126.5 / 127.0 }
        })
        .collect();
    let mut a = SplitAct::default();
    a.quantize(&x);
    assert_eq!((a.hi.qs[1], a.lo.qs[1]), (126, 64), "the planes' extremes");
    for ty in [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q8_0,
    ] {
        let size = ty.type_size();
        let mut bytes = vec![0u8; n * k / 32 * size];
        for (i, blk) in bytes.chunks_exact_mut(size).enumerate() {
            blk[0..2].copy_from_slice(&half::f16::from_f32(0.01).to_bits().to_le_bytes());
            match ty {
                GgmlType::Q8_0 => {
                    let v = if (i / 2) % 2 == 0 { 0x80 } else { 127 };
                    blk[2..].fill(v);
                }
                GgmlType::Q4_1 => {
                    blk[2..4].copy_from_slice(&half::f16::from_f32(-0.5).to_bits().to_le_bytes());
                    blk[4..].fill(0xFF);
                }
                _ => blk[2..].fill(0xFF),
            }
        }
        check(ty, &bytes, n, k, &x, "extremes");
    }
}
