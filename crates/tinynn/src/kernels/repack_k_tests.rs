//! Tests of `repack_k`'s layout and its kernels (VNNI and AVX2): bit for bit against a scalar
//! model of their arithmetic, and close to the row dots' (`qdot_k`).

use super::*;
use crate::kernels::qdot_k::{dot_q4_k_ref, dot_q5_k_ref, Q8KRow};
use crate::quant::float::f16_at;

/// Scalar model of the packed kernels for one row: exact i32 sums per block (quants times
/// activations, each sub-block's by its scale; mins times the sub-blocks' activation sums),
/// then per block acc += isum * (d * xd) and acc -= msum * (dmin * xd), each one fma.
fn packed_ref(ty: GgmlType, row: &[u8], a: &Q8KRow) -> f32 {
    let q5 = ty == GgmlType::Q5_K;
    let qs_at = if q5 { 48 } else { 16 };
    let mut acc = 0f32;
    for (i, blk) in row.chunks_exact(ty.type_size()).enumerate() {
        let sm = scales_mins_k4(&blk[4..16]);
        let q8 = &a.qs[QK_K * i..QK_K * (i + 1)];
        let (mut isum, mut msum) = (0i32, 0i32);
        for s in 0..8 {
            let mut sum = 0i32;
            for e in 0..32 {
                let byte = blk[qs_at + 32 * (s / 2) + e];
                let mut q = if s % 2 == 1 { byte >> 4 } else { byte & 15 } as i32;
                if q5 {
                    q += (((blk[16 + e] >> s) & 1) as i32) << 4;
                }
                sum += q * q8[32 * s + e] as i32;
            }
            isum += sm[s] as i32 * sum;
            let pair = a.bsums[16 * i + 2 * s] as i32 + a.bsums[16 * i + 2 * s + 1] as i32;
            msum += sm[8 + s] as i32 * pair;
        }
        let xd = a.d[i];
        acc = (isum as f32).mul_add(f16_at(blk, 0) * xd, acc);
        acc = (-(msum as f32)).mul_add(f16_at(blk, 2) * xd, acc);
    }
    acc
}

/// `w` packed into a fresh buffer (Q4_K through `PackedK`, Q5_K as prefill packs it).
fn packed(w: &QMat) -> Vec<u8> {
    let mut data = vec![0u8; packed_bytes(w.ty, w.rows, w.cols)];
    pack_rows(w, 0..w.rows, &mut data);
    data
}

/// Y (t, n) from the kernel, the tokens split in two calls as the drivers may split them.
fn run(w: &QMat, data: &[u8], act: &Q8KAct, t: usize, split: usize) -> Vec<f32> {
    let view = KGroups {
        ty: w.ty,
        rows: w.rows,
        cols: w.cols,
        data,
    };
    let mut y = vec![f32::NAN; t * w.rows];
    let groups = w.rows.div_ceil(G);
    // SAFETY: callers checked the kernel; y is (t, n); the two token ranges are disjoint.
    unsafe {
        view.gemm_groups(0..groups, act, 1, 0..split, y.as_mut_ptr(), w.rows);
        view.gemm_groups(0..groups, act, 1, split..t, y.as_mut_ptr(), w.rows);
    }
    y
}

fn check(ty: GgmlType, n: usize, k: usize, t: usize, wbytes: &[u8], x: &[f32]) {
    let w = QMat::new(ty, n, k, wbytes).unwrap();
    let mut act = Q8KAct::default();
    act.quantize(x);
    let data = packed(&w);
    // every split of the tokens gives the same bits: a token's result is its own
    let y = run(&w, &data, &act, t, t / 2);
    assert_eq!(y, run(&w, &data, &act, t, 0), "{ty}: split tokens");
    for i in 0..t {
        let a = act.token(i, k / QK_K);
        for r in 0..n {
            let got = y[i * n + r];
            let want = packed_ref(ty, w.row(r), &a);
            assert_eq!(got.to_bits(), want.to_bits(), "{ty} n={n} k={k} ({i},{r})");
            let dot = match ty {
                GgmlType::Q4_K => dot_q4_k_ref(w.row(r), &a),
                _ => dot_q5_k_ref(w.row(r), &a),
            };
            assert!(
                (got - dot).abs() <= 1e-4 * (1.0 + dot.abs()),
                "{ty} n={n} k={k} ({i},{r}): {got} vs the row dot's {dot}"
            );
        }
    }
}

