//! Finite-difference gradient checks for the layer tests: central differences of an f64
//! scalar of f32 inputs, compared against the analytic gradient.

/// Checks `analytic` = d f / d x at every index of `x` by central differences with step `eps`.
/// The error is measured relative to the largest analytic component, so a missing or wrongly
/// scaled term fails while f32 rounding noise (well below `tol`) passes.
pub(crate) fn check(
    name: &str,
    x: &[f32],
    analytic: &[f32],
    eps: f32,
    tol: f64,
    mut f: impl FnMut(&[f32]) -> f64,
) {
    assert_eq!(x.len(), analytic.len(), "{name}: gradient length");
    let scale = analytic.iter().map(|g| g.abs() as f64).fold(0.0, f64::max);
    assert!(scale > 1e-6, "{name}: the analytic gradient is all zero");
    let mut xp = x.to_vec();
    let mut worst = (0.0f64, 0usize, 0.0f64);
    for i in 0..x.len() {
        let x0 = xp[i];
        xp[i] = x0 + eps;
        let (hi, lp) = (xp[i] as f64, f(&xp));
        xp[i] = x0 - eps;
        let (lo, lm) = (xp[i] as f64, f(&xp));
        xp[i] = x0;
        let num = (lp - lm) / (hi - lo);
        let err = (num - analytic[i] as f64).abs() / scale;
        if err > worst.0 {
            worst = (err, i, num);
        }
    }
    let (err, i, num) = worst;
    assert!(
        err < tol,
        "{name}: gradient [{i}] is {} analytically, {num} by finite differences (error {err:.2e} of max {scale:.3e})",
        analytic[i]
    );
}

/// `sum(w * y)` in f64: a scalar whose gradient with respect to y is w.
pub(crate) fn weighted_sum(w: &[f32], y: &[f32]) -> f64 {
    w.iter().zip(y).map(|(a, b)| *a as f64 * *b as f64).sum()
}
