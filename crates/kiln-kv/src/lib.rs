//! # kiln-kv
//!
//! The KV cache: per-layer K and V stores that attention reads and writes, organised as
//! vLLM's PagedAttention does. Memory is a pool of fixed-size **blocks** (pages of
//! `block_size` tokens × KV heads × head size, in every layer's K and V arena); a
//! **sequence** is a table of block ids. Blocks are reference-counted: forking a sequence
//! shares its blocks, and the first write to a shared block copies it (copy-on-write).
//! Pages hold f32, f16 (default), q8_0, q4_0, q4_1 or q5_0 vectors, K and V chosen
//! separately; rows are converted on write by `kiln_quant::attn::store_row`, and attention
//! reads the stored form directly through a [`LayerView`]. Block-quantized rows are stored
//! rotated by an orthonormal Walsh–Hadamard transform unless [`KvConfig::rotate`] is off
//! (llama.cpp's `attn_rot_k` / `attn_rot_v`); readers of a view rotate queries and outputs
//! to match ([`LayerView::k_rotation`], [`LayerView::v_rotation`]).
//!
//! Full blocks are also **content-addressed** for prefix caching: a block's key hashes its
//! parent's key with its token ids, a lookup walks the chain and verifies every candidate's
//! stored tokens and parent, and blocks of finished sequences stay cached until space is
//! needed (least recently used first, tail blocks before head blocks).
//!
//! **Owns:** KV memory layout, block allocation, reference counts, sequence bookkeeping,
//! the prefix index, statistics and compaction.
//!
//! **Must never:** know about model architectures, tokenizers or HTTP (it stores vectors
//! for (layer, position, KV head) and the token ids that key them, nothing else); allocate
//! when a sequence grows within the capacity it was created with; serve a cached block
//! whose tokens were not verified; fall back to another type than the one requested.

mod cache;
mod config;
mod error;
mod pool;
mod prefix;
mod stats;
mod view;

pub use cache::{KvCache, PrefixHit, SeqId};
pub use config::{KvConfig, KvType, PageLayout};
pub use error::KvError;
pub use prefix::{MissReason, PrefixEvent, PrefixStats};
pub use stats::{Fragmentation, KvStats};
pub use view::LayerView;
