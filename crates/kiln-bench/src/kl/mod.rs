//! Quality of one model's next-token distributions against a reference ("base"): KL
//! divergence, top-1 agreement and Δp (the change in the probability of the true next
//! token), with the arithmetic and the report of llama.cpp's `llama-perplexity
//! --kl-divergence`.
//!
//! Reference distributions are stored compactly as llama.cpp stores them: per position, the
//! log-probabilities within 16 nats of the most likely token, linearly quantized to `u16`
//! (a row of [`row_len`] `u16`s whose first four hold two `f32`: the step and the lowest
//! log-probability). KL sums only reference entries with log-probability > −16, so stored
//! and exact references give the same figure to a few parts in 10⁵.

mod report;

pub use report::{Estimate, KlAccumulator, KlReport, Quantiles};

/// `u16`s per stored reference row: the vocabulary rounded up to even, plus 4 for the
/// header floats (llama.cpp's `nv`).
pub fn row_len(n_vocab: usize) -> usize {
    2 * n_vocab.div_ceil(2) + 4
}

/// Encodes `logits` as a reference row (`out.len() == row_len(logits.len())`) and returns
/// the NLL of `target`, as llama.cpp's `--kl-divergence-base` does.
pub fn encode_row(logits: &[f32], target: usize, out: &mut [u16]) -> f64 {
    let mut max = logits[0];
    let mut min = logits[0];
    for &l in &logits[1..] {
        max = max.max(l);
        min = min.min(l);
    }
    let min = min.max(max - 16.0);
    let sum_exp: f64 = logits.iter().map(|&l| f64::from((l - max).exp())).sum();
    let log_sum_exp = sum_exp.ln() as f32;
    let min_log_prob = min - max - log_sum_exp;
    let scale = (max - min) / 65535.0;
    let (head, q) = out.split_at_mut(4);
    let s = scale.to_le_bytes();
    let m = min_log_prob.to_le_bytes();
    head[0] = u16::from_le_bytes([s[0], s[1]]);
    head[1] = u16::from_le_bytes([s[2], s[3]]);
    head[2] = u16::from_le_bytes([m[0], m[1]]);
    head[3] = u16::from_le_bytes([m[2], m[3]]);
    q.fill(0);
    if scale != 0.0 {
        let inv = 1.0 / scale;
        for (o, &l) in q.iter_mut().zip(logits) {
            if l > min {
                // Values lie in [0, 65535]; ties go to even as ggml's `nearest_int` does.
                *o = (inv * (l - min)).round_ties_even() as u16;
            }
        }
    }
    f64::from(max + log_sum_exp - logits[target])
}

/// A decoded view of a stored reference row.
#[derive(Clone, Copy, Debug)]
pub struct BaseRow<'a> {
    scale: f32,
    min_log_prob: f32,
    q: &'a [u16],
}

impl<'a> BaseRow<'a> {
    /// `row` must be [`row_len`]`(n_vocab)` long (at least `n_vocab + 4`).
    pub fn new(row: &'a [u16], n_vocab: usize) -> BaseRow<'a> {
        let f = |a: u16, b: u16| {
            let (a, b) = (a.to_le_bytes(), b.to_le_bytes());
            f32::from_le_bytes([a[0], a[1], b[0], b[1]])
        };
        BaseRow {
            scale: f(row[0], row[1]),
            min_log_prob: f(row[2], row[3]),
            q: &row[4..4 + n_vocab],
        }
    }

    /// The stored log-probability of token `i`.
    pub fn log_prob(&self, i: usize) -> f32 {
        self.scale * f32::from(self.q[i]) + self.min_log_prob
    }
}

/// What one compared position contributes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Position {
    pub kld: f64,
    pub p_diff: f32,
    pub same_top: bool,
    pub nll: f32,
    pub nll_base: f32,
}

