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
/// A tensor added with [`GgufWriter::add_tensor_streamed`] has no bytes in memory: its data
/// is asked for when the file is written ([`GgufWriter::write_streaming`]), so a file of
/// any size can be written with the memory of one tensor's worth of buffer or less.
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
    /// Exactly `size` bytes; `None` when the caller streams them at write time.
    data: Option<Vec<u8>>,
    size: u64,
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
        self.push(name.into(), ty, dims, Some(data))
    }

    /// Adds a tensor whose bytes are written later, by the `fill` callback of
    /// [`GgufWriter::write_streaming`]; returns the byte size the callback must write.
    pub fn add_tensor_streamed(
        &mut self,
        name: impl Into<String>,
        ty: GgmlType,
        dims: &[u64],
    ) -> Result<u64, FormatError> {
        let name = name.into();
        let size = checked_tensor_size(&name, dims, ty)?;
        self.push(name, ty, dims, None)?;
        Ok(size)
    }

    fn push(
        &mut self,
        name: String,
        ty: GgmlType,
        dims: &[u64],
        data: Option<Vec<u8>>,
    ) -> Result<(), FormatError> {
        if self.names.contains(&name) {
            return Err(FormatError::DuplicateTensor { name });
        }
        let expected = checked_tensor_size(&name, dims, ty)?;
        if let Some(data) = &data
            && expected != data.len() as u64
        {
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
            size: expected,
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

    /// Writes the whole file; returns the number of bytes written. A streamed tensor
    /// ([`GgufWriter::add_tensor_streamed`]) has no bytes here and is
    /// [`FormatError::TensorSizeMismatch`]: write such a file with
    /// [`GgufWriter::write_streaming`].
    pub fn write_to(&self, w: &mut dyn Write) -> Result<u64, FormatError> {
        self.write_streaming(w, &mut |_, _| Ok(()))
    }

    /// Writes the whole file, calling `fill(name, out)` for each streamed tensor in the
    /// order the tensors were added; it must write exactly the tensor's size to `out`
    /// (checked: [`FormatError::TensorSizeMismatch`] otherwise). Returns the number of
    /// bytes written.
    pub fn write_streaming(
        &self,
        w: &mut dyn Write,
        fill: &mut dyn FnMut(&str, &mut dyn Write) -> std::io::Result<()>,
    ) -> Result<u64, FormatError> {
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
            offset = padded(offset + t.size, alignment);
        }
        out.pad_to(alignment)?;
        for t in &self.tensors {
            match &t.data {
                Some(data) => out.bytes(data)?,
                None => {
                    let before = out.n;
                    fill(&t.name, &mut out).map_err(|source| FormatError::Write { source })?;
                    let actual = out.n - before;
                    if actual != t.size {
                        return Err(FormatError::TensorSizeMismatch {
                            tensor: t.name.clone(),
                            expected: t.size,
                            actual,
                        });
                    }
                }
            }
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
        self.write_file_streaming(path, &mut |_, _| Ok(()))
    }

    /// Creates (or truncates) `path` and writes the file to it, streaming the tensors
    /// added with [`GgufWriter::add_tensor_streamed`] as [`GgufWriter::write_streaming`]
    /// does.
    pub fn write_file_streaming(
        &self,
        path: impl AsRef<Path>,
        fill: &mut dyn FnMut(&str, &mut dyn Write) -> std::io::Result<()>,
    ) -> Result<u64, FormatError> {
        let path = path.as_ref();
        let io = |source| FormatError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut f = BufWriter::with_capacity(1 << 20, File::create(path).map_err(io)?);
        let n = self.write_streaming(&mut f, fill).map_err(|e| match e {
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

impl Write for Out<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.w.write(buf)?;
        self.n += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.w.flush()
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
