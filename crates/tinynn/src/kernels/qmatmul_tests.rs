//! `qmatmul`'s kernels against the dequantized reference, and the bits that batches share with
//! decode.

use super::*;
use crate::kernels::qdot::has_fast_q4_1;

use super::super::test_data as data;

fn check(ty: GgmlType, n: usize, k: usize, t: usize) {
    let bytes = super::super::test_matrix(ty, n, k, 1);
    let w = QMat::new(ty, n, k, &bytes).unwrap();
    let x = data(t * k, 2);
    let mut y = vec![0f32; t * n];
    matmul(&w, &x, t, &mut y);
    let want = matmul_ref(&w, &x, t);
    for (i, (a, b)) in y.iter().zip(&want).enumerate() {
        assert!(
            (a - b).abs() <= 1e-3 * (1.0 + b.abs()),
            "{ty} n={n} k={k} t={t} i={i}: {a} vs {b}"
        );
    }
}

#[test]
fn matvec_and_matmul_match_reference_on_edge_shapes() {
    for ty in [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q8_0,
        GgmlType::Q4_1,
        GgmlType::Q4_0,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
    ] {
        for (n, k, t) in [
            (1, 32, 1),
            (7, 576, 1),
            (33, 576, 3),
            (200, 64, 17),
            (129, 1536, 2),
        ] {
            check(ty, n, k, t);
        }
    }
    for ty in [GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K] {
        for (n, k, t) in [(1, 256, 1), (7, 512, 1), (129, 1536, 1), (19, 512, 5)] {
            check(ty, n, k, t);
        }
    }
}

/// A batch under `ROW_DOT_BATCH` (a speculative verify step, a short prompt) gives each
/// token the bits decode gives it alone, on every type decode's row dots take (not
/// repacked): otherwise greedy speculative output drifts from plain decoding.
#[test]
fn small_batches_give_each_token_the_bits_of_decode() {
    for ty in [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q8_0,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
    ] {
        let (n, k) = (37, 512);
        let bytes = super::super::test_matrix(ty, n, k, 3);
        let w = QMat::new(ty, n, k, &bytes).unwrap();
        if RowDot::for_matrix(&w).is_none() {
            eprintln!("{ty}: no row dot on this CPU");
            continue;
        }
        // 9 and 11 tokens: groups of four for the four-token kernels, then one alone or
        // three padded to four
        for t in [9, 11] {
            let x = data(t * k, 5);
            let mut batch = vec![0f32; t * n];
            matmul(&w, &x, t, &mut batch);
            for j in 0..t {
                let mut one = vec![0f32; n];
                matvec(&w, &x[j * k..(j + 1) * k], &mut one);
                assert_eq!(&batch[j * n..(j + 1) * n], &one[..], "{ty} token {j}");
            }
        }
    }
}

/// Inside `coarse_activations` (a speculative draft) the legacy types' row dots read the
/// coarse plane alone, for decode and small batches; outside, both planes again.
#[test]
fn coarse_activations_take_the_one_plane_dots_only_inside() {
    use crate::kernels::act_split::SplitAct;
    use crate::kernels::qdot_split::coarse_dot;
    let (n, k, t) = (21, 512, 3);
    for ty in [GgmlType::Q5_0, GgmlType::Q4_1, GgmlType::Q8_0] {
        let bytes = super::super::test_matrix(ty, n, k, 7);
        let w = QMat::new(ty, n, k, &bytes).unwrap();
        if RowDot::for_matrix(&w).is_none() || qgemm::has_vnni() {
            eprintln!("{ty}: not on the row dots on this CPU");
            continue;
        }
        let x = data(t * k, 8);
        let (mut fine, mut coarse, mut again) =
            (vec![0f32; t * n], vec![0f32; t * n], vec![0f32; t * n]);
        matmul(&w, &x, t, &mut fine);
        crate::kernels::coarse_activations(|| matmul(&w, &x, t, &mut coarse));
        matmul(&w, &x, t, &mut again);
        assert_eq!(fine, again, "{ty}: the coarse mode outlived its closure");
        let mut acts = SplitAct::default();
        acts.quantize(&x);
        let one = coarse_dot(ty).unwrap();
        for j in 0..t {
            let hi = acts.hi.token(j, k / 32);
            for r in 0..n {
                assert_eq!(
                    coarse[j * n + r],
                    one(w.row(r), &hi),
                    "{ty} token {j} row {r}"
                );
            }
        }
        assert_ne!(fine, coarse, "{ty}: the fine plane made no difference");
        let mut y1 = vec![0f32; n];
        crate::kernels::coarse_activations(|| matvec(&w, &x[..k], &mut y1));
        assert_eq!(&y1[..], &coarse[..n], "{ty}: decode and a batch differ");
    }
}