/// Compares `logits` with a stored reference row at one position whose true next token is
/// `target` (llama.cpp's arithmetic, including its f32 steps).
pub fn compare_row(logits: &[f32], base: &BaseRow<'_>, target: usize) -> Position {
    let mut max = logits[0];
    let mut imax = 0;
    for (i, &l) in logits.iter().enumerate().skip(1) {
        if l > max {
            max = l;
            imax = i;
        }
    }
    let sum_exp: f64 = logits.iter().map(|&l| f64::from((l - max).exp())).sum();
    let log_sum_exp = sum_exp.ln() as f32;
    let nll = max + log_sum_exp - logits[target];
    let nll_base = -base.log_prob(target);
    let log_norm = max + log_sum_exp;
    let mut kld = 0.0f64;
    let mut imax_base = 0;
    let mut best = f32::NEG_INFINITY;
    for (i, &l) in logits.iter().enumerate() {
        let lp_base = base.log_prob(i);
        if i == 0 || lp_base > best {
            best = lp_base;
            imax_base = i;
        }
        if lp_base > -16.0 {
            kld += f64::from(lp_base.exp() * (lp_base - l + log_norm));
        }
    }
    Position {
        kld,
        p_diff: (-nll).exp() - (-nll_base).exp(),
        same_top: imax == imax_base,
        nll,
        nll_base,
    }
}

/// Compares two full logit vectors exactly (f64 softmax, every entry): KL(base ‖ q),
/// top-1 agreement and, with a target, Δp = p_q(target) − p_base(target).
pub fn compare_logits(base: &[f32], logits: &[f32], target: Option<usize>) -> Position {
    let log_softmax = |v: &[f32]| -> Vec<f64> {
        let max = v.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let lse = v
            .iter()
            .map(|&l| f64::from(l - max).exp())
            .sum::<f64>()
            .ln();
        v.iter().map(|&l| f64::from(l - max) - lse).collect()
    };
    let (lb, lq) = (log_softmax(base), log_softmax(logits));
    let kld = lb
        .iter()
        .zip(&lq)
        .map(|(&b, &q)| {
            if b.is_finite() {
                b.exp() * (b - q)
            } else {
                0.0
            }
        })
        .sum();
    let argmax = |v: &[f64]| {
        let mut best = 0;
        for (i, &x) in v.iter().enumerate() {
            if x > v[best] {
                best = i;
            }
        }
        best
    };
    let (nll, nll_base) = target.map_or((0.0, 0.0), |t| (-lq[t] as f32, -lb[t] as f32));
    Position {
        kld,
        p_diff: target.map_or(0.0, |t| (lq[t].exp() - lb[t].exp()) as f32),
        same_top: argmax(&lb) == argmax(&lq),
        nll,
        nll_base,
    }
}

