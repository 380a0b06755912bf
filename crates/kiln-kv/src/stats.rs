//! Statistics (occupancy, sharing, waste, fragmentation, prefix cache) and compaction.

use crate::KvCache;
use crate::pool::NONE;
use crate::prefix::PrefixStats;

/// A snapshot of the cache's occupancy and counters.
#[derive(Clone, Debug, PartialEq)]
pub struct KvStats {
    pub n_blocks: usize,
    pub block_size: usize,
    /// Bytes of one block (all layers, K and V).
    pub block_bytes: usize,
    /// Blocks held by at least one sequence.
    pub used_blocks: usize,
    /// Blocks held by more than one sequence.
    pub shared_blocks: usize,
    /// Cached blocks no sequence holds (reusable by a prefix hit, evictable).
    pub idle_cached_blocks: usize,
    /// Blocks neither held nor cached.
    pub free_blocks: usize,
    /// Blocks registered in the prefix index (held or idle).
    pub cached_blocks: usize,
    pub active_sequences: usize,
    /// Positions over all sequences (a shared position counts once per sequence).
    pub tokens: usize,
    /// Token slots of used blocks that hold a position of some sequence.
    pub slots_used: usize,
    /// Token slots of used blocks (`used_blocks · block_size`).
    pub slots_allocated: usize,
    pub forks: u64,
    /// Copy-on-write copies made.
    pub cow_copies: u64,
    pub compactions: u64,
    pub prefix: PrefixStats,
}

impl KvStats {
    /// Allocated but unused slots over allocated slots (0 when nothing is allocated).
    pub fn waste(&self) -> f64 {
        if self.slots_allocated == 0 {
            0.0
        } else {
            (self.slots_allocated - self.slots_used) as f64 / self.slots_allocated as f64
        }
    }

    /// Bytes of blocks held by sequences.
    pub fn used_bytes(&self) -> usize {
        self.used_blocks * self.block_bytes
    }
}

/// How scattered the free blocks are in the pool (block ids are arena offsets). Free means
/// neither held by a sequence nor cached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fragmentation {
    pub free_blocks: usize,
    /// Maximal runs of free blocks with a held or cached block after them: the gaps
    /// compaction closes.
    pub holes: usize,
    /// The longest run of consecutive free blocks.
    pub largest_free_region: usize,
    /// Allocated but unused token slots (the partly filled last blocks, reservations).
    pub wasted_slots: usize,
}

impl KvCache {
    /// Occupancy and counters.
    pub fn stats(&self) -> KvStats {
        let bs = self.cfg.block_size;
        let n = self.pool.n_blocks();
        // Filled slots per block: the most any holder uses of it.
        let mut fill = self.fill.lock().unwrap_or_else(|e| e.into_inner());
        fill.clear();
        fill.resize(n, 0);
        let mut tokens = 0;
        let mut active = 0;
        for s in self.seqs.iter().flatten() {
            active += 1;
            tokens += s.len;
            for (i, &b) in s.blocks.iter().enumerate() {
                let f = s.len.saturating_sub(i * bs).min(bs) as u16;
                fill[b as usize] = fill[b as usize].max(f);
            }
        }
        let used_blocks = self.pool.refs.iter().filter(|&&r| r > 0).count();
        KvStats {
            n_blocks: n,
            block_size: bs,
            block_bytes: self.cfg.block_bytes(),
            used_blocks,
            shared_blocks: self.pool.refs.iter().filter(|&&r| r > 1).count(),
            idle_cached_blocks: self.pool.idle_cached_len(),
            free_blocks: self.pool.free_len(),
            cached_blocks: self.prefix.len(),
            active_sequences: active,
            tokens,
            slots_used: fill.iter().map(|&f| f as usize).sum(),
            slots_allocated: used_blocks * bs,
            forks: self.forks,
            cow_copies: self.cow_copies,
            compactions: self.compactions,
            prefix: self.prefix.stats,
        }
    }

    /// Where the unused blocks are.
    pub fn fragmentation(&self) -> Fragmentation {
        let st = self.stats();
        let (mut holes, mut largest, mut run) = (0, 0, 0);
        for b in 0..st.n_blocks {
            if self.pool.refs[b] == 0 && self.pool.key[b].is_none() {
                run += 1;
                largest = largest.max(run);
            } else {
                if run > 0 {
                    holes += 1;
                }
                run = 0;
            }
        }
        Fragmentation {
            free_blocks: st.free_blocks,
            holes,
            largest_free_region: largest,
            wasted_slots: st.slots_allocated - st.slots_used,
        }
    }

    /// Moves every held or cached block to the lowest block ids, so the unused ones form one
    /// region at the end (no holes). Data, block tables, the prefix index and the LRU order
    /// follow their blocks. Returns how many blocks moved.
    pub fn compact(&mut self) -> usize {
        let n = self.pool.n_blocks();
        let live = |c: &KvCache, b: usize| c.pool.refs[b] > 0 || c.pool.key[b].is_some();
        let mut remap: Vec<u32> = (0..n as u32).collect();
        let lru_before = self.pool.lru_order();
        let (ks, vs) = (self.cfg.k_block_stride() / 8, self.cfg.v_block_stride() / 8);
        let mut moved = 0;
        let (mut lo, mut hi) = (0usize, n);
        loop {
            while lo < hi && live(self, lo) {
                lo += 1;
            }
            while hi > lo && !live(self, hi - 1) {
                hi -= 1;
            }
            // Here `lo` is unused and `hi - 1` is live, so `lo < hi - 1`.
            if lo >= hi {
                break;
            }
            let from = hi - 1;
            for arena in self.k.iter_mut() {
                arena.copy_within(from * ks..(from + 1) * ks, lo * ks);
            }
            for arena in self.v.iter_mut() {
                arena.copy_within(from * vs..(from + 1) * vs, lo * vs);
            }
            self.pool.move_block(from as u32, lo as u32);
            remap[from] = lo as u32;
            moved += 1;
            hi -= 1;
            lo += 1;
        }
        for s in self.seqs.iter_mut().flatten() {
            for b in s.blocks.iter_mut() {
                *b = remap[*b as usize];
            }
        }
        self.prefix.remap(&remap);
        let lru: Vec<u32> = lru_before.iter().map(|&b| remap[b as usize]).collect();
        self.pool.rebuild_lists(&lru, &remap);
        debug_assert!(
            self.pool
                .parent
                .iter()
                .all(|p| p.0 == NONE || (p.0 as usize) < n)
        );
        self.compactions += 1;
        moved
    }
}
