//! The memory maps both formats read from: a file mapped read-only, or bytes copied into a
//! page-aligned anonymous map (so tensor data has the same alignment either way).

use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::{Mmap, MmapMut};

use crate::FormatError;

/// Maps the file at `path` read-only.
pub(crate) fn map_file(path: &Path) -> Result<Mmap, FormatError> {
    let io = |source| FormatError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = File::open(path).map_err(io)?;
    // SAFETY: the map is read-only and only ever viewed as `&[u8]`. Like every mmap reader
    // (llama.cpp included) we rely on the file not being truncated or rewritten while it is
    // open; that cannot be enforced from here and is documented for users.
    unsafe { Mmap::map(&file) }.map_err(io)
}

/// Copies in-memory file bytes (tests, fuzzing) into a read-only anonymous map of the same
/// length. An anonymous map cannot be empty: zero bytes are an I/O error here, so callers
/// with a better error for an empty input check first.
pub(crate) fn map_bytes(bytes: Vec<u8>) -> Result<Mmap, FormatError> {
    let io = |source| FormatError::Io {
        path: PathBuf::from("<memory>"),
        source,
    };
    let mut map = MmapMut::map_anon(bytes.len()).map_err(io)?;
    map.copy_from_slice(&bytes);
    drop(bytes);
    map.make_read_only().map_err(io)
}