#[test]
fn integer_dots_only_for_whole_activation_blocks() {
    let w = |ty, cols| QMat {
        ty,
        rows: 0,
        cols,
        data: &[],
        packed: None,
    };
    let fast = has_fast_q4_1();
    assert_eq!(RowDot::for_matrix(&w(GgmlType::Q4_K, 512)).is_some(), fast);
    assert_eq!(RowDot::for_matrix(&w(GgmlType::Q4_0, 96)).is_some(), fast);
    assert!(RowDot::for_matrix(&w(GgmlType::Q4_K, 576)).is_none());
    assert!(RowDot::for_matrix(&w(GgmlType::Q6_K, 96)).is_none());
    assert!(RowDot::for_matrix(&w(GgmlType::Q4_0, 48)).is_none());
    assert_eq!(RowDot::for_matrix(&w(GgmlType::Q5_0, 576)).is_some(), fast);
    assert!(RowDot::for_matrix(&w(GgmlType::Q5_1, 48)).is_none());
    assert!(RowDot::for_matrix(&w(GgmlType::IQ4_NL, 576)).is_none());
}

#[test]
fn matmul_many_equals_separate_products() {
    let cases = [
        (GgmlType::Q4_1, 576),
        (GgmlType::Q8_0, 576),
        (GgmlType::Q4_0, 576),
        (GgmlType::Q5_0, 576),
        (GgmlType::Q5_1, 576),
        (GgmlType::F32, 576),
        (GgmlType::Q4_K, 512),
        (GgmlType::Q6_K, 512),
    ];
    for (ty, k) in cases {
        for t in [1, 5] {
            let mats: Vec<Vec<u8>> = [96usize, 33]
                .iter()
                .map(|&n| super::super::test_matrix(ty, n, k, n as u64))
                .collect();
            let ws = [
                QMat::new(ty, 96, k, &mats[0]).unwrap(),
                QMat::new(ty, 33, k, &mats[1]).unwrap(),
            ];
            let x = data(t * k, 4);
            let (mut a, mut b) = (vec![0f32; t * 96], vec![0f32; t * 33]);
            matmul_many(&ws, &x, t, &mut [&mut a, &mut b]);
            let (mut a1, mut b1) = (vec![0f32; t * 96], vec![0f32; t * 33]);
            matmul(&ws[0], &x, t, &mut a1);
            matmul(&ws[1], &x, t, &mut b1);
            assert_eq!((a, b), (a1, b1), "{ty} t={t}");
        }
    }
}

