//! Accumulating compared positions into llama.cpp's `--kl-divergence` statistics.

use serde::{Deserialize, Serialize};

use super::Position;

/// Running sums over compared positions, plus every position's KL and Δp for percentiles.
#[derive(Clone, Debug, Default)]
pub struct KlAccumulator {
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
    max_p_diff: f32,
    same_top: usize,
    kld_values: Vec<f32>,
    p_diff_values: Vec<f32>,
}

/// A value and its uncertainty (one standard error).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    pub value: f64,
    pub uncertainty: f64,
}

/// llama.cpp's percentiles of a distribution: linear interpolation between order
/// statistics at `fraction · (n − 1)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Quantiles {
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

/// The comparison of a model against its reference, as `llama-perplexity --kl-divergence`
/// reports it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KlReport {
    /// Positions compared.
    pub count: usize,
    pub ppl: Estimate,
    pub ppl_base: Estimate,
    /// Correlation of ln PPL(Q) and ln PPL(base).
    pub ppl_correlation: f64,
    pub ln_ppl_ratio: Estimate,
    pub ppl_ratio: Estimate,
    pub ppl_diff: Estimate,
    pub kld: Estimate,
    pub kld_quantiles: Quantiles,
    pub p_diff: Estimate,
    pub p_diff_quantiles: Quantiles,
    pub p_diff_rms: Estimate,
    pub max_abs_p_diff: f64,
    /// Share of positions whose most likely token is the reference's.
    pub same_top: Estimate,
}

fn mean_unc(sum: f64, sum2: f64, n: usize) -> Estimate {
    if n < 1 {
        return Estimate {
            value: 0.0,
            uncertainty: 0.0,
        };
    }
    let f = sum / n as f64;
    let df = sum2 / n as f64 - f * f;
    let uncertainty = if df > 0.0 && n > 10 {
        (df / (n - 1) as f64).sqrt()
    } else {
        0.0
    };
    Estimate {
        value: f,
        uncertainty,
    }
}

fn quantile(sorted: &[f32], fraction: f32) -> f64 {
    let (Some(&lo), Some(&hi)) = (sorted.first(), sorted.last()) else {
        return f64::NAN;
    };
    if fraction <= 0.0 {
        return f64::from(lo);
    }
    if fraction >= 1.0 {
        return f64::from(hi);
    }
    let p = fraction * (sorted.len() - 1) as f32;
    let ip = p as usize;
    let w = p - ip as f32;
    f64::from((1.0 - w) * sorted[ip] + w * sorted[(ip + 1).min(sorted.len() - 1)])
}

fn middle(sorted: &[f32]) -> f64 {
    let n = sorted.len();
    match n {
        0 => f64::NAN,
        _ if n.is_multiple_of(2) => f64::from(0.5 * (sorted[n / 2] + sorted[n / 2 - 1])),
        _ => f64::from(sorted[n / 2]),
    }
}

fn quantiles(values: &[f32]) -> Quantiles {
    let mut s = values.to_vec();
    s.sort_by(f32::total_cmp);
    Quantiles {
        max: quantile(&s, 1.0),
        p99_9: quantile(&s, 0.999),
        p99: quantile(&s, 0.99),
        p95: quantile(&s, 0.95),
        p90: quantile(&s, 0.90),
        p75: quantile(&s, 0.75),
        median: middle(&s),
        p25: quantile(&s, 0.25),
        p10: quantile(&s, 0.10),
        p5: quantile(&s, 0.05),
        p1: quantile(&s, 0.01),
        p0_1: quantile(&s, 0.001),
        min: quantile(&s, 0.0),
    }
}

impl KlAccumulator {
    pub fn new() -> KlAccumulator {
        KlAccumulator::default()
    }

    /// Adds one compared position.
    pub fn add(&mut self, p: Position) {
        let (nll, nb) = (f64::from(p.nll), f64::from(p.nll_base));
        self.sum_nll += nll;
        self.sum_nll2 += nll * nll;
        self.sum_nll_base += nb;
        self.sum_nll_base2 += nb * nb;
        self.sum_nll_nll_base += nll * nb;
        self.sum_kld += p.kld;
        self.sum_kld2 += p.kld * p.kld;
        let d = f64::from(p.p_diff);
        self.sum_p_diff += d;
        self.sum_p_diff2 += d * d;
        self.sum_p_diff4 += d * d * d * d;
        self.max_p_diff = self.max_p_diff.max(p.p_diff.abs());
        self.same_top += usize::from(p.same_top);
        self.kld_values.push(p.kld as f32);
        self.p_diff_values.push(p.p_diff);
    }

