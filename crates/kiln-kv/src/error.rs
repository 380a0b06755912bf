//! The cache's errors, with the facts a caller needs to act on them.

use kiln_quant::QuantError;

use crate::SeqId;

/// What went wrong in a KV cache operation. Every operation that fails leaves the cache as
/// it was.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KvError {
    /// Not enough free (or evictable cached) blocks.
    #[error("KV cache out of memory: {needed} blocks needed, {available} available")]
    OutOfMemory { needed: usize, available: usize },
    /// The id names no live sequence (never created, or freed).
    #[error("KV sequence {seq} does not exist")]
    SequenceNotFound { seq: SeqId },
    /// A read or write outside what a sequence holds, or of a layer the cache does not have.
    #[error("invalid KV access: sequence {seq}, layer {layer}, position {pos} (length {len})")]
    InvalidPageAccess {
        seq: SeqId,
        layer: usize,
        pos: usize,
        len: usize,
    },
    /// The sequence is still in use by its owner (a model session's current sequence) and
    /// cannot be freed; select another sequence first.
    #[error("KV sequence {seq} is in use (the current sequence) and cannot be freed")]
    SequenceInUse { seq: SeqId },
    /// A prefix can only be attached to an empty sequence.
    #[error("KV sequence {seq} already holds {len} positions; prefixes attach to empty ones")]
    SequenceNotEmpty { seq: SeqId, len: usize },
    /// A K/V type name Kiln does not store.
    #[error("KV cache type '{name}' is not supported; supported: {}", supported.join(", "))]
    UnsupportedType {
        name: String,
        supported: Vec<&'static str>,
    },
    /// A configuration that cannot work (zero sizes, a head size that is not a whole number
    /// of the type's blocks, …).
    #[error("invalid KV cache configuration: {0}")]
    InvalidConfig(String),
    /// A K or V row of the wrong length.
    #[error("{what}: expected {expected} values, got {actual}")]
    RowLength {
        what: &'static str,
        expected: usize,
        actual: usize,
    },
    /// A conversion kernel refused its input.
    #[error(transparent)]
    Quant(#[from] QuantError),
}