/// A set mixing a repacked matrix with a plain one reads the repacked copy: with the
/// original bytes zeroed (as if released), the products still equal the true ones.
#[test]
fn mixed_sets_read_the_repacked_copy() {
    let k = 512;
    let (a_bytes, b_bytes) = (
        super::super::test_matrix(GgmlType::Q4_0, 48, k, 1),
        super::super::test_matrix(GgmlType::Q6_K, 16, k, 2),
    );
    let a = QMat::new(GgmlType::Q4_0, 48, k, &a_bytes).unwrap();
    let Some(packed) = Packed::new(&a) else {
        eprintln!("no repacking kernel here: nothing is released, nothing to mix");
        return;
    };
    let zeros = vec![0u8; a_bytes.len()];
    let released = QMat {
        packed: Some(&packed),
        ..QMat::new(GgmlType::Q4_0, 48, k, &zeros).unwrap()
    };
    let b = QMat::new(GgmlType::Q6_K, 16, k, &b_bytes).unwrap();
    for t in [1, 5] {
        let x = data(t * k, 3);
        let (mut ya, mut yb) = (vec![0f32; t * 48], vec![0f32; t * 16]);
        matmul_many(&[released, b], &x, t, &mut [&mut ya, &mut yb]);
        let (mut wa, mut wb) = (vec![0f32; t * 48], vec![0f32; t * 16]);
        matmul(
            &QMat {
                packed: Some(&packed),
                ..a
            },
            &x,
            t,
            &mut wa,
        );
        matmul(&b, &x, t, &mut wb);
        assert_eq!((ya, yb), (wa, wb), "t={t}");
    }
}

#[test]
fn new_rejects_wrong_sizes() {
    let bytes = vec![0u8; 20 * 18];
    assert!(matches!(
        QMat::new(GgmlType::Q4_1, 2, 576, &bytes),
        Err(QMatError::ByteLength { .. })
    ));
    assert!(matches!(
        QMat::new(GgmlType::Q4_K, 1, 576, &bytes),
        Err(QMatError::NotWholeBlocks { .. })
    ));
}

/// The k-quants' products read x in two Q8_K planes (`Q8KAct::quantize_planes`) in decode and
/// batches under `ROW_DOT_BATCH` tokens: on every path (decode's row dots, a small batch, a
/// matrix repacked at load) far closer to the exact product of the dequantized weights with x
/// than ggml's one plane, which `coarse_activations` (a speculative draft) and prefill's
/// batches keep.
#[test]
fn k_quant_products_read_two_planes_except_in_a_draft() {
    use crate::kernels::repack::Packed;
    let (n, k) = (40, 512);
    for ty in [GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K] {
        let bytes = super::super::test_matrix(ty, n, k, 11);
        let w = QMat::new(ty, n, k, &bytes).unwrap();
        let packed = Packed::new(&w);
        for t in [1, 5, 63, 70] {
            let x = data(t * k, 12);
            // exact: dequantized rows times x as it is
            let mut row = vec![0f32; k];
            let mut exact = vec![0f64; t * n];
            for r in 0..n {
                w.dequantize_row(r, &mut row);
                for j in 0..t {
                    exact[j * n + r] = (0..k).map(|i| row[i] as f64 * x[j * k + i] as f64).sum();
                }
            }
            let err = |y: &[f32]| {
                y.iter()
                    .zip(&exact)
                    .map(|(a, b)| (*a as f64 - b).abs())
                    .fold(0f64, f64::max)
            };
            let mut views = vec![("as stored", w)];
            if let Some(p) = &packed {
                views.push((
                    "repacked",
                    QMat {
                        packed: Some(p),
                        ..w
                    },
                ));
            }
            for (how, m) in views {
                let (mut two, mut one) = (vec![0f32; t * n], vec![0f32; t * n]);
                matmul(&m, &x, t, &mut two);
                crate::kernels::coarse_activations(|| matmul(&m, &x, t, &mut one));
                let (e2, e1) = (err(&two), err(&one));
                if t >= ROW_DOT_BATCH {
                    // prefill: one plane either way
                    assert!(e2 > 1e-2, "{ty} {how} t={t}: {e2}");
                    assert_eq!(two, one, "{ty} {how} t={t}");
                    continue;
                }
                assert!(e2 < 2e-3, "{ty} {how} t={t}: two planes off by {e2}");
                if m.packed.is_none() && RowDot::for_matrix(&m).is_none() {
                    // no integer kernel on this CPU: the f32 path, two planes in both modes
                    continue;
                }
                assert!(
                    e2 * 20.0 < e1,
                    "{ty} {how} t={t}: two planes off by {e2}, one plane by {e1}"
                );
            }
        }
    }
}