    /// Positions so far.
    pub fn count(&self) -> usize {
        self.kld_values.len()
    }

    /// Mean KL so far (0 before the first position).
    pub fn mean_kld(&self) -> f64 {
        mean_unc(self.sum_kld, self.sum_kld2, self.count()).value
    }

    /// PPL of the compared model so far (NaN before the first position).
    pub fn ppl(&self) -> f64 {
        (self.sum_nll / self.count() as f64).exp()
    }

    /// Every position's KL divergence, in the order added.
    pub fn kld_values(&self) -> &[f32] {
        &self.kld_values
    }

    /// The report; `None` before the first position.
    pub fn report(&self) -> Option<KlReport> {
        let n = self.count();
        if n == 0 {
            return None;
        }
        let cov = if n < 10 {
            0.0
        } else {
            let nf = n as f64;
            (self.sum_nll_nll_base / nf - (self.sum_nll / nf) * (self.sum_nll_base / nf))
                / (nf - 1.0)
        };
        let log_ppl = mean_unc(self.sum_nll, self.sum_nll2, n);
        let log_ppl_base = mean_unc(self.sum_nll_base, self.sum_nll_base2, n);
        let ppl = log_ppl.value.exp();
        let ppl_base = log_ppl_base.value.exp();
        let ppl_unc = ppl * log_ppl.uncertainty;
        let ppl_base_unc = ppl_base * log_ppl_base.uncertainty;
        let ratio_val = log_ppl.value - log_ppl_base.value;
        let ratio_unc = (log_ppl.uncertainty.powi(2) + log_ppl_base.uncertainty.powi(2)
            - 2.0 * cov)
            .max(0.0)
            .sqrt();
        let ppl_cov = ppl * ppl_base * cov;
        let mse = mean_unc(self.sum_p_diff2, self.sum_p_diff4, n);
        let rms = mse.value.sqrt();
        let top = self.same_top as f64 / n as f64;
        let top_unc = if n > 1 {
            (top * (1.0 - top) / (n - 1) as f64).sqrt()
        } else {
            0.0
        };
        Some(KlReport {
            count: n,
            ppl: Estimate {
                value: ppl,
                uncertainty: ppl_unc,
            },
            ppl_base: Estimate {
                value: ppl_base,
                uncertainty: ppl_base_unc,
            },
            ppl_correlation: cov / (log_ppl.uncertainty * log_ppl_base.uncertainty),
            ln_ppl_ratio: Estimate {
                value: ratio_val,
                uncertainty: ratio_unc,
            },
            ppl_ratio: Estimate {
                value: ratio_val.exp(),
                uncertainty: ratio_val.exp() * ratio_unc,
            },
            ppl_diff: Estimate {
                value: ppl - ppl_base,
                uncertainty: (ppl_unc * ppl_unc + ppl_base_unc * ppl_base_unc - 2.0 * ppl_cov)
                    .max(0.0)
                    .sqrt(),
            },
            kld: mean_unc(self.sum_kld, self.sum_kld2, n),
            kld_quantiles: quantiles(&self.kld_values),
            p_diff: mean_unc(self.sum_p_diff, self.sum_p_diff2, n),
            p_diff_quantiles: quantiles(&self.p_diff_values),
            p_diff_rms: Estimate {
                value: rms,
                uncertainty: if rms > 0.0 {
                    0.5 / rms * mse.uncertainty
                } else {
                    0.0
                },
            },
            max_abs_p_diff: f64::from(self.max_p_diff),
            same_top: Estimate {
                value: top,
                uncertainty: top_unc,
            },
        })
    }
}

