//! The chain's stages, each a small type with an `apply` over the candidate list. They
//! follow llama.cpp's samplers of the same names; none allocates once its scratch is warm.

use crate::candidates::{Cand, Candidates, desc};
use crate::history::History;

/// Adds a bias to chosen ids; `-inf` bans (removes) the token.
#[derive(Clone, Debug, Default)]
pub(crate) struct LogitBias {
    pub biases: Vec<(u32, f32)>,
}

impl LogitBias {
    pub fn apply(&self, c: &mut Candidates) {
        let mut banned = false;
        for &(id, b) in &self.biases {
            if let Some(i) = c.position(id) {
                c.c[i].logit += b;
                banned |= c.c[i].logit == f32::NEG_INFINITY;
            }
        }
        if banned {
            let sorted = c.sorted;
            c.c.retain(|x| x.logit != f32::NEG_INFINITY);
            c.reshaped(sorted);
        }
    }
}

/// Repetition (divide positive / multiply negative logits), frequency (`− count × f`) and
/// presence (`− p`) penalties for the tokens among the last `last_n`.
#[derive(Clone, Debug, Default)]
pub(crate) struct Penalties {
    pub last_n: usize,
    pub repeat: f32,
    pub frequency: f32,
    pub presence: f32,
    scratch: Vec<u32>,
}

impl Penalties {
    pub fn new(last_n: usize, repeat: f32, frequency: f32, presence: f32) -> Penalties {
        Penalties {
            last_n,
            repeat,
            frequency,
            presence,
            scratch: Vec::with_capacity(last_n),
        }
    }

    pub fn apply(&mut self, c: &mut Candidates, h: &History) {
        if self.last_n == 0 || (self.repeat == 1.0 && self.frequency == 0.0 && self.presence == 0.0)
        {
            return;
        }
        self.scratch.clear();
        self.scratch.extend(h.last(self.last_n));
        self.scratch.sort_unstable();
        let mut i = 0;
        while i < self.scratch.len() {
            let id = self.scratch[i];
            let mut count = 0;
            while i < self.scratch.len() && self.scratch[i] == id {
                count += 1;
                i += 1;
            }
            if let Some(p) = c.position(id) {
                let l = &mut c.c[p].logit;
                *l = if *l <= 0.0 {
                    *l * self.repeat
                } else {
                    *l / self.repeat
                };
                *l -= count as f32 * self.frequency + self.presence;
            }
        }
        c.sorted = false;
    }
}

/// Keep the `k` best (`0` disables).
#[derive(Clone, Copy, Debug)]
pub(crate) struct TopK {
    pub k: usize,
}

impl TopK {
    pub fn apply(self, c: &mut Candidates) {
        if self.k == 0 || self.k >= c.len() {
            return;
        }
        c.sort_prefix(self.k);
        c.truncate(self.k);
    }
}

/// Keep the smallest best-first prefix whose probability reaches `p` (`≥ 1` disables).
#[derive(Clone, Copy, Debug)]
pub(crate) struct TopP {
    pub p: f32,
}

impl TopP {
    pub fn apply(self, c: &mut Candidates) {
        if self.p >= 1.0 || c.len() <= 1 {
            return;
        }
        let (sum, max) = c.partition();
        let target = self.p as f64 * sum;
        // Most of the mass is usually in a few hundred tokens: sort those first.
        let mut k = c.len().min(256);
        loop {
            c.sort_prefix(k);
            let mut cum = 0.0f64;
            for (i, x) in c.c[..k].iter().enumerate() {
                cum += ((x.logit - max) as f64).exp();
                if cum >= target {
                    c.truncate(i + 1);
                    return;
                }
            }
            if k == c.len() {
                return;
            }
            k = c.len();
        }
    }
}

/// Drop tokens with `p < min_p · p_max` (`0` disables).
#[derive(Clone, Copy, Debug)]
pub(crate) struct MinP {
    pub p: f32,
}

impl MinP {
    pub fn apply(self, c: &mut Candidates) {
        if self.p <= 0.0 || c.len() <= 1 {
            return;
        }
        let threshold = c.max_logit() + self.p.ln();
        let sorted = c.sorted;
        let before = c.len();
        c.c.retain(|x| x.logit >= threshold);
        if c.len() != before {
            c.reshaped(sorted);
        }
    }
}

/// Locally typical sampling: order by `|−ln p − H|` and keep up to mass `p` (`≥ 1`
/// disables).
#[derive(Clone, Debug)]
pub(crate) struct TypicalP {
    pub p: f32,
    scored: Vec<(f32, u32)>,
    tmp: Vec<Cand>,
}

impl TypicalP {
    pub fn new(p: f32) -> TypicalP {
        TypicalP {
            p,
            scored: Vec::new(),
            tmp: Vec::new(),
        }
    }

    pub fn apply(&mut self, c: &mut Candidates) {
        if self.p >= 1.0 || c.len() <= 1 {
            return;
        }
        c.sort();
        let (sum, max) = c.partition();
        let prob = |x: &Cand| (((x.logit - max) as f64).exp() / sum) as f32;
        let mut entropy = 0.0f32;
        for x in &c.c {
            let p = prob(x);
            if p > 0.0 {
                entropy -= p * p.ln();
            }
        }
        self.scored.clear();
        self.scored.extend(c.c.iter().enumerate().map(|(i, x)| {
            let p = prob(x);
            let surprise = if p > 0.0 { -p.ln() } else { f32::INFINITY };
            ((surprise - entropy).abs(), i as u32)
        }));
        // Stable on ties: the logit order decides.
        self.scored
            .sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let mut cum = 0.0f32;
        let mut keep = self.scored.len();
        for (i, &(_, idx)) in self.scored.iter().enumerate() {
            cum += prob(&c.c[idx as usize]);
            if cum > self.p {
                keep = i + 1;
                break;
            }
        }
        self.tmp.clear();
        self.tmp
            .extend(self.scored[..keep].iter().map(|&(_, i)| c.c[i as usize]));
        std::mem::swap(&mut c.c, &mut self.tmp);
        c.reshaped(false);
    }
}

/// Divide the logits by `t`; `t ≤ 0` keeps only the best token.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Temperature {
    pub t: f32,
}

impl Temperature {
    pub fn apply(self, c: &mut Candidates) {
        if self.t <= 0.0 {
            if let Some(best) = c.c.iter().copied().min_by(desc) {
                c.c.clear();
                c.c.push(best);
                c.reshaped(true);
            }
            return;
        }
        let inv = 1.0 / self.t;
        for x in c.c.iter_mut() {
            x.logit *= inv;
        }
    }
}