#[test]
fn packed_q4_k_and_q5_k_give_the_scalar_models_bits() {
    if !has_kernel(GgmlType::Q4_K) {
        eprintln!("no AVX2 or AVX-512 VNNI here: Q4_K and Q5_K stay on their row dots");
        return;
    }
    let cases = [
        (16, 256, 1),
        (37, 1536, 5),
        (5, 512, 2),
        (33, 2304, 7),
        (24, 768, 4),
        (20, 512, 8),
        (9, 256, 12),
        (7, 256, 13),
    ];
    for ty in [GgmlType::Q4_K, GgmlType::Q5_K] {
        for (n, k, t) in cases {
            let wbytes = super::super::test_matrix(ty, n, k, 7 + n as u64);
            check(ty, n, k, t, &wbytes, &super::super::test_data(t * k, 4));
        }
    }
}

#[test]
fn packed_kernels_hold_the_largest_sums_without_saturating() {
    if !has_kernel(GgmlType::Q4_K) {
        eprintln!("no AVX2 or AVX-512 VNNI here: Q4_K and Q5_K stay on their row dots");
        return;
    }
    // every quant at its largest (nibbles 15, fifth bits set), every scale and min 63, and
    // activations that all quantize to -127: each i16 pair sum at its extreme
    for ty in [GgmlType::Q4_K, GgmlType::Q5_K] {
        let (n, k) = (16, 512);
        let mut wbytes = vec![0xFFu8; n * k / QK_K * ty.type_size()];
        for blk in wbytes.chunks_exact_mut(ty.type_size()) {
            blk[..4].copy_from_slice(&[0x00, 0x3C, 0x00, 0x38]); // d = 1, dmin = 0.5
        }
        let x: Vec<f32> = (0..2 * k).map(|i| if i < k { 0.5 } else { -2.0 }).collect();
        check(ty, n, k, 2, &wbytes, &x);
    }
}

#[test]
fn packed_q4_k_reads_back_its_rows() {
    if !has_kernel(GgmlType::Q4_K) {
        eprintln!("no AVX2 or AVX-512 VNNI here: Q4_K stays on its row dots");
        return;
    }
    let ty = GgmlType::Q4_K;
    let (n, k) = (37, 1536);
    let bytes = super::super::test_matrix(ty, n, k, 7);
    let w = QMat::new(ty, n, k, &bytes).unwrap();
    let p = PackedK::new_in(&w, None).expect("packable");
    let (mut got, mut want) = (vec![0f32; k], vec![0f32; k]);
    for r in 0..n {
        p.dequantize_row(r, &mut got);
        crate::quant::dequantize(ty, w.row(r), &mut want).unwrap();
        assert_eq!(got, want, "{ty} row {r} read back from the copy");
    }
}

#[test]
fn q5_k_prefill_rows_match_the_whole_matrix_kernel() {
    if !has_kernel(GgmlType::Q5_K) {
        eprintln!("no AVX2 or AVX-512 VNNI here: Q5_K stays on its row dots");
        return;
    }
    let (ty, n, k, t) = (GgmlType::Q5_K, 70, 512, 6);
    let bytes = super::super::test_matrix(ty, n, k, 3);
    let w = QMat::new(ty, n, k, &bytes).unwrap();
    let mut act = Q8KAct::default();
    act.quantize(&super::super::test_data(t * k, 5));
    let mut y = vec![0f32; t * n];
    // in chunks of 32 rows (and a short last one), as prefill's tasks take them
    for r0 in (0..n).step_by(32) {
        // SAFETY: kernel detected; y is (t, n); the chunks are disjoint.
        unsafe { prefill_rows(&w, r0..(r0 + 32).min(n), (&act, 1), t, y.as_mut_ptr(), n) };
    }
    assert_eq!(y, run(&w, &packed(&w), &act, t, 0));
}
