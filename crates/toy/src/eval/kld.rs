//! KL divergence of a model against a base's log-probabilities, and every statistic
//! llama-perplexity's `--kl-divergence` prints (tools/perplexity/perplexity.cpp of llama.cpp
//! 0c1e570: `kl_divergence_result`, the base-reading `log_softmax`, `mean_and_uncertainty`,
//! `covariance`, `percentile`), in its arithmetic: per-token values in f32, sums in f64.
//! Q is the model evaluated, base the reference whose rows `eval::kld_base` stores;
//! `eval::kld_run` drives the model over a base.

use crate::eval::kld_base::BaseRow;

/// A value and its uncertainty (one standard error), as llama.cpp prints `v ± unc`.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct Est {
    pub value: f64,
    pub unc: f64,
}

/// A distribution's order statistics, as llama.cpp prints them (interpolated percentiles).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Spread {
    pub max: f64,
    pub p99_9: f64,
    pub p99: f64,
    pub p95: f64,
    pub p90: f64,
    pub p75: f64,
    pub median: f64,
    pub p25: f64,
    pub p10: f64,
    pub p5: f64,
    pub p1: f64,
    pub p0_1: f64,
    pub min: f64,
}

/// What llama-perplexity prints after `--kl-divergence`; probabilities as fractions.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct KldStats {
    /// Scored tokens (chunks * (n_ctx - 1 - n_ctx/2)).
    pub tokens: usize,
    pub chunks: usize,
    pub n_ctx: usize,
    pub ppl_q: Est,
    pub ppl_base: Est,
    /// Cor(ln PPL(Q), ln PPL(base)).
    pub cor_ln_ppl: f64,
    pub ln_ppl_ratio: Est,
    pub ppl_ratio: Est,
    pub ppl_diff: Est,
    pub kld_mean: Est,
    pub kld: Spread,
    /// Δp = p_Q(token) - p_base(token).
    pub delta_p_mean: Est,
    pub delta_p: Spread,
    pub delta_p_rms: Est,
    pub same_top_p: Est,
}

/// llama.cpp's `kl_divergence_result` and the per-token values it sorts at the end.
#[derive(Clone, Debug, Default)]
pub struct KldAccum {
    sum_nll: f64,
    sum_nll2: f64,
    sum_nll_base: f64,
    sum_nll_base2: f64,
    sum_nll_nll_base: f64,
    sum_kld: f64,
    sum_kld2: f64,
    sum_p_diff: f64,
    sum_p_diff2: f64,
    sum_p_diff4: f64,
    n_same_top: usize,
    kld: Vec<f32>,
    p_diff: Vec<f32>,
}

impl KldAccum {
    /// One position: Q's logits (V), the base's row there, and the token that follows.
    pub fn add(&mut self, logits: &[f32], base: BaseRow, tok: usize) {
        let (mut max, mut imax) = (logits[0], 0);
        for (i, &l) in logits.iter().enumerate().skip(1) {
            if l > max {
                (max, imax) = (l, i);
            }
        }
        let sum: f64 = logits.iter().map(|&l| f64::from((l - max).exp())).sum();
        let lse = sum.ln() as f32;
        let nll = max + lse - logits[tok];
        let nll_base = -base.log_prob(tok);
        self.sum_nll += f64::from(nll);
        self.sum_nll2 += f64::from(nll * nll);
        self.sum_nll_base += f64::from(nll_base);
        self.sum_nll_base2 += f64::from(nll_base * nll_base);
        self.sum_nll_nll_base += f64::from(nll * nll_base);
        let norm = max + lse;
        let (mut kld, mut imax_base, mut top_base) = (0f64, 0, f32::NEG_INFINITY);
        for (i, &l) in logits.iter().enumerate() {
            let lp_base = base.log_prob(i);
            if i == 0 || lp_base > top_base {
                (top_base, imax_base) = (lp_base, i);
            }
            // llama.cpp skips base probabilities below e^-16
            if lp_base > -16.0 {
                kld += f64::from(lp_base.exp() * (lp_base - l + norm));
            }
        }
        self.sum_kld += kld;
        self.sum_kld2 += kld * kld;
        self.n_same_top += usize::from(imax == imax_base);
        let p_diff = (-nll).exp() - (-nll_base).exp();
        let p_diff2 = f64::from(p_diff * p_diff);
        self.sum_p_diff += f64::from(p_diff);
        self.sum_p_diff2 += p_diff2;
        self.sum_p_diff4 += p_diff2 * p_diff2;
        self.kld.push(kld as f32);
        self.p_diff.push(p_diff);
    }

    pub fn count(&self) -> usize {
        self.kld.len()
    }

    /// Running (PPL(Q), mean KLD, same top p) for progress lines.
    pub fn running(&self) -> (f64, f64, f64) {
        let n = self.count().max(1) as f64;
        let same = self.n_same_top as f64 / n;
        ((self.sum_nll / n).exp(), self.sum_kld / n, same)
    }

