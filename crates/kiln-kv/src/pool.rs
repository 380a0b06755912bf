//! The block pool: reference counts, the free list, and the least-recently-used queue of
//! cached blocks no sequence holds. A block is in exactly one of three states:
//!
//! - **used**: `refs > 0` (held by one or more sequences; may also be cached);
//! - **idle cached**: `refs == 0`, registered in the prefix index, in the LRU queue;
//! - **free**: `refs == 0`, not registered, on the free stack.
//!
//! Allocation takes a free block first and evicts the least recently released idle cached
//! block only when none is free.

pub(crate) const NONE: u32 = u32::MAX;

pub(crate) struct Pool {
    pub(crate) refs: Vec<u32>,
    /// Free blocks; popped from the end, so the lowest ids are used first.
    free: Vec<u32>,
    lru_prev: Vec<u32>,
    lru_next: Vec<u32>,
    in_lru: Vec<bool>,
    lru_head: u32,
    lru_tail: u32,
    lru_len: usize,
    /// The prefix key a block is registered under.
    pub(crate) key: Vec<Option<u64>>,
    /// The block (and its generation) this block's KV was computed after, when registered.
    pub(crate) parent: Vec<(u32, u64)>,
    /// Changes whenever a block gets new content, so a stale parent link cannot match.
    pub(crate) generation: Vec<u64>,
    next_gen: u64,
    /// The token id of every slot.
    pub(crate) tokens: Vec<u32>,
    bs: usize,
}

impl Pool {
    pub(crate) fn new(n: usize, bs: usize) -> Pool {
        Pool {
            refs: vec![0; n],
            free: (0..n as u32).rev().collect(),
            lru_prev: vec![NONE; n],
            lru_next: vec![NONE; n],
            in_lru: vec![false; n],
            lru_head: NONE,
            lru_tail: NONE,
            lru_len: 0,
            key: vec![None; n],
            parent: vec![(NONE, 0); n],
            generation: vec![0; n],
            next_gen: 1,
            tokens: vec![0; n * bs],
            bs,
        }
    }

    pub(crate) fn n_blocks(&self) -> usize {
        self.refs.len()
    }

    /// Blocks an allocation can get: free ones plus evictable cached ones.
    pub(crate) fn available(&self) -> usize {
        self.free.len() + self.lru_len
    }

    pub(crate) fn free_len(&self) -> usize {
        self.free.len()
    }

    pub(crate) fn idle_cached_len(&self) -> usize {
        self.lru_len
    }

    /// Takes a block (reference count 1, fresh generation). Returns it and, if an idle cached
    /// block had to be evicted, the key it was registered under (the caller drops it from
    /// the prefix index).
    pub(crate) fn take(&mut self) -> Option<(u32, Option<u64>)> {
        let (b, evicted) = if let Some(b) = self.free.pop() {
            (b, None)
        } else if self.lru_head != NONE {
            let b = self.lru_head;
            self.unlink(b);
            (b, self.key[b as usize].take())
        } else {
            return None;
        };
        let i = b as usize;
        self.refs[i] = 1;
        self.generation[i] = self.next_gen;
        self.next_gen += 1;
        self.parent[i] = (NONE, 0);
        Some((b, evicted))
    }

    /// One more holder of `b` (an idle cached block leaves the LRU queue).
    pub(crate) fn retain(&mut self, b: u32) {
        let i = b as usize;
        if self.refs[i] == 0 && self.in_lru[i] {
            self.unlink(b);
        }
        self.refs[i] += 1;
    }

    /// One holder fewer; at zero the block becomes idle cached (if registered) or free.
    pub(crate) fn release(&mut self, b: u32) {
        let i = b as usize;
        debug_assert!(self.refs[i] > 0, "release of an unheld block {b}");
        self.refs[i] -= 1;
        if self.refs[i] == 0 {
            if self.key[i].is_some() {
                self.push_back(b);
            } else {
                self.free.push(b);
            }
        }
    }

    pub(crate) fn block_tokens(&self, b: u32) -> &[u32] {
        &self.tokens[b as usize * self.bs..(b as usize + 1) * self.bs]
    }

    pub(crate) fn block_tokens_mut(&mut self, b: u32) -> &mut [u32] {
        &mut self.tokens[b as usize * self.bs..(b as usize + 1) * self.bs]
    }

    fn unlink(&mut self, b: u32) {
        let i = b as usize;
        let (p, n) = (self.lru_prev[i], self.lru_next[i]);
        if p == NONE {
            self.lru_head = n;
        } else {
            self.lru_next[p as usize] = n;
        }
        if n == NONE {
            self.lru_tail = p;
        } else {
            self.lru_prev[n as usize] = p;
        }
        self.lru_prev[i] = NONE;
        self.lru_next[i] = NONE;
        self.in_lru[i] = false;
        self.lru_len -= 1;
    }

    fn push_back(&mut self, b: u32) {
        let i = b as usize;
        self.lru_prev[i] = self.lru_tail;
        self.lru_next[i] = NONE;
        if self.lru_tail == NONE {
            self.lru_head = b;
        } else {
            self.lru_next[self.lru_tail as usize] = b;
        }
        self.lru_tail = b;
        self.in_lru[i] = true;
        self.lru_len += 1;
    }

    /// The idle cached blocks, least recently released first.
    pub(crate) fn lru_order(&self) -> Vec<u32> {
        let mut v = Vec::with_capacity(self.lru_len);
        let mut b = self.lru_head;
        while b != NONE {
            v.push(b);
            b = self.lru_next[b as usize];
        }
        v
    }

    /// Moves block `from`'s state to the unused block `to` (compaction). The caller copies
    /// the data and fixes every table that names `from`.
    pub(crate) fn move_block(&mut self, from: u32, to: u32) {
        let (f, t) = (from as usize, to as usize);
        self.refs[t] = self.refs[f];
        self.refs[f] = 0;
        self.key[t] = self.key[f].take();
        self.parent[t] = self.parent[f];
        self.parent[f] = (NONE, 0);
        self.generation[t] = self.generation[f];
        self.generation[f] = self.next_gen;
        self.next_gen += 1;
        let bs = self.bs;
        self.tokens.copy_within(f * bs..(f + 1) * bs, t * bs);
    }

    /// Rebuilds the free stack and the LRU queue after compaction: `lru` in order (already
    /// renumbered), every other block without holders free.
    pub(crate) fn rebuild_lists(&mut self, lru: &[u32], remap: &[u32]) {
        for p in self.parent.iter_mut() {
            if p.0 != NONE {
                p.0 = remap[p.0 as usize];
            }
        }
        self.lru_prev.fill(NONE);
        self.lru_next.fill(NONE);
        self.in_lru.fill(false);
        self.lru_head = NONE;
        self.lru_tail = NONE;
        self.lru_len = 0;
        for &b in lru {
            self.push_back(b);
        }
        self.free.clear();
        for b in (0..self.n_blocks() as u32).rev() {
            if self.refs[b as usize] == 0 && self.key[b as usize].is_none() {
                self.free.push(b);
            }
        }
    }
}
