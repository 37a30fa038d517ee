//! Tests of `bf16gemm`: each kernel this CPU runs (AVX512-BF16's register tiles, AMX's blocks)
//! against the bf16-rounded reference on edge shapes, plain, transposed and strided operands,
//! accumulation, and the error bound against f32 products.

use super::bf16gemm::*;

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

/// `y += beta A B` for plain row-major A (m, k) and B (k, n), in parallel.
fn accumulate(
    kernel: Kernel,
    (m, n, k): (usize, usize, usize),
    a: &[f32],
    b: &[f32],
    y: &mut [f32],
    beta: f32,
) {
    assert!(a.len() >= m * k && b.len() >= k * n && y.len() >= m * n);
    let va = View {
        ptr: a.as_ptr(),
        rs: k as isize,
        cs: 1,
    };
    let vb = View {
        ptr: b.as_ptr(),
        rs: n as isize,
        cs: 1,
    };
    // SAFETY: the views cover (m, k) and (k, n) (checked above); y is (m, n).
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
            beta,
            true,
        )
    };
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
            accumulate(kernel, (m, n, k), &a, &b, &mut y, 1.0);
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
        accumulate(kernel, (m, n, k), &a, &b, &mut y, 2.0);
        for (x, (yv, g)) in y.iter().zip(&got).enumerate() {
            assert!(
                (yv - (x as f32 + 2.0 * g)).abs() <= 1e-4 * (1.0 + yv.abs()),
                "{yv}"
            );
        }
    }
}
