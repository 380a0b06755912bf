//! DRY ("don't repeat yourself", p-e-w's sampler as in llama.cpp and koboldcpp): penalise a
//! token that would extend a sequence already seen in the window.
//!
//! For each earlier position whose preceding tokens match the end of the context for `n`
//! tokens, the token that followed there would make the repeat `n + 1` long; if
//! `n ≥ allowed_length` it loses `multiplier · base^(n − allowed_length)` from its logit
//! (the largest `n` per token counts). A sequence breaker (a token whose text contains one
//! of the breaker strings) ends every match: matches never reach back past the last
//! breaker, and breakers themselves are never penalised. Match lengths come from the
//! Z-function of the reversed window, so a step costs O(window).

use std::sync::Arc;

use crate::candidates::Candidates;
use crate::history::History;
use crate::vocab::TokenMask;

#[derive(Clone, Debug, Default)]
pub(crate) struct Dry {
    pub multiplier: f32,
    pub base: f32,
    pub allowed_length: usize,
    pub last_n: usize,
    pub breakers: Option<Arc<TokenMask>>,
    rev: Vec<u32>,
    z: Vec<usize>,
    best: Vec<(u32, usize)>,
}

impl Dry {
    pub fn new(
        multiplier: f32,
        base: f32,
        allowed_length: usize,
        last_n: usize,
        breakers: Option<Arc<TokenMask>>,
    ) -> Dry {
        Dry {
            multiplier,
            base,
            allowed_length,
            last_n,
            breakers,
            ..Dry::default()
        }
    }

    pub fn enabled(&self) -> bool {
        self.multiplier != 0.0 && self.base >= 1.0 && self.last_n > 0
    }

    fn is_breaker(&self, id: u32) -> bool {
        self.breakers.as_ref().is_some_and(|m| m.contains(id))
    }

    pub fn apply(&mut self, c: &mut Candidates, h: &History) {
        if !self.enabled() {
            return;
        }
        let n = h.len().min(self.last_n);
        if n <= self.allowed_length {
            return;
        }
        self.rev.clear();
        self.rev.extend(h.last_rev(n));
        let limit = self
            .rev
            .iter()
            .position(|&t| self.is_breaker(t))
            .unwrap_or(n);
        if limit < self.allowed_length {
            return;
        }
        z_function(&self.rev, &mut self.z);
        self.best.clear();
        for k in 1..n {
            let len = self.z[k].min(limit);
            if len >= self.allowed_length {
                self.best.push((self.rev[k - 1], len));
            }
        }
        if self.best.is_empty() {
            return;
        }
        // Largest length per token.
        self.best
            .sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        self.best.dedup_by_key(|e| e.0);
        // Keep base^exp finite.
        let max_exp = if self.base > 1.000001 {
            (88.722_84 / self.base.ln()) as usize
        } else {
            usize::MAX
        };
        for i in 0..self.best.len() {
            let (id, len) = self.best[i];
            if self.is_breaker(id) {
                continue;
            }
            if let Some(p) = c.position(id) {
                let exp = (len - self.allowed_length).min(max_exp);
                c.c[p].logit -= self.multiplier * self.base.powi(exp as i32);
            }
        }
        c.sorted = false;
    }
}

/// `z[k]` = length of the longest common prefix of `s` and `s[k..]` (`z[0] = s.len()`).
fn z_function(s: &[u32], z: &mut Vec<usize>) {
    let n = s.len();
    z.clear();
    z.resize(n, 0);
    if n == 0 {
        return;
    }
    z[0] = n;
    let (mut l, mut r) = (0usize, 0usize);
    for k in 1..n {
        let mut len = if k < r { (r - k).min(z[k - l]) } else { 0 };
        while k + len < n && s[len] == s[k + len] {
            len += 1;
        }
        z[k] = len;
        if k + len > r {
            l = k;
            r = k + len;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn z_function_matches_the_naive_definition() {
        let s = [1u32, 2, 1, 2, 1, 3, 1, 2, 1, 2];
        let mut z = Vec::new();
        z_function(&s, &mut z);
        for k in 1..s.len() {
            let naive = (0..s.len() - k).take_while(|&i| s[i] == s[k + i]).count();
            assert_eq!(z[k], naive, "k = {k}");
        }
    }

    fn history(tokens: &[u32]) -> History {
        let mut h = History::new(64);
        for &t in tokens {
            h.push(t);
        }
        h
    }

    #[test]
    fn the_token_that_would_extend_a_repeat_is_penalised_by_its_length() {
        // a b c X a b c → "a b c" repeats; X would extend it to length 4.
        let (a, b, cc, x, other) = (1, 2, 3, 4, 5);
        let h = history(&[a, b, cc, x, a, b, cc]);
        let mut cands = Candidates::default();
        cands.fill_dense(&[0.0; 6]);
        let mut dry = Dry::new(1.0, 2.0, 2, 64, None);
        dry.apply(&mut cands, &h);
        // n = 3 ≥ 2: penalty 1 · 2^(3−2) = 2.
        assert_eq!(cands.c[x as usize].logit, -2.0);
        assert_eq!(cands.c[other as usize].logit, 0.0);
    }

    #[test]
    fn breakers_cut_matches_and_are_never_penalised() {
        let (a, b, cc, x, brk) = (1, 2, 3, 4, 5);
        let mut mask = TokenMask::new(6);
        mask.insert(brk);
        // The repeat "a b c" lies after a breaker: only 1 token since it (c) → no match.
        let h = history(&[a, b, cc, x, a, b, brk, cc]);
        let mut cands = Candidates::default();
        cands.fill_dense(&[0.0; 6]);
        let mut dry = Dry::new(1.0, 2.0, 2, 64, Some(Arc::new(mask)));
        dry.apply(&mut cands, &h);
        assert!(cands.c.iter().all(|c| c.logit == 0.0));
    }
}
