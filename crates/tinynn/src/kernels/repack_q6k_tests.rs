//! Tests of `repack_q6k`: the kernels against a scalar model of their arithmetic, bit for bit.

use super::*;
use crate::kernels::qdot_k::{dot_q6_k_ref, Q8KRow};
use crate::quant::float::f16_at;

/// Scalar model of the kernels for one row: per block the exact i32 sum over sub-blocks of
/// scale * (sum of stored values (6 bits, + 32) times activations - 32 * the activations'
/// sum), then acc += isum * (d * xd) as one fma.
fn packed_ref(row: &[u8], a: &Q8KRow) -> f32 {
    let mut acc = 0f32;
    for (i, blk) in row.chunks_exact(210).enumerate() {
        let (ql, qh, sc) = (&blk[..128], &blk[128..192], &blk[192..208]);
        let mut isum = 0i32;
        for (s, &scale) in sc.iter().enumerate() {
            let mut sum = 0i32;
            for e in 16 * s..16 * s + 16 {
                let (j, k, l) = (e / 128, (e % 128) / 32, e % 32);
                let lo = (ql[64 * j + 32 * (k & 1) + l] >> (4 * (k >> 1))) & 15;
                let v = lo | (((qh[32 * j + l] >> (2 * k)) & 3) << 4);
                sum += v as i32 * a.qs[QK_K * i + e] as i32;
            }
            isum += scale as i8 as i32 * (sum - 32 * a.bsums[16 * i + s] as i32);
        }
        acc = (isum as f32).mul_add(f16_at(blk, 208) * a.d[i], acc);
    }
    acc
}

fn check(n: usize, k: usize, t: usize, bytes: &[u8], x: &[f32]) {
    let w = QMat::new(GgmlType::Q6_K, n, k, bytes).unwrap();
    let mut act = Q8KAct::default();
    act.quantize(x);
    let mut y = vec![0f32; t * n];
    for r0 in (0..n).step_by(32) {
        // SAFETY: kernel detected; y is (t, n); the chunks of rows are disjoint.
        unsafe { prefill_rows(&w, r0..(r0 + 32).min(n), (&act, 1), t, y.as_mut_ptr(), n) };
    }
    for i in 0..t {
        let a = act.token(i, k / QK_K);
        for r in 0..n {
            let got = y[i * n + r];
            let want = packed_ref(w.row(r), &a);
            assert_eq!(got.to_bits(), want.to_bits(), "n={n} k={k} ({i},{r})");
            let dot = dot_q6_k_ref(w.row(r), &a);
            assert!(
                (got - dot).abs() <= 1e-4 * (1.0 + dot.abs()),
                "n={n} k={k} ({i},{r}): {got} vs the row dot's {dot}"
            );
        }
    }
}

#[test]
fn packed_q6_k_prefill_gives_the_scalar_models_bits() {
    if !has_kernel() {
        eprintln!("no AVX2 or AVX-512 VNNI here: Q6_K prefill dequantizes");
        return;
    }
    for (n, k, t) in [(16, 256, 1), (37, 1536, 5), (5, 512, 2), (33, 2304, 7)] {
        let bytes = super::super::test_matrix(GgmlType::Q6_K, n, k, 9);
        check(n, k, t, &bytes, &super::super::test_data(t * k, 4));
    }
}

#[test]
fn packed_q6_k_holds_the_largest_sums_without_saturating() {
    if !has_kernel() {
        eprintln!("no AVX2 or AVX-512 VNNI here: Q6_K prefill dequantizes");
        return;
    }
    // every stored value 63 or 0, scales -128 and 127, activations all -127 or all 127
    let (n, k) = (16, 512);
    let mut bytes = vec![0u8; n * (k / QK_K) * 210];
    for (r, blk) in bytes.chunks_exact_mut(210).enumerate() {
        let v = if r % 2 == 0 { 0xFF } else { 0x00 };
        blk[..192].fill(v);
        for s in 0..16 {
            blk[192 + s] = if (r + s) % 2 == 0 { 0x80 } else { 0x7F };
        }
        blk[208..210].copy_from_slice(&[0x00, 0x3C]); // d = 1
    }
    let x: Vec<f32> = (0..2 * k).map(|i| if i < k { 0.5 } else { -2.0 }).collect();
    check(n, k, 2, &bytes, &x);
}

/// A whole matrix repacked at load: every token of batches of 1 to 9 (a verify pass's sizes)
/// gets the scalar model's bits, so a batch scores each token as decode would.
#[test]
fn packed_q6_k_matrix_gives_decodes_bits_in_every_batch() {
    if PackedQ6K::bytes_for(GgmlType::Q6_K, 16, 256).is_none() {
        eprintln!("no AVX-512 VNNI here: Q6_K is not repacked at load");
        return;
    }
    let (n, k) = (45, 768);
    let bytes = super::super::test_matrix(GgmlType::Q6_K, n, k, 5);
    let w = QMat::new(GgmlType::Q6_K, n, k, &bytes).unwrap();
    let p = crate::kernels::repack::Packed::new(&w).expect("packable");
    assert!(matches!(p, crate::kernels::repack::Packed::Q6K(_)));
    let wp = QMat {
        packed: Some(&p),
        ..w
    };
    for t in [1, 2, 4, 5, 8, 9, 12, 13] {
        let x = super::super::test_data(t * k, 3 + t as u64);
        // x in two planes, each token's product their sum (`Q8KAct::quantize_planes`)
        let mut act = Q8KAct::default();
        act.quantize_planes(&x, k, &mut Vec::new());
        let mut y = vec![0f32; t * n];
        crate::kernels::qmatmul::matmul(&wp, &x, t, &mut y);
        for i in 0..t {
            let (hi, lo) = (act.token(2 * i, k / QK_K), act.token(2 * i + 1, k / QK_K));
            for r in 0..n {
                let want = packed_ref(w.row(r), &hi) + packed_ref(w.row(r), &lo);
                assert_eq!(y[i * n + r].to_bits(), want.to_bits(), "t={t} ({i},{r})");
            }
        }
    }
}

#[test]
fn packed_q6_k_reads_back_its_rows() {
    let Some(_) = PackedQ6K::bytes_for(GgmlType::Q6_K, 16, 256) else {
        eprintln!("no AVX-512 VNNI here: Q6_K is not repacked at load");
        return;
    };
    let (n, k) = (21, 512);
    let bytes = super::super::test_matrix(GgmlType::Q6_K, n, k, 8);
    let w = QMat::new(GgmlType::Q6_K, n, k, &bytes).unwrap();
    let p = PackedQ6K::new_in(&w, None).expect("packable");
    let (mut got, mut want) = (vec![0f32; k], vec![0f32; k]);
    for r in 0..n {
        p.dequantize_row(r, &mut got);
        w.dequantize_row(r, &mut want);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got), bits(&want), "row {r}");
    }
}
