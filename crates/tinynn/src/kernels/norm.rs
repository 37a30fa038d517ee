//! RMSNorm (Zhang & Sennrich 2019, as ggml's `rms_norm` + weight multiply) and LayerNorm
//! (Ba et al. 2016, as ggml's `norm` + weight and bias), one row of C at a time.

/// 1 / sqrt(mean(x^2) + eps), as ggml's `rms_norm`: squares in f32, summed in f64.
fn rms_scale(x: &[f32], eps: f32) -> f32 {
    let ss: f64 = x.iter().map(|v| (v * v) as f64).sum();
    1.0 / ((ss / x.len() as f64) as f32 + eps).sqrt()
}

/// Rows a parallel task of the norms takes at least (a prefill's rows split among the
/// threads; decode's one row stays on the caller).
const MIN_ROWS: usize = 16;

/// `out = x / sqrt(mean(x^2) + eps) * w` for each row of C in x (T, C), rows in parallel.
pub fn rmsnorm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let (c, n) = (w.len(), x.len().min(out.len()));
    crate::team::par_rows(&mut out[..n], c, MIN_ROWS, |r0, out| {
        rmsnorm_rows(&x[r0 * c..r0 * c + out.len()], w, eps, out)
    });
}

fn rmsnorm_rows(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let c = w.len();
    for (xr, or) in x.chunks_exact(c).zip(out.chunks_exact_mut(c)) {
        let scale = rms_scale(xr, eps);
        for ((o, xi), wi) in or.iter_mut().zip(xr).zip(w) {
            *o = xi * scale * wi;
        }
    }
}

/// RMSNorm of each row of `w.len()` in `x`, in place (Qwen3's per-head q/k norm).
pub fn rmsnorm_inplace(x: &mut [f32], w: &[f32], eps: f32) {
    let c = w.len();
    for xr in x.chunks_exact_mut(c) {
        let scale = rms_scale(xr, eps);
        xr.iter_mut()
            .zip(w)
            .for_each(|(v, wi)| *v = *v * scale * wi);
    }
}

/// `out = (x - mean) / sqrt(var + eps) * w + b` for each row of C in x (T, C), rows in
/// parallel.
pub fn layernorm(x: &[f32], w: &[f32], b: &[f32], eps: f32, out: &mut [f32]) {
    let (c, n) = (w.len(), x.len().min(out.len()));
    crate::team::par_rows(&mut out[..n], c, MIN_ROWS, |r0, out| {
        layernorm_rows(&x[r0 * c..r0 * c + out.len()], w, b, eps, out)
    });
}

fn layernorm_rows(x: &[f32], w: &[f32], b: &[f32], eps: f32, out: &mut [f32]) {
    let c = w.len();
    for (xr, or) in x.chunks_exact(c).zip(out.chunks_exact_mut(c)) {
        let mean = xr.iter().map(|v| *v as f64).sum::<f64>() / c as f64;
        let var = xr.iter().map(|v| (*v as f64 - mean).powi(2)).sum::<f64>() / c as f64;
        let scale = 1.0 / ((var as f32) + eps).sqrt();
        let mean = mean as f32;
        for i in 0..c {
            or[i] = (xr[i] - mean) * scale * w[i] + b[i];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rmsnorm_unit_rms() {
        let x = [3.0f32, -4.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0];
        let w = [1.0f32, 2.0, 1.0, 1.0];
        let mut out = [0f32; 8];
        rmsnorm(&x, &w, 0.0, &mut out);
        // rms of row 0 is sqrt(25/4) = 2.5
        assert!((out[0] - 1.2).abs() < 1e-6 && (out[1] + 3.2).abs() < 1e-6);
        assert!(out[4..].iter().zip(&w).all(|(v, wi)| (v - wi).abs() < 1e-6));
        let mut y = x;
        rmsnorm_inplace(&mut y, &w, 0.0);
        assert_eq!(y, out);
    }

    #[test]
    fn layernorm_zero_mean_unit_var() {
        let x = [1.0f32, 2.0, 3.0, 4.0];
        let mut out = [0f32; 4];
        layernorm(&x, &[1.0; 4], &[0.5; 4], 0.0, &mut out);
        let mean: f32 = out.iter().sum::<f32>() / 4.0;
        assert!((mean - 0.5).abs() < 1e-6);
        assert!((out[0] - 0.5 + 1.3416407).abs() < 1e-5);
    }
}
