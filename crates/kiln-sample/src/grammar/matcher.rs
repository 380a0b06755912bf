//! Incremental matching and the per-step token mask.
//!
//! The matcher's state is a *configuration*: the set of threads `(NFA state, call stack)`
//! the grammar could be in after the bytes so far, closed under ε moves, calls and returns.
//! Call stacks are hash-consed frames `(return state, parent frame)`, and configurations
//! are interned, so a configuration is a small integer and `transition(config, byte)` is
//! memoised in a dense 256-wide table. Inside a JSON string, say, almost every byte maps
//! the configuration to itself.
//!
//! The mask walks the vocabulary's byte trie depth-first, keeping the configuration reached
//! at each depth; a dead configuration skips the node's whole subtree. With the table
//! warm, a trie node costs one table load. Masks are also cached per configuration (the
//! configuration fully determines the allowed set), so a step that repeats a state — the
//! next character of a long string — costs a copy of the bitset.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::nfa::{Automaton, NONE};
use super::{Grammar, MatchError};
use crate::vocab::{TokenMask, Vocab};

/// The configuration with no thread: nothing can follow.
const DEAD: u32 = 0;
const UNKNOWN: u32 = u32::MAX;
/// The empty call stack.
const BOTTOM: u32 = 0;
/// Threads one closure may create before the grammar is deemed too ambiguous.
const MAX_CLOSURE: usize = 1 << 16;
/// Interned configurations kept before the tables are rebuilt around the current one.
const MAX_CONFIGS: usize = 1 << 15;
/// Masks kept per matcher.
const MASK_CACHE: usize = 8;

#[derive(Clone, Debug, Default)]
struct Tables {
    frames: Vec<(u32, u32)>,
    frame_ids: HashMap<(u32, u32), u32>,
    /// Threads of all configurations, back to back.
    threads: Vec<(u32, u32)>,
    /// `(first thread, thread count, accepting)` per configuration.
    configs: Vec<(u32, u32, bool)>,
    config_ids: HashMap<Vec<u64>, u32>,
    /// `trans[config << 8 | byte]`.
    trans: Vec<u32>,
    work: Vec<(u32, u32)>,
    seen: HashSet<(u32, u32)>,
    kept: Vec<(u32, u32)>,
    key: Vec<u64>,
}

impl Tables {
    fn new() -> Tables {
        let mut t = Tables::default();
        t.frames.push((NONE, NONE));
        t.configs.push((0, 0, false));
        t.trans.extend(std::iter::repeat_n(DEAD, 256));
        t
    }

    fn frame(&mut self, ret: u32, parent: u32) -> u32 {
        let n = self.frames.len() as u32;
        *self.frame_ids.entry((ret, parent)).or_insert_with(|| {
            self.frames.push((ret, parent));
            n
        })
    }

    fn threads_of(&self, c: u32) -> &[(u32, u32)] {
        let (start, len, _) = self.configs[c as usize];
        &self.threads[start as usize..(start + len) as usize]
    }

    fn accepting(&self, c: u32) -> bool {
        self.configs[c as usize].2
    }

    /// Closes `self.work` (the seeds) and interns the result.
    fn close(&mut self, a: &Automaton) -> Result<u32, MatchError> {
        self.seen.clear();
        self.kept.clear();
        let mut accepting = false;
        while let Some((s, f)) = self.work.pop() {
            if !self.seen.insert((s, f)) {
                continue;
            }
            if self.seen.len() > MAX_CLOSURE {
                self.work.clear();
                return Err(MatchError::TooAmbiguous { limit: MAX_CLOSURE });
            }
            if !a.byte_edges(s).is_empty() {
                self.kept.push((s, f));
            }
            for &e in a.eps(s) {
                self.work.push((e, f));
            }
            if let Some((rule, ret)) = a.call(s) {
                let nf = self.frame(ret, f);
                self.work.push((a.rule_start[rule as usize], nf));
            }
            if a.is_end(s) {
                if f == BOTTOM {
                    accepting = true;
                } else {
                    let (ret, parent) = self.frames[f as usize];
                    self.work.push((ret, parent));
                }
            }
        }
        if self.kept.is_empty() && !accepting {
            return Ok(DEAD);
        }
        self.kept.sort_unstable();
        self.key.clear();
        self.key.push(accepting as u64);
        self.key
            .extend(self.kept.iter().map(|&(s, f)| (s as u64) << 32 | f as u64));
        if let Some(&id) = self.config_ids.get(&self.key) {
            return Ok(id);
        }
        let id = self.configs.len() as u32;
        self.configs
            .push((self.threads.len() as u32, self.kept.len() as u32, accepting));
        self.threads.extend_from_slice(&self.kept);
        self.config_ids.insert(self.key.clone(), id);
        self.trans.extend(std::iter::repeat_n(UNKNOWN, 256));
        Ok(id)
    }

