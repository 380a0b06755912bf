//! Writing GGUF v3 (or v2) files: metadata, tensor infos, aligned and padded data.

use std::collections::HashSet;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use super::tensor::checked_tensor_size;
use super::{ALIGNMENT_KEY, Array, DEFAULT_ALIGNMENT, GGUF_MAGIC, Metadata, Value};
use crate::{FormatError, GgmlType};

/// Builds a GGUF file in memory and writes it out.
///
/// Tensors are laid out in the order they were added, each at the next multiple of the
/// alignment, and the data of each (the last included) is zero-padded to the alignment, as
/// llama.cpp and the `gguf` Python package do.
///
/// ```
/// use kiln_format::{GgmlType, GgufFile, GgufWriter};
/// let mut w = GgufWriter::new();
/// w.add_metadata("general.architecture", "llama")?;
/// w.add_tensor("v", GgmlType::F32, &[2], [1.0f32, 2.0].iter().flat_map(|x| x.to_le_bytes()).collect())?;
/// let file = GgufFile::from_bytes(w.to_bytes()?)?;
/// assert_eq!(file.tensor("v")?.data.len(), 8);
/// # Ok::<(), kiln_format::FormatError>(())
/// ```
#[derive(Debug)]
pub struct GgufWriter {
    version: u32,
    metadata: Metadata,
    tensors: Vec<PendingTensor>,
    names: HashSet<String>,
}

#[derive(Debug)]
struct PendingTensor {
    name: String,
    dims: Vec<u64>,
    ty: GgmlType,
    data: Vec<u8>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        GgufWriter::new()
    }
}

impl GgufWriter {
    /// An empty GGUF v3 file with the default alignment.
    pub fn new() -> GgufWriter {
        GgufWriter {
            version: 3,
            metadata: Metadata::new(),
            tensors: Vec::new(),
            names: HashSet::new(),
        }
    }

    /// Chooses the version to write: 2 or 3 (identical layouts for little-endian files).
    pub fn set_version(&mut self, version: u32) -> Result<(), FormatError> {
        if !(2..=3).contains(&version) {
            return Err(FormatError::UnsupportedVersion { version });
        }
        self.version = version;
        Ok(())
    }

    /// Sets `general.alignment` (a nonzero power of two).
    pub fn set_alignment(&mut self, alignment: u32) -> Result<(), FormatError> {
        if !alignment.is_power_of_two() {
            return Err(FormatError::BadAlignment {
                alignment: alignment.into(),
            });
        }
        self.metadata.set(ALIGNMENT_KEY, alignment);
        Ok(())
    }

    /// The metadata added so far.
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// Adds a metadata pair; a repeated key is [`FormatError::DuplicateKey`].
    pub fn add_metadata(
        &mut self,
        key: impl Into<String>,
        value: impl Into<Value>,
    ) -> Result<(), FormatError> {
        self.metadata.insert(key, value)
    }

    /// Adds a tensor with its raw bytes, which must be exactly the size its shape and type
    /// call for. `dims` are in ggml order (`dims[0]` is the row length).
    pub fn add_tensor(
        &mut self,
        name: impl Into<String>,
        ty: GgmlType,
        dims: &[u64],
        data: Vec<u8>,
    ) -> Result<(), FormatError> {
        let name = name.into();
        if self.names.contains(&name) {
            return Err(FormatError::DuplicateTensor { name });
        }
        let expected = checked_tensor_size(&name, dims, ty)?;
        if expected != data.len() as u64 {
            return Err(FormatError::TensorSizeMismatch {
                tensor: name,
                expected,
                actual: data.len() as u64,
            });
        }
        self.names.insert(name.clone());
        self.tensors.push(PendingTensor {
            name,
            dims: dims.to_vec(),
            ty,
            data,
        });
        Ok(())
    }

    /// The alignment the file will use: `general.alignment` if set, else 32.
    pub fn alignment(&self) -> Result<u64, FormatError> {
        match self.metadata.opt_u64(ALIGNMENT_KEY)? {
            None => Ok(DEFAULT_ALIGNMENT),
            Some(a) if a.is_power_of_two() => Ok(a),
            Some(a) => Err(FormatError::BadAlignment { alignment: a }),
        }
    }

