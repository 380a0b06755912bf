//! Compiles the rules to a recursive transition network over bytes: one Thompson NFA per
//! rule whose edges read a byte range, move without input (ε), or call another rule and
//! continue at a return state. Character classes become UTF-8 byte sequences, so the
//! matcher only ever sees bytes (a token may end in the middle of a character).
//!
//! Compilation is bounded by [`CompileLimits`]: states, repetition counts and wall time.
//! The checks that make matching sound run here too: every rule is defined, every rule
//! reachable from the root can derive a finite string, and no rule can reach itself without
//! reading a byte (left recursion would make the matcher's closure infinite).

use std::time::Instant;

use regex_syntax::utf8::Utf8Sequences;

use super::ir::{Expr, Ir};
use super::{CompileLimits, GrammarError};

pub(crate) const NONE: u32 = u32::MAX;

#[derive(Clone, Copy, Debug)]
pub(crate) struct ByteEdge {
    pub lo: u8,
    pub hi: u8,
    pub to: u32,
}

/// The compiled network. States are numbered globally; each belongs to one rule.
#[derive(Debug)]
pub(crate) struct Automaton {
    byte_off: Vec<u32>,
    bytes: Vec<ByteEdge>,
    eps_off: Vec<u32>,
    eps: Vec<u32>,
    /// `(rule, return state)` or `(NONE, NONE)`.
    call: Vec<(u32, u32)>,
    /// The rule whose end this state is, or `NONE`.
    end_of: Vec<u32>,
    pub rule_start: Vec<u32>,
    pub rule_names: Vec<String>,
    pub root: u32,
}

impl Automaton {
    #[inline]
    pub fn byte_edges(&self, s: u32) -> &[ByteEdge] {
        let s = s as usize;
        &self.bytes[self.byte_off[s] as usize..self.byte_off[s + 1] as usize]
    }

    #[inline]
    pub fn eps(&self, s: u32) -> &[u32] {
        let s = s as usize;
        &self.eps[self.eps_off[s] as usize..self.eps_off[s + 1] as usize]
    }

    #[inline]
    pub fn call(&self, s: u32) -> Option<(u32, u32)> {
        let c = self.call[s as usize];
        (c.0 != NONE).then_some(c)
    }

    #[inline]
    pub fn is_end(&self, s: u32) -> bool {
        self.end_of[s as usize] != NONE
    }

    pub fn num_states(&self) -> usize {
        self.call.len()
    }
}

struct Builder<'a> {
    limits: &'a CompileLimits,
    start: Instant,
    n: u32,
    bytes: Vec<(u32, ByteEdge)>,
    eps: Vec<(u32, u32)>,
    calls: Vec<(u32, u32, u32)>,
}

impl Builder<'_> {
    fn state(&mut self) -> Result<u32, GrammarError> {
        if self.n as usize >= self.limits.max_states {
            return Err(GrammarError::TooLarge {
                what: "automaton states",
                limit: self.limits.max_states,
            });
        }
        if self.n.is_multiple_of(1024) {
            self.check_time()?;
        }
        self.n += 1;
        Ok(self.n - 1)
    }

    fn check_time(&self) -> Result<(), GrammarError> {
        let elapsed = self.start.elapsed();
        if elapsed > self.limits.max_time {
            return Err(GrammarError::Timeout {
                limit_ms: self.limits.max_time.as_millis() as u64,
            });
        }
        Ok(())
    }

    fn byte(&mut self, from: u32, lo: u8, hi: u8, to: u32) {
        self.bytes.push((from, ByteEdge { lo, hi, to }));
    }

    /// Adds `e`'s fragment starting at `from`; returns its end state.
    fn build(&mut self, e: &Expr, from: u32) -> Result<u32, GrammarError> {
        match e {
            Expr::Empty => Ok(from),
            Expr::Literal(bytes) => {
                let mut cur = from;
                for &b in bytes {
                    let next = self.state()?;
                    self.byte(cur, b, b, next);
                    cur = next;
                }
                Ok(cur)
            }
            Expr::Class { ranges, negated } => {
                let to = self.state()?;
                for (lo, hi) in scalar_ranges(ranges, *negated) {
                    for seq in Utf8Sequences::new(lo, hi) {
                        let seq = seq.as_slice();
                        let mut cur = from;
                        for (i, r) in seq.iter().enumerate() {
                            let next = if i + 1 == seq.len() {
                                to
                            } else {
                                self.state()?
                            };
                            self.byte(cur, r.start, r.end, next);
                            cur = next;
                        }
                    }
                }
                Ok(to)
            }
            Expr::Rule(r) => {
                let at = self.state()?;
                let ret = self.state()?;
                self.eps.push((from, at));
                self.calls.push((at, *r, ret));
                Ok(ret)
            }
            Expr::Seq(items) => {
                let mut cur = from;
                for item in items {
                    cur = self.build(item, cur)?;
                }
                Ok(cur)
            }
            Expr::Alt(alts) => {
                let to = self.state()?;
                for alt in alts {
                    let s = self.state()?;
                    self.eps.push((from, s));
                    let end = self.build(alt, s)?;
                    self.eps.push((end, to));
                }
                Ok(to)
            }
            Expr::Repeat { expr, min, max } => {
                let limit = self.limits.max_repeat;
                if *min > limit || max.is_some_and(|m| m > limit) {
                    return Err(GrammarError::TooLarge {
                        what: "repetition count",
                        limit: limit as usize,
                    });
                }
                if max.is_some_and(|m| m < *min) {
                    return Err(GrammarError::BadRepetition {
                        min: *min,
                        max: max.unwrap_or(0),
                    });
                }
                let mut cur = from;
                for _ in 0..*min {
                    cur = self.build(expr, cur)?;
                }
                match max {
                    None => {
                        let l = self.state()?;
                        self.eps.push((cur, l));
                        let body = self.state()?;
                        self.eps.push((l, body));
                        let end = self.build(expr, body)?;
                        self.eps.push((end, l));
                        Ok(l)
                    }
                    Some(max) => {
                        let to = self.state()?;
                        self.eps.push((cur, to));
                        for _ in *min..*max {
                            cur = self.build(expr, cur)?;
                            self.eps.push((cur, to));
                        }
                        Ok(to)
                    }
                }
            }
        }
    }
}

