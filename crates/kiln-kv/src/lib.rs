//! # kiln-kv
//!
//! The KV cache: per-layer K and V stores that attention reads and writes.
//!
//! **Owns:** KV memory layout, block allocation, sequence bookkeeping.
//!
//! **Must never:** know about model architectures, tokenizers or HTTP; it stores vectors
//! for (layer, position, kv-head) and nothing else.
