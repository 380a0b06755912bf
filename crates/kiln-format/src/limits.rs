//! Caps on the counts and lengths a file may declare.
//!
//! Every length read from a file is also checked against the bytes that remain, so a file
//! can never make the reader allocate more than a small multiple of its own size; these
//! limits are a second, policy-level fence ("no sane model has a million metadata keys")
//! that gives a clear error instead of a slow parse of garbage.

/// Nesting of arrays inside arrays is never followed deeper than this, whatever
/// [`Limits::max_array_depth`] says: parsing nested arrays recurses.
pub const HARD_MAX_ARRAY_DEPTH: u32 = 64;

/// Configurable caps for [`GgufFile::open_with_limits`](crate::GgufFile::open_with_limits).
///
/// The defaults accept every real model seen so far with a wide margin (Gemma 3's vocabulary
/// is a 262,144-element array of strings; the largest MoE files have a few thousand tensors).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most tensors a file may declare. Default 1,048,576.
    pub max_tensors: u64,
    /// Most metadata key/value pairs. Default 65,536.
    pub max_metadata_entries: u64,
    /// Longest string (metadata key, string value, tensor name) in bytes. Default 16 MiB.
    pub max_string_len: u64,
    /// Most elements in one metadata value, counting the elements of nested arrays too.
    /// Default 16,777,216.
    pub max_array_len: u64,
    /// Deepest nesting of arrays: 1 for a plain array, 2 for an array of arrays.
    /// Default 8; never more than [`HARD_MAX_ARRAY_DEPTH`].
    pub max_array_depth: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_tensors: 1 << 20,
            max_metadata_entries: 1 << 16,
            max_string_len: 16 << 20,
            max_array_len: 1 << 24,
            max_array_depth: 8,
        }
    }
}
