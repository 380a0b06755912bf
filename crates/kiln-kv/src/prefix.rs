//! The prefix index: full blocks addressed by content. A block's key hashes its parent's
//! key (or a per-cache salt for the first block) with its own token ids, as vLLM's
//! automatic prefix caching does. A key only *finds* a candidate: a hit also needs the
//! block's stored token ids to equal the query's and its recorded parent to be the block
//! matched just before (same id, same generation), so a hash collision can never serve
//! another prompt's KV.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{DefaultHasher, Hash, Hasher};

/// Counters of the prefix cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrefixStats {
    /// Lookups made when a sequence started ([`crate::KvCache::attach_prefix`]).
    pub queries: u64,
    /// Lookups that reused at least one block.
    pub hits: u64,
    /// Tokens looked up: the whole token list of every query (vLLM's "prefix cache
    /// queries" count tokens, not lookups).
    pub tokens_queried: u64,
    /// Tokens whose KV was reused instead of recomputed.
    pub tokens_saved: u64,
    /// Misses because the prompt was shorter than one block.
    pub miss_short: u64,
    /// Misses whose first block had been cached and then evicted.
    pub miss_evicted: u64,
    /// Misses whose first block was never cached (or evicted too long ago to remember).
    pub miss_never_seen: u64,
    /// Cached blocks evicted to make room.
    pub evictions: u64,
}

impl PrefixStats {
    /// `hits / queries` (0 with no queries).
    pub fn hit_rate(&self) -> f64 {
        if self.queries == 0 {
            0.0
        } else {
            self.hits as f64 / self.queries as f64
        }
    }
}

/// A change to the set of blocks the prefix cache can find, recorded (when asked for: see
/// [`crate::KvCache::set_prefix_events`]) for routers that track which replica holds which
/// prefix. A block's key is its prefix-index key, which chains its parent's key and its own
/// token ids; a `Stored` block's parent was stored before it (a block only becomes findable
/// once the blocks before it are).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PrefixEvent {
    /// A full block became findable.
    Stored {
        key: u64,
        /// The key of the block before it (`None` for a sequence's first block).
        parent: Option<u64>,
        tokens: Vec<u32>,
    },
    /// A block was evicted: its key finds nothing any more.
    Removed { key: u64 },
}

/// Why a lookup reused nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MissReason {
    ShorterThanBlock,
    Evicted,
    NeverSeen,
}

pub(crate) struct PrefixIndex {
    map: HashMap<u64, u32>,
    root: u64,
    /// Keys evicted recently (a bounded memory, oldest forgotten first).
    evicted: HashSet<u64>,
    evicted_order: VecDeque<u64>,
    pub(crate) stats: PrefixStats,
}

impl PrefixIndex {
    pub(crate) fn new(n_blocks: usize, salt: u64) -> PrefixIndex {
        let cap = n_blocks.max(1);
        PrefixIndex {
            map: HashMap::with_capacity(cap),
            root: chain_key(salt ^ 0x6b69_6c6e_2d6b_7600, &[]),
            evicted: HashSet::with_capacity(cap),
            evicted_order: VecDeque::with_capacity(cap),
            stats: PrefixStats::default(),
        }
    }

    /// The key the first block of every sequence chains from.
    pub(crate) fn root(&self) -> u64 {
        self.root
    }

    pub(crate) fn get(&self, key: u64) -> Option<u32> {
        self.map.get(&key).copied()
    }

    pub(crate) fn insert(&mut self, key: u64, block: u32) {
        self.map.insert(key, block);
        if self.evicted.remove(&key) {
            self.evicted_order.retain(|&k| k != key);
        }
    }

    /// Forgets `key` (its block was evicted) and remembers that it was.
    pub(crate) fn evict(&mut self, key: u64) {
        self.map.remove(&key);
        self.stats.evictions += 1;
        if self.evicted_order.len() == self.evicted_order.capacity()
            && let Some(old) = self.evicted_order.pop_front()
        {
            self.evicted.remove(&old);
        }
        if self.evicted.insert(key) {
            self.evicted_order.push_back(key);
        }
    }

    pub(crate) fn was_evicted(&self, key: u64) -> bool {
        self.evicted.contains(&key)
    }

    /// Renumbers blocks after compaction.
    pub(crate) fn remap(&mut self, remap: &[u32]) {
        for b in self.map.values_mut() {
            *b = remap[*b as usize];
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
}

/// The key of a block whose parent has key `parent` and whose slots hold `tokens`.
pub(crate) fn chain_key(parent: u64, tokens: &[u32]) -> u64 {
    let mut h = DefaultHasher::new();
    parent.hash(&mut h);
    tokens.hash(&mut h);
    h.finish()
}
