//! Activation taps (the seed's `ToyTap`): copies of the forward pass's values at named
//! points, for looking inside a model. The points, per block N: `blk.N.attn_norm` (the
//! normalised input of the mixer), `blk.N.attn_out` (the mixer's output before it joins the
//! residual stream), `blk.N.ffn_out` (the MLP's, likewise), `blk.N.resid` (the stream after
//! the block), for GDN layers `blk.N.gdn_state` (the Frobenius norm of each value head's
//! state after the batch, (sequences, Hv)), and `logits`; `toy inspect`'s flow names the same steps.
//! A [`crate::model::State`] holds no taps unless asked, and then each point costs one
//! branch; captures are (rows, cols) row-major.

/// The per-block points, in forward order.
pub const POINTS: [&str; 5] = ["attn_norm", "attn_out", "ffn_out", "resid", "gdn_state"];

#[derive(Clone, Debug)]
pub struct Capture {
    pub name: String,
    pub rows: usize,
    pub cols: usize,
    pub data: Vec<f32>,
}

/// Which points to capture (comma-separated globs, `*` matching any run of characters,
/// e.g. `blk.*.resid,logits`) and what was captured, in forward order.
#[derive(Clone, Debug, Default)]
pub struct Taps {
    patterns: Vec<String>,
    pub captured: Vec<Capture>,
}

/// Whether `name` matches `pattern`, `*` matching any run of characters.
pub fn glob(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == name;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !name.starts_with(first) || name.len() < first.len() + last.len() || !name.ends_with(last) {
        return false;
    }
    let mut rest = &name[first.len()..name.len() - last.len()];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(i) => rest = &rest[i + mid.len()..],
            None => return false,
        }
    }
    true
}

impl Taps {
    pub fn new(patterns: &str) -> Self {
        Self {
            patterns: patterns
                .split(',')
                .map(|p| p.trim().to_string())
                .filter(|p| !p.is_empty())
                .collect(),
            captured: Vec::new(),
        }
    }

    pub fn wants(&self, name: &str) -> bool {
        self.patterns.iter().any(|p| glob(p, name))
    }

    /// Keeps a copy of x (rows of `cols`) as `name` when a pattern matches it.
    pub fn take(&mut self, name: &str, x: &[f32], cols: usize) {
        if self.wants(name) {
            self.captured.push(Capture {
                name: name.to_string(),
                rows: x.len() / cols.max(1),
                cols,
                data: x.to_vec(),
            });
        }
    }
}

/// `taps.take("blk.{l}.{point}", ...)` where there are taps.
pub(crate) fn tap(taps: &mut Option<Box<Taps>>, l: usize, point: &str, x: &[f32], cols: usize) {
    if let Some(t) = taps {
        t.take(&format!("blk.{l}.{point}"), x, cols);
    }
}

/// Summary of one capture.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Stats {
    pub mean: f64,
    pub rms: f64,
    pub max_abs: f64,
    /// E[(x - mean)^4] / var^2 (3 for a normal distribution).
    pub kurtosis: f64,
    /// Share of values further than 6 standard deviations from the mean.
    pub outliers_6sigma: f64,
}

pub fn stats(x: &[f32]) -> Stats {
    let n = x.len().max(1) as f64;
    let mean = x.iter().map(|&v| v as f64).sum::<f64>() / n;
    let (mut m2, mut m4, mut sq, mut max_abs) = (0f64, 0f64, 0f64, 0f64);
    for &v in x {
        let (v, d) = (v as f64, v as f64 - mean);
        m2 += d * d;
        m4 += d * d * d * d;
        sq += v * v;
        max_abs = max_abs.max(v.abs());
    }
    let var = m2 / n;
    let sd = var.sqrt();
    let far = x
        .iter()
        .filter(|&&v| (v as f64 - mean).abs() > 6.0 * sd)
        .count();
    Stats {
        mean,
        rms: (sq / n).sqrt(),
        max_abs,
        kurtosis: if var > 0.0 { m4 / n / (var * var) } else { 0.0 },
        outliers_6sigma: if sd > 0.0 { far as f64 / n } else { 0.0 },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_names() {
        assert!(glob("blk.*.resid", "blk.12.resid"));
        assert!(!glob("blk.*.resid", "blk.12.attn_out"));
        assert!(glob("blk.3.*", "blk.3.ffn_out"));
        assert!(!glob("blk.3.*", "blk.31.ffn_out"));
        assert!(glob("*", "logits") && glob("logits", "logits") && !glob("logit", "logits"));
        assert!(glob("blk.*.*_out", "blk.0.attn_out") && !glob("blk.*.*_out", "blk.0.resid"));
    }

    #[test]
    fn stats_of_known_values() {
        let s = stats(&[1.0, -1.0, 1.0, -1.0]);
        assert_eq!((s.mean, s.rms, s.max_abs, s.kurtosis), (0.0, 1.0, 1.0, 1.0));
        // one value far out among many small ones is an outlier
        let mut x = vec![0.01f32; 999];
        x.iter_mut().step_by(2).for_each(|v| *v = -0.01);
        x.push(100.0);
        let s = stats(&x);
        assert!(
            (s.outliers_6sigma - 0.001).abs() < 1e-12 && s.kurtosis > 100.0,
            "{s:?}"
        );
    }
}
