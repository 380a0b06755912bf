//! The candidate list the stages work on: `(id, logit)` pairs, reused between steps.

use std::cmp::Ordering;

#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Cand {
    pub id: u32,
    pub logit: f32,
}

/// Best first; equal logits by ascending id, so every order is total and deterministic.
#[inline]
pub(crate) fn desc(a: &Cand, b: &Cand) -> Ordering {
    b.logit.total_cmp(&a.logit).then(a.id.cmp(&b.id))
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Candidates {
    pub c: Vec<Cand>,
    /// Sorted best first (by [`desc`]).
    pub sorted: bool,
    /// `c[i].id == i` for every `i` (the untouched full vocabulary).
    pub dense: bool,
    /// `index[id] = (stamp, position)`; valid where the stamp is current.
    index: Vec<(u32, u32)>,
    stamp: u32,
    index_valid: bool,
}

impl Candidates {
    pub fn fill_dense(&mut self, logits: &[f32]) {
        self.c.clear();
        self.c
            .extend(logits.iter().enumerate().map(|(i, &logit)| Cand {
                id: i as u32,
                logit,
            }));
        self.sorted = false;
        self.dense = true;
        self.index_valid = false;
    }

    pub fn fill_from(&mut self, logits: &[f32], ids: impl Iterator<Item = u32>) {
        self.c.clear();
        self.c
            .extend(ids.filter_map(|id| logits.get(id as usize).map(|&logit| Cand { id, logit })));
        self.sorted = false;
        self.dense = self.c.iter().enumerate().all(|(i, c)| c.id == i as u32);
        self.index_valid = false;
    }

    pub fn len(&self) -> usize {
        self.c.len()
    }

    /// The list changed shape (order or membership).
    pub fn reshaped(&mut self, sorted: bool) {
        self.sorted = sorted;
        self.dense = false;
        self.index_valid = false;
    }

    /// Where token `id` is in the list, if it is a candidate.
    pub fn position(&mut self, id: u32) -> Option<usize> {
        if self.dense {
            return ((id as usize) < self.c.len()).then_some(id as usize);
        }
        if !self.index_valid {
            self.stamp = self.stamp.wrapping_add(1);
            if self.stamp == 0 {
                self.index.iter_mut().for_each(|e| *e = (0, 0));
                self.stamp = 1;
            }
            let need = self.c.iter().map(|c| c.id as usize + 1).max().unwrap_or(0);
            if self.index.len() < need {
                self.index.resize(need, (0, 0));
            }
            for (i, c) in self.c.iter().enumerate() {
                self.index[c.id as usize] = (self.stamp, i as u32);
            }
            self.index_valid = true;
        }
        match self.index.get(id as usize) {
            Some(&(s, pos)) if s == self.stamp => Some(pos as usize),
            _ => None,
        }
    }

    /// Moves the `k` best to the front, sorted (the rest follow in no order).
    pub fn sort_prefix(&mut self, k: usize) {
        if self.sorted {
            return;
        }
        let k = k.min(self.c.len());
        if k == 0 {
            return;
        }
        if k < self.c.len() {
            self.c.select_nth_unstable_by(k - 1, desc);
        }
        self.c[..k].sort_unstable_by(desc);
        let all = k == self.c.len();
        self.reshaped(all);
    }

    pub fn sort(&mut self) {
        let n = self.c.len();
        self.sort_prefix(n);
    }

    pub fn truncate(&mut self, k: usize) {
        if k < self.c.len() {
            let sorted = self.sorted;
            self.c.truncate(k);
            self.reshaped(sorted);
        }
    }

    pub fn max_logit(&self) -> f32 {
        if self.sorted {
            return self.c.first().map_or(f32::NEG_INFINITY, |c| c.logit);
        }
        self.c
            .iter()
            .map(|c| c.logit)
            .fold(f32::NEG_INFINITY, f32::max)
    }

    /// `Σ exp(logit − max)` in f64, and the max.
    pub fn partition(&self) -> (f64, f32) {
        let max = self.max_logit();
        let sum = self.c.iter().map(|c| ((c.logit - max) as f64).exp()).sum();
        (sum, max)
    }
}
