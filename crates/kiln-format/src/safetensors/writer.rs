//! Writing safetensors files (test fixtures, conversions): tensors laid end to end in the
//! order they were added, the header padded with spaces to a multiple of 8 bytes as the
//! reference implementation does.

use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::path::Path;

use serde_json::{Map, Value, json};

use super::{Dtype, METADATA_KEY};
use crate::FormatError;

/// Builds a safetensors file in memory.
///
/// ```
/// use kiln_format::{Dtype, SafetensorsFile, SafetensorsWriter};
/// let mut w = SafetensorsWriter::new();
/// w.add_tensor("v", Dtype::F32, &[2], [1.0f32, 2.0].iter().flat_map(|x| x.to_le_bytes()).collect())?;
/// let file = SafetensorsFile::from_bytes(w.to_bytes()?)?;
/// assert_eq!(file.tensor("v")?.info.shape, [2]);
/// # Ok::<(), kiln_format::FormatError>(())
/// ```
#[derive(Debug, Default)]
pub struct SafetensorsWriter {
    metadata: BTreeMap<String, String>,
    tensors: Vec<(String, Dtype, Vec<u64>, Vec<u8>)>,
    names: HashSet<String>,
}

impl SafetensorsWriter {
    pub fn new() -> SafetensorsWriter {
        SafetensorsWriter::default()
    }

    /// Sets a `__metadata__` pair.
    pub fn set_metadata(&mut self, key: impl Into<String>, value: impl Into<String>) {
        self.metadata.insert(key.into(), value.into());
    }

    /// Adds a tensor; `shape` is row-major (slowest first) and `data` must be exactly its
    /// size.
    pub fn add_tensor(
        &mut self,
        name: impl Into<String>,
        dtype: Dtype,
        shape: &[u64],
        data: Vec<u8>,
    ) -> Result<(), FormatError> {
        let name = name.into();
        if name == METADATA_KEY || self.names.contains(&name) {
            return Err(FormatError::DuplicateTensor { name });
        }
        let expected = shape
            .iter()
            .try_fold(dtype.size(), |n, &d| n.checked_mul(d))
            .ok_or_else(|| FormatError::BadShape {
                tensor: name.clone(),
                dims: shape.to_vec(),
                reason: "the byte size overflows a 64-bit integer",
            })?;
        if expected != data.len() as u64 {
            return Err(FormatError::TensorSizeMismatch {
                tensor: name,
                expected,
                actual: data.len() as u64,
            });
        }
        self.names.insert(name.clone());
        self.tensors.push((name, dtype, shape.to_vec(), data));
        Ok(())
    }

    /// Adds an F32 tensor from values.
    pub fn add_f32(
        &mut self,
        name: impl Into<String>,
        shape: &[u64],
        values: &[f32],
    ) -> Result<(), FormatError> {
        let data = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.add_tensor(name, Dtype::F32, shape, data)
    }

    /// The complete file.
    pub fn to_bytes(&self) -> Result<Vec<u8>, FormatError> {
        let mut header = Map::new();
        if !self.metadata.is_empty() {
            header.insert(
                METADATA_KEY.into(),
                Value::Object(
                    self.metadata
                        .iter()
                        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                        .collect(),
                ),
            );
        }
        let mut at = 0u64;
        for (name, dtype, shape, data) in &self.tensors {
            let end = at + data.len() as u64;
            header.insert(
                name.clone(),
                json!({ "dtype": dtype.name(), "shape": shape, "data_offsets": [at, end] }),
            );
            at = end;
        }
        let mut text =
            serde_json::to_string(&Value::Object(header)).map_err(|e| FormatError::Write {
                source: std::io::Error::other(e),
            })?;
        while !text.len().is_multiple_of(8) {
            text.push(' ');
        }
        let mut out = Vec::with_capacity(8 + text.len() + at as usize);
        out.extend_from_slice(&(text.len() as u64).to_le_bytes());
        out.extend_from_slice(text.as_bytes());
        for (_, _, _, data) in &self.tensors {
            out.extend_from_slice(data);
        }
        Ok(out)
    }

    /// Writes the file to `path`.
    pub fn write(&self, path: impl AsRef<Path>) -> Result<(), FormatError> {
        let path = path.as_ref();
        let bytes = self.to_bytes()?;
        let mut f = std::fs::File::create(path).map_err(|source| FormatError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        f.write_all(&bytes)
            .map_err(|source| FormatError::Write { source })
    }
}