    /// Writes the whole file; returns the number of bytes written.
    pub fn write_to(&self, w: &mut dyn Write) -> Result<u64, FormatError> {
        let alignment = self.alignment()?;
        let mut out = Out { w, n: 0 };
        out.bytes(&GGUF_MAGIC)?;
        out.bytes(&self.version.to_le_bytes())?;
        out.bytes(&(self.tensors.len() as u64).to_le_bytes())?;
        out.bytes(&(self.metadata.len() as u64).to_le_bytes())?;
        for (key, value) in self.metadata.iter() {
            out.string(key)?;
            out.bytes(&value.value_type().id().to_le_bytes())?;
            write_value(&mut out, value)?;
        }
        let mut offset = 0u64;
        for t in &self.tensors {
            out.string(&t.name)?;
            out.bytes(&(t.dims.len() as u32).to_le_bytes())?;
            for d in &t.dims {
                out.bytes(&d.to_le_bytes())?;
            }
            out.bytes(&t.ty.id().to_le_bytes())?;
            out.bytes(&offset.to_le_bytes())?;
            offset = padded(offset + t.data.len() as u64, alignment);
        }
        out.pad_to(alignment)?;
        for t in &self.tensors {
            out.bytes(&t.data)?;
            out.pad_to(alignment)?;
        }
        Ok(out.n)
    }

    /// The whole file as bytes.
    pub fn to_bytes(&self) -> Result<Vec<u8>, FormatError> {
        let mut v = Vec::new();
        self.write_to(&mut v)?;
        Ok(v)
    }

    /// Creates (or truncates) `path` and writes the file to it.
    pub fn write_file(&self, path: impl AsRef<Path>) -> Result<u64, FormatError> {
        let path = path.as_ref();
        let io = |source| FormatError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut f = BufWriter::new(File::create(path).map_err(io)?);
        let n = self.write_to(&mut f).map_err(|e| match e {
            FormatError::Write { source } => io(source),
            e => e,
        })?;
        f.flush().map_err(io)?;
        Ok(n)
    }
}

fn padded(n: u64, alignment: u64) -> u64 {
    n.next_multiple_of(alignment)
}

struct Out<'w> {
    w: &'w mut dyn Write,
    n: u64,
}

impl Out<'_> {
    fn bytes(&mut self, b: &[u8]) -> Result<(), FormatError> {
        self.w
            .write_all(b)
            .map_err(|source| FormatError::Write { source })?;
        self.n += b.len() as u64;
        Ok(())
    }

    fn string(&mut self, s: &str) -> Result<(), FormatError> {
        self.bytes(&(s.len() as u64).to_le_bytes())?;
        self.bytes(s.as_bytes())
    }

    fn pad_to(&mut self, alignment: u64) -> Result<(), FormatError> {
        const ZEROS: [u8; 64] = [0; 64];
        let mut pad = padded(self.n, alignment) - self.n;
        while pad > 0 {
            let k = pad.min(ZEROS.len() as u64);
            self.bytes(&ZEROS[..k as usize])?;
            pad -= k;
        }
        Ok(())
    }
}

fn write_value(out: &mut Out<'_>, value: &Value) -> Result<(), FormatError> {
    match value {
        Value::U8(v) => out.bytes(&v.to_le_bytes()),
        Value::I8(v) => out.bytes(&v.to_le_bytes()),
        Value::U16(v) => out.bytes(&v.to_le_bytes()),
        Value::I16(v) => out.bytes(&v.to_le_bytes()),
        Value::U32(v) => out.bytes(&v.to_le_bytes()),
        Value::I32(v) => out.bytes(&v.to_le_bytes()),
        Value::F32(v) => out.bytes(&v.to_le_bytes()),
        Value::Bool(v) => out.bytes(&[u8::from(*v)]),
        Value::String(s) => out.string(s),
        Value::Array(a) => write_array(out, a),
        Value::U64(v) => out.bytes(&v.to_le_bytes()),
        Value::I64(v) => out.bytes(&v.to_le_bytes()),
        Value::F64(v) => out.bytes(&v.to_le_bytes()),
    }
}

fn write_array(out: &mut Out<'_>, a: &Array) -> Result<(), FormatError> {
    out.bytes(&a.elem_type().id().to_le_bytes())?;
    out.bytes(&(a.len() as u64).to_le_bytes())?;
    macro_rules! each {
        ($v:expr) => {{
            for x in $v {
                out.bytes(&x.to_le_bytes())?;
            }
            Ok(())
        }};
    }
    match a {
        Array::U8(v) => out.bytes(v),
        Array::I8(v) => each!(v),
        Array::U16(v) => each!(v),
        Array::I16(v) => each!(v),
        Array::U32(v) => each!(v),
        Array::I32(v) => each!(v),
        Array::F32(v) => each!(v),
        Array::Bool(v) => {
            for &b in v {
                out.bytes(&[u8::from(b)])?;
            }
            Ok(())
        }
        Array::String(v) => {
            for s in v {
                out.string(s)?;
            }
            Ok(())
        }
        Array::U64(v) => each!(v),
        Array::I64(v) => each!(v),
        Array::F64(v) => each!(v),
        Array::Array(v) => {
            for inner in v {
                write_array(out, inner)?;
            }
            Ok(())
        }
    }
}