    /// Every statistic (`tokens`, `chunks`, `n_ctx` are left for the caller). With no
    /// position added everything is 0.
    pub fn finish(mut self) -> KldStats {
        let n = self.count();
        if n == 0 {
            return KldStats::default();
        }
        let log_ppl = mean_unc(self.sum_nll, self.sum_nll2, n);
        let log_base = mean_unc(self.sum_nll_base, self.sum_nll_base2, n);
        let cov = covariance(self.sum_nll, self.sum_nll_base, self.sum_nll_nll_base, n);
        let ppl_q = Est {
            value: log_ppl.value.exp(),
            unc: log_ppl.value.exp() * log_ppl.unc,
        };
        let ppl_base = Est {
            value: log_base.value.exp(),
            unc: log_base.value.exp() * log_base.unc,
        };
        let ratio_unc = (log_ppl.unc.powi(2) + log_base.unc.powi(2) - 2.0 * cov).sqrt();
        let ln_ppl_ratio = Est {
            value: log_ppl.value - log_base.value,
            unc: ratio_unc,
        };
        let ppl_ratio = Est {
            value: ln_ppl_ratio.value.exp(),
            unc: ln_ppl_ratio.value.exp() * ratio_unc,
        };
        let ppl_cov = ppl_q.value * ppl_base.value * cov;
        let ppl_diff = Est {
            value: ppl_q.value - ppl_base.value,
            unc: (ppl_q.unc.powi(2) + ppl_base.unc.powi(2) - 2.0 * ppl_cov).sqrt(),
        };
        let mse = mean_unc(self.sum_p_diff2, self.sum_p_diff4, n);
        let rms = mse.value.sqrt();
        let same = self.n_same_top as f64 / n as f64;
        self.kld.sort_by(f32::total_cmp);
        self.p_diff.sort_by(f32::total_cmp);
        KldStats {
            tokens: n,
            chunks: 0,
            n_ctx: 0,
            ppl_q,
            ppl_base,
            cor_ln_ppl: cov / (log_ppl.unc * log_base.unc),
            ln_ppl_ratio,
            ppl_ratio,
            ppl_diff,
            kld_mean: mean_unc(self.sum_kld, self.sum_kld2, n),
            kld: spread(&self.kld),
            delta_p_mean: mean_unc(self.sum_p_diff, self.sum_p_diff2, n),
            delta_p: spread(&self.p_diff),
            delta_p_rms: Est {
                value: rms,
                unc: 0.5 / rms * mse.unc,
            },
            same_top_p: Est {
                value: same,
                unc: (same * (1.0 - same) / (n as f64 - 1.0)).sqrt(),
            },
        }
    }
}

/// llama.cpp's `mean_and_uncertainty`: no uncertainty from 10 values or fewer.
pub(crate) fn mean_unc(sum: f64, sum2: f64, n: usize) -> Est {
    let value = sum / n as f64;
    let var = sum2 / n as f64 - value * value;
    let unc = if var > 0.0 && n > 10 {
        (var / (n as f64 - 1.0)).sqrt()
    } else {
        0.0
    };
    Est { value, unc }
}

/// llama.cpp's `covariance` of the two means (0 below 10 values).
fn covariance(a: f64, b: f64, ab: f64, n: usize) -> f64 {
    if n < 10 {
        return 0.0;
    }
    let n = n as f64;
    (ab / n - (a / n) * (b / n)) / (n - 1.0)
}

/// llama.cpp's `percentile` of sorted values, linear between neighbours, in f32.
fn percentile(v: &[f32], fraction: f32) -> f32 {
    if fraction <= 0.0 {
        return v[0];
    }
    if fraction >= 1.0 {
        return v[v.len() - 1];
    }
    let p = fraction * (v.len() - 1) as f32;
    let ip = p as usize;
    let p = p - ip as f32;
    (1.0 - p) * v[ip] + p * v[(ip + 1).min(v.len() - 1)]
}

/// Order statistics of sorted, non-empty `v`.
fn spread(v: &[f32]) -> Spread {
    let n = v.len();
    let median = if n.is_multiple_of(2) {
        0.5 * (v[n / 2] + v[n / 2 - 1])
    } else {
        v[n / 2]
    };
    let p = |f: f32| f64::from(percentile(v, f));
    Spread {
        max: f64::from(v[n - 1]),
        p99_9: p(0.999),
        p99: p(0.99),
        p95: p(0.95),
        p90: p(0.90),
        p75: p(0.75),
        median: f64::from(median),
        p25: p(0.25),
        p10: p(0.10),
        p5: p(0.05),
        p1: p(0.01),
        p0_1: p(0.001),
        min: f64::from(v[0]),
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_interpolate_as_llama_cpp() {
        let v = [1.0f32, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(percentile(&v, 0.0), 1.0);
        assert_eq!(percentile(&v, 1.0), 5.0);
        assert!((percentile(&v, 0.9) - 4.6).abs() < 1e-6);
        let s = spread(&[1.0, 2.0, 3.0, 4.0]);
        assert_eq!((s.median, s.max, s.min), (2.5, 4.0, 1.0));
    }

    #[test]
    fn no_uncertainty_from_ten_values_or_fewer() {
        let (sum, sum2) = (10.0, 30.0);
        assert_eq!(mean_unc(sum, sum2, 10).unc, 0.0);
        let e = mean_unc(sum * 2.0, sum2 * 2.0, 20);
        assert!((e.value - 1.0).abs() < 1e-12);
        assert!((e.unc - (2.0f64 / 19.0).sqrt()).abs() < 1e-12);
        assert_eq!(covariance(1.0, 1.0, 1.0, 9), 0.0);
    }
}
