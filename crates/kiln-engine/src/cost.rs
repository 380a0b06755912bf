//! How long a step will take, and how much prefill fits in one.
//!
//! [`StepCost`] models a step's duration (the batched forward pass plus sampling) as
//!
//! ```text
//! ms ≈ c0 + c1·tokens + c2·logit_rows + c3·attention_keys / 1024
//! ```
//!
//! where `attention_keys = Σ_rows n·ctx + n(n+1)/2` counts the (query, key) pairs of every
//! row (a row of `n` tokens evaluated after `ctx` cached ones), so a decode row at 2,500
//! tokens of context or a prefill chunk late in a long prompt costs what it costs. The
//! coefficients are fitted after every step by exponentially weighted least squares
//! (forgetting factor [`FORGET`], about the last 50 steps), constrained to be ≥ 0 (an
//! exact non-negative solve over the 4 coefficients). Until [`MIN_FIT_SAMPLES`] steps are
//! seen it falls back to a per-token average.
//!
//! [`prefill_chunks`] uses the model to give each prefill candidate (in priority order) the
//! largest chunk that keeps the predicted step within the target, counting the decode rows
//! already planned. When that leaves nothing for the first candidate (the head of the
//! line), it still gets a minimum chunk, bounded both in tokens ([`MIN_PREFILL_CHUNK`]) and
//! in predicted time ([`FLOOR_SHARE`] of the target) but never less than one token, so
//! prefill always progresses without a 16-token chunk at 2,000 tokens of context doubling
//! a step.

use crate::config::MIN_PREFILL_CHUNK;

/// Number of coefficients: fixed, per token, per logits row, per 1,024 attention keys.
const N: usize = 4;

/// Weight of the previous fit's data at each new step (≈ the last 1 / (1 − 0.98) = 50
/// steps count).
pub(crate) const FORGET: f64 = 0.98;

/// Steps observed before the fitted model is trusted (before that: per-token average).
pub(crate) const MIN_FIT_SAMPLES: u64 = 8;

/// The minimum chunk that guarantees progress costs at most this share of the target.
pub(crate) const FLOOR_SHARE: f64 = 0.25;

/// An observation larger than this multiple of the prediction is clipped to it (a step
/// stalled by another process should not teach the model that every step is slow).
const CLIP: f64 = 4.0;

/// One planned row: `n` tokens evaluated after `ctx` already in the sequence's cache;
/// `logits` when its last token is sampled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Row {
    pub ctx: usize,
    pub n: usize,
    pub logits: bool,
}

/// The features of a set of rows (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Work([f64; N]);

impl Default for Work {
    fn default() -> Self {
        Work([1.0, 0.0, 0.0, 0.0])
    }
}

impl Work {
    /// The features of a step made of `rows`.
    pub fn of(rows: impl IntoIterator<Item = Row>) -> Work {
        let mut w = Work::default();
        for r in rows {
            w.add(r);
        }
        w
    }

    /// Adds one row.
    pub fn add(&mut self, r: Row) {
        let (c, n) = (r.ctx as f64, r.n as f64);
        self.0[1] += n;
        self.0[2] += f64::from(u8::from(r.logits));
        self.0[3] += (n * c + n * (n + 1.0) / 2.0) / 1024.0;
    }

    /// This work plus one row.
    pub fn with(mut self, r: Row) -> Work {
        self.add(r);
        self
    }

    /// Tokens in the step.
    pub fn tokens(&self) -> f64 {
        self.0[1]
    }
}

/// The online model of a step's duration (see the module doc).
#[derive(Clone, Debug)]
pub(crate) struct StepCost {
    /// Weighted Σ x·xᵀ and Σ x·y of the observations.
    g: [[f64; N]; N],
    b: [f64; N],
    samples: u64,
    coef: [f64; N],
}

impl Default for StepCost {
    fn default() -> Self {
        StepCost {
            g: [[0.0; N]; N],
            b: [0.0; N],
            samples: 0,
            coef: [0.0; N],
        }
    }
}

