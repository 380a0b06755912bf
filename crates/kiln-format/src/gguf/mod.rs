//! GGUF v2/v3 (little-endian): the file, its metadata and its tensors.
//!
//! Layout: magic `GGUF`, `u32` version, `u64` tensor count, `u64` metadata count, the
//! metadata pairs, the tensor infos, padding to `general.alignment` (default 32), then the
//! data section that tensor offsets are relative to.

mod metadata;
mod parse;
mod reader;
mod tensor;
mod value;
mod writer;

use std::collections::HashMap;
use std::fmt;
use std::path::Path;

use memmap2::Mmap;

pub use metadata::Metadata;
pub use tensor::{GGML_MAX_DIMS, TensorInfo, TensorView};
pub use value::{Array, Value, ValueType};
pub use writer::GgufWriter;

use crate::{FormatError, Limits};

/// The four bytes every GGUF file starts with.
pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";
/// Alignment of the data section and of tensor offsets when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// The metadata key that overrides [`DEFAULT_ALIGNMENT`].
pub const ALIGNMENT_KEY: &str = "general.alignment";

/// A parsed GGUF file that owns its bytes (a read-only memory map).
///
/// Everything is validated at open: afterwards every tensor's bytes lie inside the file, so
/// [`tensor_data`](GgufFile::tensor_data) cannot fail. Tensor data is never copied; a slice
/// starts at an address aligned to `min(alignment, page size)` because the data section
/// offset is aligned and the map starts on a page boundary.
pub struct GgufFile {
    map: Mmap,
    version: u32,
    alignment: u64,
    data_offset: u64,
    metadata: Metadata,
    tensors: Vec<TensorInfo>,
    by_name: HashMap<String, usize>,
}

impl GgufFile {
    /// Maps and parses the file at `path` with the default [`Limits`].
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile, FormatError> {
        GgufFile::open_with_limits(path, &Limits::default())
    }

    pub fn open_with_limits(
        path: impl AsRef<Path>,
        limits: &Limits,
    ) -> Result<GgufFile, FormatError> {
        GgufFile::from_map(crate::map::map_file(path.as_ref())?, limits)
    }

    /// Parses an in-memory file (tests, fuzzing). The bytes are copied into a page-aligned
    /// anonymous map, so tensor data has the same alignment as with [`open`](GgufFile::open).
    pub fn from_bytes(bytes: Vec<u8>) -> Result<GgufFile, FormatError> {
        GgufFile::from_bytes_with_limits(bytes, &Limits::default())
    }

    pub fn from_bytes_with_limits(
        bytes: Vec<u8>,
        limits: &Limits,
    ) -> Result<GgufFile, FormatError> {
        GgufFile::from_map(crate::map::map_bytes(bytes)?, limits)
    }

    fn from_map(map: Mmap, limits: &Limits) -> Result<GgufFile, FormatError> {
        let p = parse::parse(&map, limits)?;
        Ok(GgufFile {
            map,
            version: p.version,
            alignment: p.alignment,
            data_offset: p.data_offset,
            metadata: p.metadata,
            tensors: p.tensors,
            by_name: p.by_name,
        })
    }

    /// GGUF version: 2 or 3.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Alignment of the data section and of every tensor offset.
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Absolute file offset of the data section.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    pub fn file_size(&self) -> u64 {
        self.map.len() as u64
    }

    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// Tensor infos in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    pub fn tensor_info(&self, name: &str) -> Option<&TensorInfo> {
        self.by_name.get(name).map(|&i| &self.tensors[i])
    }

    /// The bytes of a tensor of this file (`info.n_bytes` long).
    ///
    /// Cannot fail for an info obtained from this file. An info from elsewhere whose range
    /// does not lie inside this file's data section yields an empty slice, never a panic.
    pub fn tensor_data(&self, info: &TensorInfo) -> &[u8] {
        let range = self
            .data_offset
            .checked_add(info.offset)
            .and_then(|start| Some((start, start.checked_add(info.n_bytes)?)))
            .and_then(|(s, e)| Some(usize::try_from(s).ok()?..usize::try_from(e).ok()?));
        range.and_then(|r| self.map.get(r)).unwrap_or(&[])
    }

    /// The named tensor's info and bytes, or [`FormatError::MissingTensor`].
    pub fn tensor(&self, name: &str) -> Result<TensorView<'_>, FormatError> {
        let info = self
            .tensor_info(name)
            .ok_or_else(|| FormatError::MissingTensor {
                name: name.to_owned(),
            })?;
        Ok(TensorView {
            info,
            data: self.tensor_data(info),
        })
    }

    /// `general.architecture` (`"llama"`, `"gemma3"`, `"qwen2"`, …).
    pub fn architecture(&self) -> Result<&str, FormatError> {
        self.metadata.str("general.architecture")
    }

    /// The whole file.
    pub fn as_bytes(&self) -> &[u8] {
        &self.map
    }
}

impl fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GgufFile")
            .field("version", &self.version)
            .field("alignment", &self.alignment)
            .field("data_offset", &self.data_offset)
            .field("file_size", &self.file_size())
            .field("metadata_entries", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gguf_file_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<GgufFile>();
    }
}