/// Normalised inclusive scalar-value ranges (complemented when `negated`), as `char`s:
/// surrogates are cut out.
fn scalar_ranges(ranges: &[(u32, u32)], negated: bool) -> Vec<(char, char)> {
    let mut rs: Vec<(u32, u32)> = ranges
        .iter()
        .filter(|r| r.0 <= r.1)
        .map(|&(a, b)| (a, b.min(0x10FFFF)))
        .filter(|r| r.0 <= r.1)
        .collect();
    rs.sort_unstable();
    let mut merged: Vec<(u32, u32)> = Vec::with_capacity(rs.len());
    for r in rs {
        match merged.last_mut() {
            Some(last) if r.0 <= last.1.saturating_add(1) => last.1 = last.1.max(r.1),
            _ => merged.push(r),
        }
    }
    if negated {
        let mut comp = Vec::with_capacity(merged.len() + 1);
        let mut next = 0u32;
        for (a, b) in merged {
            if a > next {
                comp.push((next, a - 1));
            }
            next = b + 1;
        }
        if next <= 0x10FFFF {
            comp.push((next, 0x10FFFF));
        }
        merged = comp;
    }
    let mut out = Vec::with_capacity(merged.len() + 1);
    for (a, b) in merged {
        // Split around the surrogate block, which no `char` can hold.
        for (lo, hi) in [(a, b.min(0xD7FF)), (a.max(0xE000), b)] {
            if lo <= hi
                && let (Some(lo), Some(hi)) = (char::from_u32(lo), char::from_u32(hi))
            {
                out.push((lo, hi));
            }
        }
    }
    out
}

/// Compiles `ir` and checks it can be matched soundly.
pub(crate) fn compile(ir: &Ir, limits: &CompileLimits) -> Result<Automaton, GrammarError> {
    ir.check_defined()?;
    let mut b = Builder {
        limits,
        start: Instant::now(),
        n: 0,
        bytes: Vec::new(),
        eps: Vec::new(),
        calls: Vec::new(),
    };
    let n_rules = ir.names.len();
    let mut rule_start = Vec::with_capacity(n_rules);
    let mut rule_end = Vec::with_capacity(n_rules);
    for body in &ir.bodies {
        let start = b.state()?;
        let end = match body {
            Some(e) => b.build(e, start)?,
            None => start,
        };
        rule_start.push(start);
        rule_end.push(end);
    }
    b.check_time()?;
    let n = b.n as usize;
    let (byte_off, bytes) = csr(n, b.bytes);
    let (eps_off, eps) = csr(n, b.eps);
    let mut call = vec![(NONE, NONE); n];
    for (at, rule, ret) in b.calls {
        call[at as usize] = (rule, ret);
    }
    let mut end_of = vec![NONE; n];
    for (r, &e) in rule_end.iter().enumerate() {
        end_of[e as usize] = r as u32;
    }
    let a = Automaton {
        byte_off,
        bytes,
        eps_off,
        eps,
        call,
        end_of,
        rule_start,
        rule_names: ir.names.clone(),
        root: ir.root,
    };
    check(&a, &rule_end, limits, b.start)?;
    Ok(a)
}

/// Groups `(from, item)` pairs by `from` (a stable counting sort).
fn csr<T: Copy>(n: usize, mut items: Vec<(u32, T)>) -> (Vec<u32>, Vec<T>) {
    items.sort_by_key(|x| x.0);
    let mut off = vec![0u32; n + 1];
    for &(from, _) in &items {
        off[from as usize + 1] += 1;
    }
    for i in 0..n {
        off[i + 1] += off[i];
    }
    (off, items.into_iter().map(|x| x.1).collect())
}