impl StepCost {
    /// Learns from one step: its work and how long it took (ms).
    pub fn observe(&mut self, w: &Work, ms: f64) {
        if !ms.is_finite() || ms < 0.0 {
            return;
        }
        let y = match self.predict(w) {
            Some(p) if self.samples >= MIN_FIT_SAMPLES && p > 0.0 => ms.min(CLIP * p),
            _ => ms,
        };
        let x = &w.0;
        for i in 0..N {
            for j in 0..N {
                self.g[i][j] = FORGET * self.g[i][j] + x[i] * x[j];
            }
            self.b[i] = FORGET * self.b[i] + x[i] * y;
        }
        self.samples += 1;
        if self.samples >= MIN_FIT_SAMPLES {
            self.coef = nonneg_least_squares(&self.g, &self.b);
        }
    }

    /// Predicted duration (ms) of a step doing `w`; `None` before any observation.
    pub fn predict(&self, w: &Work) -> Option<f64> {
        if self.samples == 0 {
            return None;
        }
        if self.samples < MIN_FIT_SAMPLES {
            // Weighted Σ ms / Σ tokens (x[0] = 1, so g[0][1] = Σ tokens, b[0] = Σ ms).
            let per_token = if self.g[0][1] > 0.0 {
                self.b[0] / self.g[0][1]
            } else {
                0.0
            };
            return Some(per_token * w.tokens());
        }
        Some(self.coef.iter().zip(&w.0).map(|(c, x)| c * x).sum())
    }

    /// The fitted coefficients (ms fixed, per token, per logits row, per 1,024 keys).
    #[cfg(test)]
    pub fn coefficients(&self) -> [f64; N] {
        self.coef
    }
}

/// Minimises ½·βᵀGβ − bᵀβ over β ≥ 0 (least squares from its normal equations) exactly:
/// the optimum is the unconstrained optimum of the face it lies on, so every face (subset
/// of free coefficients, 2⁴ − 1 of them) is solved and the best feasible one kept. A small
/// ridge keeps each face's system regular.
fn nonneg_least_squares(g: &[[f64; N]; N], b: &[f64; N]) -> [f64; N] {
    let mut best = [0.0; N];
    let mut best_obj = 0.0; // β = 0
    for mask in 1u32..(1 << N) {
        // The free coefficients of this face (an array: the fit runs every step, which
        // allocates nothing).
        let mut free = [0usize; N];
        let mut k = 0;
        for i in (0..N).filter(|i| mask >> i & 1 == 1) {
            free[k] = i;
            k += 1;
        }
        let idx = &free[..k];
        let mut a = [[0.0; N + 1]; N];
        for (r, &i) in idx.iter().enumerate() {
            for (c, &j) in idx.iter().enumerate() {
                a[r][c] = g[i][j];
            }
            a[r][r] += 1e-9 * g[i][i] + 1e-12;
            a[r][k] = b[i];
        }
        let Some(beta) = solve(&mut a, k) else {
            continue;
        };
        if beta[..k].iter().any(|&v| !(v > 0.0 && v.is_finite())) {
            continue;
        }
        let obj: f64 = -0.5 * idx.iter().zip(&beta).map(|(&i, v)| b[i] * v).sum::<f64>();
        if obj < best_obj {
            best_obj = obj;
            best = [0.0; N];
            for (&i, v) in idx.iter().zip(&beta) {
                best[i] = *v;
            }
        }
    }
    best
}

/// Solves the `k × k` system in `a` (augmented with its right-hand side in column `k`) by
/// Gaussian elimination with partial pivoting; `None` when singular.
fn solve(a: &mut [[f64; N + 1]; N], k: usize) -> Option<[f64; N]> {
    for col in 0..k {
        let p = (col..k).max_by(|&x, &y| a[x][col].abs().total_cmp(&a[y][col].abs()))?;
        if a[p][col].abs() < 1e-300 {
            return None;
        }
        a.swap(col, p);
        let pivot = a[col];
        for row in a[col + 1..k].iter_mut() {
            let f = row[col] / pivot[col];
            for (x, p) in row[col..=k].iter_mut().zip(&pivot[col..=k]) {
                *x -= f * p;
            }
        }
    }
    let mut x = [0.0; N];
    for r in (0..k).rev() {
        let s: f64 = (r + 1..k).map(|c| a[r][c] * x[c]).sum();
        x[r] = (a[r][k] - s) / a[r][r];
    }
    Some(x)
}

