//! safetensors (Hugging Face): one file, or several shards listed by a
//! `model.safetensors.index.json`, mapped read-only with zero-copy tensor views.
//!
//! Shapes are kept as the file gives them, row-major with the slowest dimension first (a
//! PyTorch `Linear` weight is `[out, in]`), which is the reverse of GGML's order.

mod dtype;
mod index;
mod parse;
mod writer;

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

pub use dtype::Dtype;
pub use index::{INDEX_FILE, SINGLE_FILE, SafetensorsSet, ShardIndex};
pub use parse::{MAX_HEADER_LEN, METADATA_KEY};
pub use writer::SafetensorsWriter;

use crate::{FormatError, Limits};

/// One entry of a safetensors header.
///
/// For an info obtained from a [`SafetensorsFile`]: the element count fits `i64`,
/// `n_bytes == elements * dtype.size()`, and `offset + n_bytes` lies inside the data section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SafetensorsTensorInfo {
    pub name: String,
    pub dtype: Dtype,
    /// Row-major shape, slowest dimension first (`[rows, cols]` for a matrix).
    pub shape: Vec<u64>,
    /// Byte offset relative to the start of the data section.
    pub offset: u64,
    pub n_bytes: u64,
}

impl SafetensorsTensorInfo {
    /// Total number of elements.
    pub fn n_elements(&self) -> u64 {
        self.shape.iter().product()
    }

    /// The shape in GGML order (fastest dimension first), as GGUF tensor infos give it.
    pub fn ggml_dims(&self) -> Vec<u64> {
        self.shape.iter().rev().copied().collect()
    }
}

/// A tensor's info and its bytes, borrowed from the file (no copy).
#[derive(Clone, Copy, Debug)]
pub struct SafetensorsTensorView<'a> {
    pub info: &'a SafetensorsTensorInfo,
    pub data: &'a [u8],
}

/// A parsed safetensors file that owns its bytes (a read-only memory map). Everything is
/// validated at open, so [`tensor_data`](SafetensorsFile::tensor_data) cannot fail.
pub struct SafetensorsFile {
    map: Mmap,
    path: PathBuf,
    data_offset: u64,
    tensors: Vec<SafetensorsTensorInfo>,
    by_name: HashMap<String, usize>,
    metadata: Vec<(String, String)>,
}

impl SafetensorsFile {
    /// Maps and parses the file at `path` with the default [`Limits`].
    pub fn open(path: impl AsRef<Path>) -> Result<SafetensorsFile, FormatError> {
        SafetensorsFile::open_with_limits(path, &Limits::default())
    }

    /// Maps and parses the file at `path`. Of the limits, `max_tensors` and
    /// `max_string_len` (tensor names) apply; the header itself is capped at
    /// [`MAX_HEADER_LEN`] bytes.
    pub fn open_with_limits(
        path: impl AsRef<Path>,
        limits: &Limits,
    ) -> Result<SafetensorsFile, FormatError> {
        let path = path.as_ref();
        let map = crate::map::map_file(path)?;
        SafetensorsFile::from_map(map, path.to_path_buf(), limits)
    }

    /// Parses an in-memory file (tests, fuzzing), copied into an anonymous map.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<SafetensorsFile, FormatError> {
        SafetensorsFile::from_bytes_with_limits(bytes, &Limits::default())
    }

    pub fn from_bytes_with_limits(
        bytes: Vec<u8>,
        limits: &Limits,
    ) -> Result<SafetensorsFile, FormatError> {
        // An anonymous map cannot be empty; a zero-length input is truncated anyway.
        if bytes.is_empty() {
            return Err(FormatError::Truncated {
                field: "header length".into(),
                offset: 0,
                needed: 8,
                available: 0,
            });
        }
        let map = crate::map::map_bytes(bytes)?;
        SafetensorsFile::from_map(map, PathBuf::from("<memory>"), limits)
    }

    fn from_map(map: Mmap, path: PathBuf, limits: &Limits) -> Result<SafetensorsFile, FormatError> {
        let p = parse::parse(&map, limits)?;
        Ok(SafetensorsFile {
            map,
            path,
            data_offset: p.data_offset,
            tensors: p.tensors,
            by_name: p.by_name,
            metadata: p.metadata,
        })
    }

    /// The path the file was opened from (`<memory>` for [`from_bytes`](Self::from_bytes)).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Absolute file offset of the data section (8 + header length).
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    pub fn file_size(&self) -> u64 {
        self.map.len() as u64
    }

    /// Tensor infos in data order.
    pub fn tensors(&self) -> &[SafetensorsTensorInfo] {
        &self.tensors
    }

    pub fn tensor_info(&self, name: &str) -> Option<&SafetensorsTensorInfo> {
        self.by_name.get(name).map(|&i| &self.tensors[i])
    }

    /// The `__metadata__` pairs, in key order.
    pub fn metadata(&self) -> &[(String, String)] {
        &self.metadata
    }

    /// The bytes of a tensor of this file. An info from elsewhere whose range does not lie
    /// inside this file yields an empty slice, never a panic.
    pub fn tensor_data(&self, info: &SafetensorsTensorInfo) -> &[u8] {
        let range = self
            .data_offset
            .checked_add(info.offset)
            .and_then(|start| Some((start, start.checked_add(info.n_bytes)?)))
            .and_then(|(s, e)| Some(usize::try_from(s).ok()?..usize::try_from(e).ok()?));
        range.and_then(|r| self.map.get(r)).unwrap_or(&[])
    }

    /// The whole file.
    pub fn as_bytes(&self) -> &[u8] {
        &self.map
    }

    /// The named tensor's info and bytes, or [`FormatError::MissingTensor`].
    pub fn tensor(&self, name: &str) -> Result<SafetensorsTensorView<'_>, FormatError> {
        let info = self
            .tensor_info(name)
            .ok_or_else(|| FormatError::MissingTensor {
                name: name.to_owned(),
            })?;
        Ok(SafetensorsTensorView {
            info,
            data: self.tensor_data(info),
        })
    }
}

impl fmt::Debug for SafetensorsFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SafetensorsFile")
            .field("path", &self.path)
            .field("data_offset", &self.data_offset)
            .field("file_size", &self.file_size())
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

#[cfg(test)]
mod tests;
