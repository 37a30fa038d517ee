//! f32 dot products and `y += a * x`, with run-time dispatch to AVX-512 / AVX2+FMA builds.
//!
//! The portable body is written with eight independent accumulators so that the compiler
//! can vectorise it under each `target_feature`; `dot_ref` is the plain sequential sum.

#[inline(always)]
fn dot_body(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0f32; 16];
    let chunks = n / 16;
    for c in 0..chunks {
        let (ac, bc) = (&a[c * 16..c * 16 + 16], &b[c * 16..c * 16 + 16]);
        for i in 0..16 {
            acc[i] = ac[i].mul_add(bc[i], acc[i]);
        }
    }
    let mut s = 0f32;
    for i in chunks * 16..n {
        s = a[i].mul_add(b[i], s);
    }
    let mut h = [0f32; 8];
    for i in 0..8 {
        h[i] = acc[i] + acc[i + 8];
    }
    s + ((h[0] + h[4]) + (h[1] + h[5])) + ((h[2] + h[6]) + (h[3] + h[7]))
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn dot_avx512(a: &[f32], b: &[f32]) -> f32 {
    dot_body(a, b)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
    dot_body(a, b)
}

/// Which SIMD level the dispatching kernels use on this CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SimdLevel {
    Scalar,
    Avx2,
    Avx512,
}

/// The best level this CPU supports (checked once).
pub fn simd_level() -> SimdLevel {
    use std::sync::OnceLock;
    static LEVEL: OnceLock<SimdLevel> = OnceLock::new();
    *LEVEL.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            if std::env::var_os("TOY_FORCE_SCALAR").is_some() {
                return SimdLevel::Scalar;
            }
            if is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("fma") {
                return SimdLevel::Avx512;
            }
            if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
                return SimdLevel::Avx2;
            }
        }
        SimdLevel::Scalar
    })
}

/// `sum(a[i] * b[i])` over the shorter length.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    match simd_level() {
        // SAFETY: the level was detected on this CPU.
        #[cfg(target_arch = "x86_64")]
        SimdLevel::Avx512 => unsafe { dot_avx512(a, b) },
        #[cfg(target_arch = "x86_64")]
        SimdLevel::Avx2 => unsafe { dot_avx2(a, b) },
        _ => dot_body(a, b),
    }
}

/// Sequential reference.
pub fn dot_ref(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[inline(always)]
fn axpy_body(y: &mut [f32], a: f32, x: &[f32]) {
    for (yi, xi) in y.iter_mut().zip(x) {
        *yi = a.mul_add(*xi, *yi);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn axpy_avx512(y: &mut [f32], a: f32, x: &[f32]) {
    axpy_body(y, a, x)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn axpy_avx2(y: &mut [f32], a: f32, x: &[f32]) {
    axpy_body(y, a, x)
}

/// `y[i] += a * x[i]`.
pub fn axpy(y: &mut [f32], a: f32, x: &[f32]) {
    match simd_level() {
        // SAFETY: the level was detected on this CPU.
        #[cfg(target_arch = "x86_64")]
        SimdLevel::Avx512 => unsafe { axpy_avx512(y, a, x) },
        #[cfg(target_arch = "x86_64")]
        SimdLevel::Avx2 => unsafe { axpy_avx2(y, a, x) },
        _ => axpy_body(y, a, x),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize, seed: u32) -> Vec<f32> {
        let mut s = seed.wrapping_mul(2654435761).max(1);
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                (s % 2000) as f32 / 1000.0 - 1.0
            })
            .collect()
    }

    #[test]
    fn dot_matches_reference_on_odd_lengths() {
        for n in [0, 1, 7, 16, 17, 63, 576, 1537] {
            let (a, b) = (data(n, 1), data(n, 2));
            let (got, want) = (dot(&a, &b), dot_ref(&a, &b));
            assert!((got - want).abs() <= 1e-4 * (1.0 + want.abs()), "n={n}");
        }
    }

    #[test]
    fn axpy_adds_scaled() {
        let x = data(37, 3);
        let mut y = data(37, 4);
        let y0 = y.clone();
        axpy(&mut y, 0.5, &x);
        for i in 0..37 {
            assert!((y[i] - (y0[i] + 0.5 * x[i])).abs() < 1e-6);
        }
    }
}