    #[inline]
    fn step(&mut self, a: &Automaton, c: u32, b: u8) -> Result<u32, MatchError> {
        let idx = (c as usize) << 8 | b as usize;
        let next = self.trans[idx];
        if next != UNKNOWN {
            return Ok(next);
        }
        self.step_slow(a, c, b)
    }

    #[cold]
    fn step_slow(&mut self, a: &Automaton, c: u32, b: u8) -> Result<u32, MatchError> {
        self.work.clear();
        let (start, len, _) = self.configs[c as usize];
        for k in start..start + len {
            let (s, f) = self.threads[k as usize];
            for e in a.byte_edges(s) {
                if e.lo <= b && b <= e.hi {
                    self.work.push((e.to, f));
                }
            }
        }
        let next = self.close(a)?;
        self.trans[(c as usize) << 8 | b as usize] = next;
        Ok(next)
    }

    fn initial(&mut self, a: &Automaton) -> Result<u32, MatchError> {
        self.work.clear();
        self.work.push((a.rule_start[a.root as usize], BOTTOM));
        self.close(a)
    }

    /// Fresh tables holding only configuration `c` (with its stacks); returns its new id.
    fn rebuilt_around(&self, a: &Automaton, c: u32) -> Result<(Tables, u32), MatchError> {
        let mut t = Tables::new();
        let mut map: HashMap<u32, u32> = HashMap::new();
        map.insert(BOTTOM, BOTTOM);
        let mut threads = Vec::new();
        for &(s, f) in self.threads_of(c) {
            // Copy the stack bottom-up.
            let mut chain = Vec::new();
            let mut g = f;
            while !map.contains_key(&g) {
                chain.push(g);
                g = self.frames[g as usize].1;
            }
            for &g in chain.iter().rev() {
                let (ret, parent) = self.frames[g as usize];
                let np = map[&parent];
                let ng = t.frame(ret, np);
                map.insert(g, ng);
            }
            threads.push((s, map[&f]));
        }
        if threads.is_empty() && !self.accepting(c) {
            return Ok((t, DEAD));
        }
        // Re-intern exactly these threads (they are already closed).
        threads.sort_unstable();
        let accepting = self.accepting(c);
        t.key.clear();
        t.key.push(accepting as u64);
        t.key
            .extend(threads.iter().map(|&(s, f)| (s as u64) << 32 | f as u64));
        let id = t.configs.len() as u32;
        t.configs
            .push((t.threads.len() as u32, threads.len() as u32, accepting));
        t.threads.extend_from_slice(&threads);
        let key = t.key.clone();
        t.config_ids.insert(key, id);
        t.trans.extend(std::iter::repeat_n(UNKNOWN, 256));
        let _ = a;
        Ok((t, id))
    }
}

/// Per-request grammar state: which tokens may come next, and acceptance of the chosen one.
#[derive(Clone, Debug)]
pub struct Matcher {
    grammar: Arc<Grammar>,
    vocab: Arc<Vocab>,
    t: Tables,
    cur: u32,
    finished: bool,
    /// Most recently used last.
    cache: Vec<(u32, TokenMask)>,
    path: Vec<u32>,
}

impl Matcher {
    /// A matcher at the start of `grammar`, masking over `vocab`.
    /// Builds the vocabulary's trie now if it is not built yet (once per `Vocab`).
    pub fn new(grammar: Arc<Grammar>, vocab: Arc<Vocab>) -> Result<Matcher, MatchError> {
        vocab.trie();
        let mut t = Tables::new();
        let cur = t.initial(&grammar.automaton)?;
        Ok(Matcher {
            grammar,
            vocab,
            t,
            cur,
            finished: false,
            cache: Vec::new(),
            path: Vec::new(),
        })
    }

    pub fn grammar(&self) -> &Arc<Grammar> {
        &self.grammar
    }

    pub fn vocab(&self) -> &Arc<Vocab> {
        &self.vocab
    }

    /// The text so far is a complete sentence of the grammar (end-of-generation may come).
    pub fn is_accepting(&self) -> bool {
        !self.finished && self.t.accepting(self.cur)
    }

    /// Some further byte is allowed.
    pub fn can_continue(&self) -> bool {
        !self.finished && !self.t.threads_of(self.cur).is_empty()
    }

