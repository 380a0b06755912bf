//! What a target pass costs by the number of tokens it scores, relative to a one-token
//! pass (a decode step): the currency in which the draft-length controller
//! ([`crate::DraftLength`]) weighs what drafting earns.
//!
//! The curve is measured once per model, on the session about to generate
//! ([`PassCost::measure`]): a scoring pass of each of a handful of sizes, rolled back at
//! once, over the fastest of the one-token passes run between them. It is a ratio
//! of two times taken moments apart, so it does not drift with the machine's load the way
//! absolute timings do, and the controller afterwards only counts tokens: a drafted pass
//! of `n` tokens that emitted `e` tokens earned `e` for a cost of `cost(n)` decode steps,
//! where a plain step earns one for one. Between measured sizes the cost is interpolated
//! linearly.

use std::time::Instant;

use kiln_model::{BatchSeq, Session};

use crate::SpecError;

/// The relative cost of a target pass by its token count (`cost(1) = 1`).
#[derive(Clone, Debug, PartialEq)]
pub struct PassCost {
    /// Measured sizes and their relative costs: ascending sizes, the first `(1, 1.0)`,
    /// costs non-decreasing.
    points: Vec<(usize, f64)>,
}

impl PassCost {
    /// The pass sizes measured, up to the largest pass a draft may need (which is measured
    /// too): the matrix kernels take a pass's tokens in groups of four and eight, so the
    /// cost rises in steps, and a pass one token past a group (5, 9, 17 tokens: the last
    /// token runs every matrix again on its own) costs far more than one at the group's
    /// end. Each power of two from 4 is measured with the size one past it, so the
    /// interpolated curve keeps those steps (Qwen2.5-Coder-0.5B, AVX2, two threads, 2,000
    /// positions deep: 16 tokens 5.3 decode steps, 17 tokens 7.5).
    pub const SIZES: [usize; 12] = [1, 2, 4, 5, 8, 9, 16, 17, 32, 33, 64, 65];

    /// A curve from measured `(tokens, seconds)` pairs (any order, sizes repeated: the
    /// fastest of each counts). `None` without a positive one-token time.
    pub fn from_timings(timings: &[(usize, f64)]) -> Option<PassCost> {
        let mut sizes: Vec<usize> = timings.iter().map(|&(n, _)| n).filter(|&n| n > 0).collect();
        sizes.sort_unstable();
        sizes.dedup();
        let fastest = |n: usize| {
            timings
                .iter()
                .filter(|&&(m, t)| m == n && t.is_finite() && t > 0.0)
                .map(|&(_, t)| t)
                .reduce(f64::min)
        };
        let t1 = fastest(1)?;
        let mut points = Vec::with_capacity(sizes.len());
        let mut last = 1.0f64;
        for n in sizes {
            let Some(t) = fastest(n) else { continue };
            // A wider pass does at least the work of a narrower one: noise that says
            // otherwise is ignored.
            last = if n == 1 { 1.0 } else { last.max(t / t1) };
            points.push((n, last));
        }
        Some(PassCost { points })
    }

    /// Measures the curve on `session`'s current sequence, whose last token `pending` is
    /// not yet evaluated, for passes of up to `max_tokens` tokens (fewer when the context
    /// has no room): one pass of each size, of `pending` repeated, each cut back at once
    /// ([`Session::settle`]), so the sequence, its KV cache and the prefix cache are as
    /// before. A one-token pass runs before and after each wider one and the fastest
    /// counts: it is the unit of the whole curve. About thirty decode steps on an idle
    /// machine for a draft of at most 16 tokens.
    pub fn measure(
        session: &mut Session,
        pending: u32,
        max_tokens: usize,
    ) -> Result<PassCost, SpecError> {
        let seq = session.sequence();
        let pos0 = session.pos();
        let max = max_tokens
            .min(session.n_ctx().saturating_sub(pos0))
            .clamp(1, *Self::SIZES.last().unwrap_or(&1));
        let mut sizes: Vec<usize> = Self::SIZES.iter().copied().filter(|&n| n < max).collect();
        if sizes.last() != Some(&max) {
            sizes.push(max);
        }
        let row = vec![pending; max];
        let pass = |session: &mut Session, n: usize| -> Result<f64, SpecError> {
            let t = Instant::now();
            session.forward_scored(&[BatchSeq {
                seq,
                tokens: &row[..n],
                logits: true,
                prompt_rows: 0,
            }])?;
            let secs = t.elapsed().as_secs_f64();
            session.settle(seq, pos0)?;
            Ok(secs)
        };
        let mut timings = Vec::with_capacity(2 * sizes.len() + 1);
        timings.push((1, pass(session, 1)?));
        for &n in sizes.iter().filter(|&&n| n > 1) {
            timings.push((n, pass(session, n)?));
            timings.push((1, pass(session, 1)?));
        }
        Self::from_timings(&timings)
            .ok_or_else(|| SpecError::Config("the one-token pass could not be timed".into()))
    }

    /// Every pass costs one decode step (what the controller assumes without a measured
    /// curve: only acceptance decides).
    pub fn flat() -> PassCost {
        PassCost {
            points: vec![(1, 1.0)],
        }
    }

    /// A pass of `n` tokens in decode steps: measured, interpolated between measured
    /// sizes, extrapolated past the largest along the last segment.
    pub fn of(&self, n: usize) -> f64 {
        let n = n.max(1);
        let p = &self.points;
        let i = p.partition_point(|&(m, _)| m < n);
        if let Some(&(m, c)) = p.get(i)
            && m == n
        {
            return c;
        }
        let (a, b) = match (i.checked_sub(1).and_then(|j| p.get(j)), p.get(i)) {
            (Some(&a), Some(&b)) => (a, b),
            (Some(&b), None) if i >= 2 => (p[i - 2], b),
            (Some(&(_, c)), None) => return c,
            _ => return 1.0,
        };
        let slope = (b.1 - a.1) / (b.0 - a.0) as f64;
        a.1 + slope * (n - a.0) as f64
    }

    /// The measured sizes and their relative costs.
    pub fn points(&self) -> &[(usize, f64)] {
        &self.points
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_fastest_timing_of_each_size_relative_to_one_token() {
        let c = PassCost::from_timings(&[(1, 1.0), (4, 2.0), (1, 0.5), (4, 0.75)]).unwrap();
        assert_eq!(c.points(), &[(1, 1.0), (4, 1.5)]);
        assert!(PassCost::from_timings(&[(4, 0.01)]).is_none());
    }

    #[test]
    fn interpolates_between_sizes_and_never_falls_with_more_tokens() {
        let c = PassCost::from_timings(&[(1, 0.010), (3, 0.016), (5, 0.014), (9, 0.030)]).unwrap();
        assert_eq!(c.of(1), 1.0);
        assert!((c.of(2) - 1.3).abs() < 1e-12);
        // Five tokens timed faster than three: taken as three's cost.
        assert!((c.of(5) - 1.6).abs() < 1e-12);
        assert!((c.of(7) - 2.3).abs() < 1e-12);
        // Past the largest size, along the last segment.
        assert!((c.of(13) - 4.4).abs() < 1e-12);
        assert_eq!(PassCost::flat().of(17), 1.0);
    }
}