/// A sequence waiting for prefill: `ctx` tokens already cached, `remaining` to evaluate
/// (its last one gives logits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Candidate {
    pub ctx: usize,
    pub remaining: usize,
}

impl Candidate {
    fn row(&self, n: usize) -> Row {
        Row {
            ctx: self.ctx,
            n,
            logits: n == self.remaining,
        }
    }
}

/// Prefill tokens for each candidate (in the order given, which is their priority) this
/// step, on top of `decode` (the decode rows already planned), within `budget` tokens.
///
/// With no stream decoding (`decode` has no tokens), no target (`target_ms ≤ 0`) or no
/// observation yet, the whole budget goes to prefill. Otherwise each candidate gets the
/// largest chunk keeping the predicted step ≤ `target_ms`; if that is nothing for the
/// first candidate, it gets the floor instead: the largest chunk of at most
/// [`MIN_PREFILL_CHUNK`] tokens whose own predicted cost is ≤ [`FLOOR_SHARE`] of the
/// target, and at least 1.
#[cfg(test)]
pub(crate) fn prefill_chunks(
    cost: &StepCost,
    target_ms: f64,
    budget: usize,
    decode: &Work,
    candidates: &[Candidate],
) -> Vec<usize> {
    let mut out = Vec::new();
    prefill_chunks_into(cost, target_ms, budget, decode, candidates, &mut out);
    out
}

/// [`prefill_chunks`] into `out` (cleared first), so a step reuses one buffer.
pub(crate) fn prefill_chunks_into(
    cost: &StepCost,
    target_ms: f64,
    budget: usize,
    decode: &Work,
    candidates: &[Candidate],
    out: &mut Vec<usize>,
) {
    out.clear();
    out.resize(candidates.len(), 0);
    let mut left = budget;
    let limited = decode.tokens() > 0.0 && target_ms > 0.0;
    let Some(base) = cost.predict(decode).filter(|_| limited) else {
        for (c, o) in candidates.iter().zip(out.iter_mut()) {
            *o = c.remaining.min(left);
            left -= *o;
        }
        return;
    };
    let mut work = *decode;
    for (i, (c, o)) in candidates.iter().zip(out.iter_mut()).enumerate() {
        let max = c.remaining.min(left);
        let fits = |n: usize| cost.predict(&work.with(c.row(n))).unwrap_or(base) <= target_ms;
        let mut n = largest(max, fits);
        if i == 0 && n == 0 && max > 0 {
            // The first in line always progresses: the floor chunk.
            let floor_ms = FLOOR_SHARE * target_ms;
            let fits =
                |n: usize| cost.predict(&work.with(c.row(n))).unwrap_or(base) - base <= floor_ms;
            n = largest(max.min(MIN_PREFILL_CHUNK), fits).max(1);
        }
        if n > 0 {
            *o = n;
            left -= n;
            work.add(c.row(n));
        }
    }
}