    /// An end-of-generation token has been accepted.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    fn maybe_compact(&mut self) -> Result<(), MatchError> {
        if self.t.configs.len() > MAX_CONFIGS {
            let (t, cur) = self.t.rebuilt_around(&self.grammar.automaton, self.cur)?;
            self.t = t;
            self.cur = cur;
            self.cache.clear();
        }
        Ok(())
    }

    /// Advances over raw bytes; on a byte the grammar rejects, returns `false` and leaves
    /// the state unchanged.
    pub fn accept_bytes(&mut self, bytes: &[u8]) -> Result<bool, MatchError> {
        if self.finished {
            return Ok(false);
        }
        self.maybe_compact()?;
        let a = &self.grammar.automaton;
        let mut c = self.cur;
        for &b in bytes {
            c = self.t.step(a, c, b)?;
            if c == DEAD {
                return Ok(false);
            }
        }
        self.cur = c;
        Ok(true)
    }

    /// Advances over token `id` (an end-of-generation token finishes the match).
    pub fn accept_token(&mut self, id: u32) -> Result<(), MatchError> {
        if self.finished {
            return Err(MatchError::Finished);
        }
        if self.vocab.is_eog(id) {
            if self.t.accepting(self.cur) {
                self.finished = true;
                return Ok(());
            }
            return Err(MatchError::TokenRejected { token: id });
        }
        let bytes_ok = {
            let vocab = Arc::clone(&self.vocab);
            let bytes = vocab.token_bytes(id);
            !bytes.is_empty() && self.accept_bytes(bytes)?
        };
        if bytes_ok {
            Ok(())
        } else {
            Err(MatchError::TokenRejected { token: id })
        }
    }

    /// Whether token `id` may come next (the state does not change).
    pub fn allows_token(&mut self, id: u32) -> Result<bool, MatchError> {
        if self.finished {
            return Ok(false);
        }
        if self.vocab.is_eog(id) {
            return Ok(self.t.accepting(self.cur));
        }
        let vocab = Arc::clone(&self.vocab);
        let bytes = vocab.token_bytes(id);
        if bytes.is_empty() {
            return Ok(false);
        }
        let a = &self.grammar.automaton;
        let mut c = self.cur;
        for &b in bytes {
            c = self.t.step(a, c, b)?;
            if c == DEAD {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Fills `out` with the tokens allowed next: those whose bytes keep the match alive,
    /// plus the end-of-generation tokens when the text so far is complete.
    pub fn fill_mask(&mut self, out: &mut TokenMask) -> Result<(), MatchError> {
        if self.finished {
            out.clear(self.vocab.len());
            return Ok(());
        }
        self.maybe_compact()?;
        if let Some(i) = self.cache.iter().position(|(c, _)| *c == self.cur) {
            let entry = self.cache.remove(i);
            out.copy_from(&entry.1);
            self.cache.push(entry);
            return Ok(());
        }
        self.walk(out)?;
        let mut slot = if self.cache.len() >= MASK_CACHE {
            self.cache.remove(0)
        } else {
            (0, TokenMask::default())
        };
        slot.0 = self.cur;
        slot.1.copy_from(out);
        self.cache.push(slot);
        Ok(())
    }

    /// [`Matcher::fill_mask`] without its per-state cache: always walks the trie (for
    /// benchmarks and tests).
    pub fn fill_mask_uncached(&mut self, out: &mut TokenMask) -> Result<(), MatchError> {
        if self.finished {
            out.clear(self.vocab.len());
            return Ok(());
        }
        self.maybe_compact()?;
        self.walk(out)
    }

    /// The trie walk.
    fn walk(&mut self, out: &mut TokenMask) -> Result<(), MatchError> {
        let vocab = Arc::clone(&self.vocab);
        let grammar = Arc::clone(&self.grammar);
        let a = &grammar.automaton;
        let trie = vocab.trie();
        out.clear(vocab.len());
        if self.t.accepting(self.cur) {
            for &id in vocab.eog_ids() {
                out.insert(id);
            }
        }
        let nodes = &trie.nodes;
        self.path.clear();
        self.path.resize(trie.max_depth + 1, DEAD);
        self.path[0] = self.cur;
        let path = &mut self.path;
        let t = &mut self.t;
        let mut i = 0usize;
        while let Some(node) = nodes.get(i) {
            let depth = node.depth as usize;
            let parent = path[depth - 1];
            let next = t.step(a, parent, node.byte)?;
            if next == DEAD {
                i = node.skip as usize;
                continue;
            }
            path[depth] = next;
            trie.for_tokens(node, |id| out.insert(id));
            i += 1;
        }
        Ok(())
    }

    /// Interned configurations so far (a measure of how much of the grammar was explored).
    pub fn num_configurations(&self) -> usize {
        self.t.configs.len()
    }
}

impl Grammar {
    /// Whether `text` is a complete sentence of the grammar.
    pub fn matches(&self, text: &[u8]) -> bool {
        let mut t = Tables::new();
        let a = &self.automaton;
        let Ok(mut c) = t.initial(a) else {
            return false;
        };
        for &b in text {
            match t.step(a, c, b) {
                Ok(DEAD) | Err(_) => return false,
                Ok(n) => c = n,
            }
        }
        t.accepting(c)
    }
}