impl KlReport {
    /// The statistics in the layout of llama.cpp's `--kl-divergence` summary.
    pub fn to_text(&self) -> String {
        let q = &self.kld_quantiles;
        let d = &self.p_diff_quantiles;
        let pct = |x: f64| 100.0 * x;
        format!(
            "====== Perplexity statistics ======\n\
             Mean PPL(Q)                   : {:10.6} ± {:10.6}\n\
             Mean PPL(base)                : {:10.6} ± {:10.6}\n\
             Cor(ln(PPL(Q)), ln(PPL(base))): {:6.2}%\n\
             Mean ln(PPL(Q)/PPL(base))     : {:10.6} ± {:10.6}\n\
             Mean PPL(Q)/PPL(base)         : {:10.6} ± {:10.6}\n\
             Mean PPL(Q)-PPL(base)         : {:10.6} ± {:10.6}\n\n\
             ====== KL divergence statistics ======\n\
             Mean    KLD: {:10.6} ± {:10.6}\n\
             Maximum KLD: {:10.6}\n\
             99.9%   KLD: {:10.6}\n\
             99.0%   KLD: {:10.6}\n\
             95.0%   KLD: {:10.6}\n\
             90.0%   KLD: {:10.6}\n\
             Median  KLD: {:10.6}\n\
             10.0%   KLD: {:10.6}\n \
             5.0%   KLD: {:10.6}\n \
             1.0%   KLD: {:10.6}\n \
             0.1%   KLD: {:10.6}\n\
             Minimum KLD: {:10.6}\n\n\
             ====== Token probability statistics ======\n\
             Mean    Δp: {:6.3} ± {:5.3} %\n\
             Maximum Δp: {:6.3}%\n\
             99.9%   Δp: {:6.3}%\n\
             99.0%   Δp: {:6.3}%\n\
             95.0%   Δp: {:6.3}%\n\
             90.0%   Δp: {:6.3}%\n\
             75.0%   Δp: {:6.3}%\n\
             Median  Δp: {:6.3}%\n\
             25.0%   Δp: {:6.3}%\n\
             10.0%   Δp: {:6.3}%\n \
             5.0%   Δp: {:6.3}%\n \
             1.0%   Δp: {:6.3}%\n \
             0.1%   Δp: {:6.3}%\n\
             Minimum Δp: {:6.3}%\n\
             RMS Δp    : {:6.3} ± {:5.3} %\n\
             Same top p: {:6.3} ± {:5.3} %\n",
            self.ppl.value,
            self.ppl.uncertainty,
            self.ppl_base.value,
            self.ppl_base.uncertainty,
            pct(self.ppl_correlation),
            self.ln_ppl_ratio.value,
            self.ln_ppl_ratio.uncertainty,
            self.ppl_ratio.value,
            self.ppl_ratio.uncertainty,
            self.ppl_diff.value,
            self.ppl_diff.uncertainty,
            self.kld.value,
            self.kld.uncertainty,
            q.max,
            q.p99_9,
            q.p99,
            q.p95,
            q.p90,
            q.median,
            q.p10,
            q.p5,
            q.p1,
            q.p0_1,
            q.min,
            pct(self.p_diff.value),
            pct(self.p_diff.uncertainty),
            pct(d.max),
            pct(d.p99_9),
            pct(d.p99),
            pct(d.p95),
            pct(d.p90),
            pct(d.p75),
            pct(d.median),
            pct(d.p25),
            pct(d.p10),
            pct(d.p5),
            pct(d.p1),
            pct(d.p0_1),
            pct(d.min),
            pct(self.p_diff_rms.value),
            pct(self.p_diff_rms.uncertainty),
            pct(self.same_top.value),
            pct(self.same_top.uncertainty),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_uses_llama_cpp_interpolated_percentiles() {
        let mut acc = KlAccumulator::new();
        for i in 0..101 {
            acc.add(Position {
                kld: f64::from(i) / 100.0,
                p_diff: (i as f32 - 50.0) / 100.0,
                same_top: i % 4 != 0,
                nll: 2.0,
                nll_base: 2.0,
            });
        }
        let r = acc.report().expect("non-empty");
        assert_eq!(r.count, 101);
        assert!((r.kld.value - 0.5).abs() < 1e-9);
        assert!((r.kld_quantiles.p99 - 0.99).abs() < 1e-6);
        assert!((r.kld_quantiles.p90 - 0.90).abs() < 1e-6);
        assert!((r.kld_quantiles.p99_9 - 0.999).abs() < 1e-6);
        assert_eq!(r.kld_quantiles.median, 0.5f32 as f64);
        assert_eq!((r.kld_quantiles.min, r.kld_quantiles.max), (0.0, 1.0));
        assert!((r.p_diff.value).abs() < 1e-7);
        assert!((r.max_abs_p_diff - 0.5).abs() < 1e-7);
        // 26 of 101 are multiples of 4.
        assert!((r.same_top.value - 75.0 / 101.0).abs() < 1e-12);
        assert!((r.ppl.value - 2f64.exp()).abs() < 1e-9);
        assert!(r.to_text().contains("Mean    KLD:   0.500000"));
        assert!(KlAccumulator::new().report().is_none());
    }
}