/// Compares two streams of logits position by position (rows of `n_vocab`, exact f64
/// arithmetic): `targets[i]` is the true token after row `i` (for Δp and the perplexities),
/// or `None` to compare distributions only. `None` when the streams differ in shape or are
/// empty.
pub fn compare_streams(
    base: &[f32],
    logits: &[f32],
    n_vocab: usize,
    targets: Option<&[u32]>,
) -> Option<KlReport> {
    if n_vocab == 0 || base.len() != logits.len() || !base.len().is_multiple_of(n_vocab) {
        return None;
    }
    let rows = base.len() / n_vocab;
    if targets.is_some_and(|t| t.len() != rows || t.iter().any(|&x| x as usize >= n_vocab)) {
        return None;
    }
    let mut acc = KlAccumulator::new();
    for (i, (b, q)) in base
        .chunks_exact(n_vocab)
        .zip(logits.chunks_exact(n_vocab))
        .enumerate()
    {
        acc.add(compare_logits(b, q, targets.map(|t| t[i] as usize)));
    }
    acc.report()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logits(seed: u32, n: usize) -> Vec<f32> {
        // A deterministic, peaked, irregular distribution.
        (0..n)
            .map(|i| {
                let x = (i as u32)
                    .wrapping_mul(2_654_435_761)
                    .wrapping_add(seed * 97)
                    % 1000;
                x as f32 / 100.0 - if i == (seed as usize % n) { -8.0 } else { 0.0 }
            })
            .collect()
    }

    #[test]
    fn identical_distributions_have_zero_divergence() {
        let l = logits(3, 1000);
        let p = compare_logits(&l, &l, Some(7));
        assert!(p.kld.abs() < 1e-12);
        assert_eq!(p.p_diff, 0.0);
        assert!(p.same_top);
        // Through a stored row the quantization error stays tiny.
        let mut row = vec![0u16; row_len(l.len())];
        let nll = encode_row(&l, 7, &mut row);
        let q = compare_row(&l, &BaseRow::new(&row, l.len()), 7);
        assert!(q.kld.abs() < 1e-4, "kld {}", q.kld);
        assert!(q.same_top);
        assert!((f64::from(q.nll) - nll).abs() < 1e-4);
        assert!(q.p_diff.abs() < 1e-4);
    }

    #[test]
    fn kl_of_two_coins_matches_the_formula() {
        // base (0.5, 0.5), q (0.25, 0.75): KL = 0.5 ln 2 + 0.5 ln(2/3).
        let base = [0.0f32, 0.0];
        let q = [0.0f32, 3f32.ln()];
        let p = compare_logits(&base, &q, Some(0));
        let want = 0.5 * 2f64.ln() + 0.5 * (2.0f64 / 3.0).ln();
        assert!((p.kld - want).abs() < 1e-7);
        assert!((p.p_diff - (0.25 - 0.5)).abs() < 1e-6);
        // A tie in the base picks the first maximum, as llama.cpp does: q prefers token 1.
        assert!(!p.same_top);
        let mut row = vec![0u16; row_len(2)];
        encode_row(&base, 0, &mut row);
        let r = compare_row(&q, &BaseRow::new(&row, 2), 0);
        assert!((r.kld - want).abs() < 1e-6, "{} vs {want}", r.kld);
    }

    #[test]
    fn stored_rows_agree_with_exact_comparison() {
        for seed in 0..5 {
            let base = logits(seed, 3001);
            let q: Vec<f32> = base
                .iter()
                .enumerate()
                .map(|(i, &x)| x + ((i * 7919) % 13) as f32 * 0.03)
                .collect();
            let exact = compare_logits(&base, &q, Some(11));
            let mut row = vec![0u16; row_len(base.len())];
            encode_row(&base, 11, &mut row);
            let stored = compare_row(&q, &BaseRow::new(&row, base.len()), 11);
            assert!(
                (exact.kld - stored.kld).abs() < 1e-4 + 1e-3 * exact.kld,
                "{} vs {}",
                exact.kld,
                stored.kld
            );
            assert_eq!(exact.same_top, stored.same_top);
            assert!((exact.p_diff - stored.p_diff).abs() < 1e-4);
        }
    }

    #[test]
    fn streams_are_compared_row_by_row() {
        let base: Vec<f32> = [0.0, 0.0, 1.0, 0.0].to_vec(); // two rows of two
        let q: Vec<f32> = [0.0, 3f32.ln(), 1.0, 0.0].to_vec();
        let r = compare_streams(&base, &q, 2, Some(&[0, 0])).expect("same shape");
        assert_eq!(r.count, 2);
        // Row 0 is the two-coin case; row 1 is identical.
        let want = (0.5 * 2f64.ln() + 0.5 * (2.0f64 / 3.0).ln()) / 2.0;
        assert!((r.kld.value - want).abs() < 1e-7);
        assert_eq!(r.same_top.value, 0.5);
        assert!(compare_streams(&base, &q[..2], 2, None).is_none());
        assert!(compare_streams(&base, &q, 2, Some(&[0, 5])).is_none());
    }
}
