//! KV-cache events for routers that track which replica holds which prefix: the blocks
//! entering and leaving the prefix cache, batched once per scheduler step (vLLM's
//! `BlockStored` / `BlockRemoved` / `AllBlocksCleared`). A leaf: the scheduler produces
//! the batches, a consumer takes them from [`crate::Engine::kv_events`].

use kiln_kv::PrefixEvent;

/// One change to what the prefix cache can find.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KvEvent {
    /// A full block became findable: its hash (the prefix-index key, which chains the
    /// parent's hash and the block's token ids), its parent's hash (`None` for a first
    /// block), and its token ids (one block's worth).
    BlockStored {
        hash: u64,
        parent: Option<u64>,
        tokens: Vec<u32>,
    },
    /// A block was evicted: its hash finds nothing any more.
    BlockRemoved { hash: u64 },
    /// Nothing is cached (sent once, first, when the engine starts).
    AllBlocksCleared,
}

impl From<PrefixEvent> for KvEvent {
    fn from(e: PrefixEvent) -> KvEvent {
        match e {
            PrefixEvent::Stored {
                key,
                parent,
                tokens,
            } => KvEvent::BlockStored {
                hash: key,
                parent,
                tokens,
            },
            PrefixEvent::Removed { key } => KvEvent::BlockRemoved { hash: key },
        }
    }
}

/// The events of one scheduler step, oldest first.
#[derive(Clone, Debug, PartialEq)]
pub struct KvEventBatch {
    /// Seconds since the Unix epoch when the step ended.
    pub ts: f64,
    /// Tokens per block (every `BlockStored` holds this many).
    pub block_size: usize,
    pub events: Vec<KvEvent>,
}