/// The largest `n ≤ max` with `fits(n)` (0 if none), for a `fits` that holds up to some
/// `n` and not beyond.
fn largest(max: usize, fits: impl Fn(usize) -> bool) -> usize {
    let (mut lo, mut hi) = (0, max); // fits(lo) is assumed (n = 0 adds nothing)
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    lo
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic pseudo-random sequence in [0, 1).
    fn lcg(state: &mut u64) -> f64 {
        *state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (*state >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A random step: some decode rows at random contexts, maybe a prefill chunk.
    fn random_step(s: &mut u64) -> Vec<Row> {
        let mut rows = Vec::new();
        let decode = (lcg(s) * 20.0) as usize;
        for _ in 0..decode {
            rows.push(Row {
                ctx: (lcg(s) * 3000.0) as usize,
                n: 1,
                logits: true,
            });
        }
        if lcg(s) < 0.6 {
            let n = 1 + (lcg(s) * 300.0) as usize;
            rows.push(Row {
                ctx: (lcg(s) * 2000.0) as usize,
                n,
                logits: lcg(s) < 0.3,
            });
        }
        rows
    }

    fn true_ms(c: [f64; 4], w: &Work) -> f64 {
        c.iter().zip(&w.0).map(|(a, x)| a * x).sum()
    }

    #[test]
    fn estimator_recovers_known_coefficients_from_synthetic_steps() {
        let truth = [4.0, 2.5, 0.3, 1.2];
        let mut cost = StepCost::default();
        let mut s = 7;
        for _ in 0..200 {
            let w = Work::of(random_step(&mut s));
            // ±1 ms of jitter.
            let noise = 2.0 * (lcg(&mut s) - 0.5);
            cost.observe(&w, true_ms(truth, &w) + noise);
        }
        let c = cost.coefficients();
        for (got, want) in c.iter().zip(truth) {
            assert!(
                (got - want).abs() <= 0.1 * want,
                "fitted {c:?}, true {truth:?}"
            );
        }
    }

    #[test]
    fn estimator_keeps_coefficients_non_negative() {
        // Steps whose time falls with their token count would need a negative per-token
        // cost; the fit keeps it at 0 instead.
        let mut cost = StepCost::default();
        for i in 0..50usize {
            let n = 1 + i % 10;
            let w = Work::of([Row {
                ctx: 0,
                n,
                logits: true,
            }]);
            cost.observe(&w, 100.0 - 5.0 * n as f64);
        }
        assert!(cost.coefficients().iter().all(|&c| c >= 0.0));
        let w = Work::of([Row {
            ctx: 0,
            n: 5,
            logits: true,
        }]);
        assert!(cost.predict(&w).is_some_and(|p| p > 0.0));
    }

    #[test]
    fn estimator_adapts_after_the_machine_slows_down() {
        let before = [4.0, 2.5, 0.3, 1.2];
        let after = [8.0, 5.0, 0.6, 3.0];
        let mut cost = StepCost::default();
        let mut s = 11;
        for _ in 0..200 {
            let w = Work::of(random_step(&mut s));
            cost.observe(&w, true_ms(before, &w));
        }
        let probe = Work::of([
            Row {
                ctx: 2048,
                n: 16,
                logits: false,
            },
            Row {
                ctx: 2500,
                n: 1,
                logits: true,
            },
        ]);
        let p0 = cost.predict(&probe).unwrap_or(0.0);
        assert!((p0 - true_ms(before, &probe)).abs() < 0.02 * true_ms(before, &probe));
        for _ in 0..250 {
            let w = Work::of(random_step(&mut s));
            cost.observe(&w, true_ms(after, &w));
        }
        let p1 = cost.predict(&probe).unwrap_or(0.0);
        let want = true_ms(after, &probe);
        assert!(
            (p1 - want).abs() < 0.05 * want,
            "predicted {p1}, true {want}"
        );
    }

    #[test]
    fn estimator_falls_back_to_a_per_token_average_before_enough_steps() {
        let mut cost = StepCost::default();
        assert_eq!(cost.predict(&Work::default()), None);
        let w = Work::of([Row {
            ctx: 0,
            n: 100,
            logits: true,
        }]);
        cost.observe(&w, 300.0);
        let half = Work::of([Row {
            ctx: 0,
            n: 50,
            logits: true,
        }]);
        assert_eq!(cost.predict(&half), Some(150.0));
    }

    /// A model trained on a known cost: 5 ms fixed, 2 ms per token, 0.5 ms per logits
    /// row, 4 ms per 1,024 attention keys.
    fn trained() -> StepCost {
        let truth = [5.0, 2.0, 0.5, 4.0];
        let mut cost = StepCost::default();
        let mut s = 3;
        for _ in 0..300 {
            let w = Work::of(random_step(&mut s));
            cost.observe(&w, true_ms(truth, &w));
        }
        cost
    }

    fn decode_rows(n: usize, ctx: usize) -> Work {
        Work::of((0..n).map(|_| Row {
            ctx,
            n: 1,
            logits: true,
        }))
    }

    #[test]
    fn planner_gives_a_long_context_chunk_fewer_tokens_than_a_short_context_one() {
        let cost = trained();
        let decode = decode_rows(4, 300);
        let short = [Candidate {
            ctx: 0,
            remaining: 2048,
        }];
        let late = [Candidate {
            ctx: 1800,
            remaining: 248,
        }];
        let a = prefill_chunks(&cost, 200.0, 512, &decode, &short)[0];
        let b = prefill_chunks(&cost, 200.0, 512, &decode, &late)[0];
        assert!(a > b && b > 0, "chunk at context 0: {a}, at 1,800: {b}");
        // Both keep the predicted step within the target.
        for (c, n) in [(short[0], a), (late[0], b)] {
            let p = cost.predict(&decode.with(c.row(n))).unwrap_or(f64::MAX);
            assert!(p <= 200.0, "predicted {p} ms for {n} tokens at {}", c.ctx);
        }
    }

    #[test]
    fn planner_counts_the_decode_rows_cost() {
        let cost = trained();
        let c = [Candidate {
            ctx: 0,
            remaining: 2048,
        }];
        let few = prefill_chunks(&cost, 200.0, 512, &decode_rows(2, 100), &c)[0];
        let many = prefill_chunks(&cost, 200.0, 512, &decode_rows(16, 2000), &c)[0];
        assert!(
            few > many,
            "2 short decode rows: {few}, 16 long ones: {many}"
        );
    }

    #[test]
    fn planner_never_starves_prefill_when_decode_rows_exceed_the_target() {
        let cost = trained();
        // 40 decode rows at 3,000 tokens of context: far over a 200 ms target alone.
        let decode = decode_rows(40, 3000);
        assert!(cost.predict(&decode).is_some_and(|p| p > 200.0));
        let short = [Candidate {
            ctx: 0,
            remaining: 32,
        }];
        let got = prefill_chunks(&cost, 200.0, 512, &decode, &short);
        assert_eq!(got, [MIN_PREFILL_CHUNK]);
        // Late in a long prompt the floor is bounded by time, but still progresses.
        let late = [Candidate {
            ctx: 3000,
            remaining: 1000,
        }];
        let got = prefill_chunks(&cost, 200.0, 512, &decode, &late)[0];
        assert!((1..MIN_PREFILL_CHUNK).contains(&got), "floor chunk {got}");
        let extra = cost.predict(&decode.with(late[0].row(got))).unwrap_or(0.0)
            - cost.predict(&decode).unwrap_or(0.0);
        assert!(got == 1 || extra <= FLOOR_SHARE * 200.0);
    }

    #[test]
    fn planner_always_moves_the_head_of_the_line() {
        let cost = trained();
        // Decode rows leave ~10 ms: not one token of a prompt at context 2,900 fits (~13
        // ms each), a few of a fresh one would; the first in line (e.g. a starved prompt)
        // still progresses.
        let decode = decode_rows(13, 3000);
        let room = 200.0 - cost.predict(&decode).unwrap_or(0.0);
        assert!(room > 3.0 && room < 12.0, "room {room}");
        let c = [
            Candidate {
                ctx: 2900,
                remaining: 32,
            },
            Candidate {
                ctx: 0,
                remaining: 300,
            },
        ];
        let got = prefill_chunks(&cost, 200.0, 512, &decode, &c);
        assert!(got[0] >= 1, "{got:?}");
    }

    #[test]
    fn planner_uses_the_whole_budget_when_nothing_decodes() {
        let cost = trained();
        let c = [
            Candidate {
                ctx: 0,
                remaining: 300,
            },
            Candidate {
                ctx: 0,
                remaining: 2048,
            },
        ];
        assert_eq!(
            prefill_chunks(&cost, 200.0, 512, &Work::default(), &c),
            [300, 212]
        );
    }

    #[test]
    fn planner_serves_candidates_in_the_order_given() {
        let cost = trained();
        let decode = decode_rows(4, 300);
        let c = [
            Candidate {
                ctx: 0,
                remaining: 2000,
            },
            Candidate {
                ctx: 0,
                remaining: 32,
            },
        ];
        let got = prefill_chunks(&cost, 200.0, 512, &decode, &c);
        assert!(got[0] > 0 && got[1] == 0, "{got:?}");
    }
}