/// States reachable from `start` within its rule by ε, by calls to rules in `pass` (whose
/// return state is then reached), and, when `bytes`, by byte edges. Calls seen are
/// reported to `on_call`.
fn walk(
    a: &Automaton,
    start: u32,
    pass: &[bool],
    bytes: bool,
    seen: &mut [bool],
    stack: &mut Vec<u32>,
    mut on_call: impl FnMut(u32),
) -> Vec<u32> {
    let mut visited = Vec::new();
    stack.clear();
    stack.push(start);
    while let Some(s) = stack.pop() {
        if std::mem::replace(&mut seen[s as usize], true) {
            continue;
        }
        visited.push(s);
        stack.extend_from_slice(a.eps(s));
        if bytes {
            stack.extend(a.byte_edges(s).iter().map(|e| e.to));
        }
        if let Some((r, ret)) = a.call(s) {
            on_call(r);
            if pass[r as usize] {
                stack.push(ret);
            }
        }
    }
    for &s in &visited {
        seen[s as usize] = false;
    }
    visited
}

fn check(
    a: &Automaton,
    rule_end: &[u32],
    limits: &CompileLimits,
    t0: Instant,
) -> Result<(), GrammarError> {
    let n_rules = a.rule_start.len();
    let mut seen = vec![false; a.num_states()];
    let mut stack = Vec::new();
    let timeout = || GrammarError::Timeout {
        limit_ms: limits.max_time.as_millis() as u64,
    };

    // Rules reachable from the root.
    let mut reachable = vec![false; n_rules];
    let mut todo = vec![a.root];
    reachable[a.root as usize] = true;
    let all = vec![true; n_rules];
    while let Some(r) = todo.pop() {
        let mut called = Vec::new();
        walk(
            a,
            a.rule_start[r as usize],
            &all,
            true,
            &mut seen,
            &mut stack,
            |c| called.push(c),
        );
        for c in called {
            if !std::mem::replace(&mut reachable[c as usize], true) {
                todo.push(c);
            }
        }
    }

    // Fixpoints: nullable (derives ""), productive (derives some finite string).
    let fixpoint = |bytes: bool,
                    seen: &mut Vec<bool>,
                    stack: &mut Vec<u32>|
     -> Result<Vec<bool>, GrammarError> {
        let mut yes = vec![false; n_rules];
        loop {
            if t0.elapsed() > limits.max_time {
                return Err(timeout());
            }
            let mut changed = false;
            for r in 0..n_rules {
                if yes[r] {
                    continue;
                }
                let v = walk(a, a.rule_start[r], &yes, bytes, seen, stack, |_| {});
                if v.contains(&rule_end[r]) {
                    yes[r] = true;
                    changed = true;
                }
            }
            if !changed {
                return Ok(yes);
            }
        }
    };
    let nullable = fixpoint(false, &mut seen, &mut stack)?;
    let productive = fixpoint(true, &mut seen, &mut stack)?;
    if let Some(r) = (0..n_rules).find(|&r| reachable[r] && !productive[r]) {
        return Err(GrammarError::UnproductiveRule {
            rule: a.rule_names[r].clone(),
        });
    }

    // Left recursion: a cycle among "r can call r2 before reading a byte".
    let mut left: Vec<Vec<u32>> = vec![Vec::new(); n_rules];
    for (r, out) in left.iter_mut().enumerate() {
        if reachable[r] {
            walk(
                a,
                a.rule_start[r],
                &nullable,
                false,
                &mut seen,
                &mut stack,
                |c| out.push(c),
            );
        }
    }
    // Iterative three-colour DFS.
    let mut colour = vec![0u8; n_rules];
    for r0 in 0..n_rules {
        if colour[r0] != 0 || !reachable[r0] {
            continue;
        }
        let mut path: Vec<(usize, usize)> = vec![(r0, 0)];
        colour[r0] = 1;
        while let Some(&mut (r, ref mut i)) = path.last_mut() {
            if let Some(&c) = left[r].get(*i) {
                *i += 1;
                let c = c as usize;
                match colour[c] {
                    0 => {
                        colour[c] = 1;
                        path.push((c, 0));
                    }
                    1 => {
                        return Err(GrammarError::LeftRecursion {
                            rule: a.rule_names[c].clone(),
                        });
                    }
                    _ => {}
                }
            } else {
                colour[r] = 2;
                path.pop();
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negated_classes_skip_surrogates_and_cover_the_rest() {
        let r = scalar_ranges(&[(0x22, 0x22), (0x5C, 0x5C), (0, 0x1F)], true);
        assert_eq!(r[0], (' ', '!'));
        assert!(r.iter().all(|&(a, b)| a <= b));
        assert!(r.contains(&('\u{E000}', '\u{10FFFF}')));
        assert!(r.iter().any(|&(_, b)| b == '\u{D7FF}'));
    }
}
