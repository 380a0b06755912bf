//! Parsing a whole GGUF file: header, metadata, tensor infos, data section bounds.
//!
//! Order of defence for every count read from the file: (1) compare with [`Limits`],
//! (2) compare `count × minimum encoded size` with the bytes that remain, and only then
//! (3) allocate. Arithmetic on file values is checked.

use std::collections::HashMap;

use super::metadata::Metadata;
use super::reader::Cursor;
use super::tensor::{GGML_MAX_DIMS, TensorInfo, checked_tensor_size};
use super::value::{Array, Value, ValueType};
use super::{ALIGNMENT_KEY, DEFAULT_ALIGNMENT, GGUF_MAGIC};
use crate::limits::HARD_MAX_ARRAY_DEPTH;
use crate::{FormatError, GgmlType, Limits};

/// Smallest metadata pair: empty key (8) + type (4) + a one-byte value.
const MIN_KV_SIZE: u64 = 8 + 4 + 1;
/// Smallest tensor info: empty name (8) + n_dims (4) + type (4) + offset (8).
const MIN_TENSOR_INFO_SIZE: u64 = 8 + 4 + 4 + 8;

pub(crate) struct Parsed {
    pub version: u32,
    pub alignment: u64,
    pub data_offset: u64,
    pub metadata: Metadata,
    pub tensors: Vec<TensorInfo>,
    pub by_name: HashMap<String, usize>,
}

pub(crate) fn parse(bytes: &[u8], limits: &Limits) -> Result<Parsed, FormatError> {
    let mut cur = Cursor::new(bytes);
    let magic = cur.array::<4>(|| "magic".into())?;
    if magic != GGUF_MAGIC {
        return Err(FormatError::NotGguf { magic });
    }
    let version = cur.u32(|| "version".into())?;
    // A big-endian writer stores 2 or 3 as 0x0200_0000 / 0x0300_0000.
    if version != 0 && version & 0xFFFF == 0 {
        return Err(FormatError::BigEndian);
    }
    if !(2..=3).contains(&version) {
        return Err(FormatError::UnsupportedVersion { version });
    }
    let n_tensors = cur.u64(|| "tensor_count".into())?;
    let n_kv = cur.u64(|| "metadata_kv_count".into())?;
    check_limit(
        "tensor count",
        "tensor_count",
        n_tensors,
        limits.max_tensors,
    )?;
    check_limit(
        "metadata entry count",
        "metadata_kv_count",
        n_kv,
        limits.max_metadata_entries,
    )?;
    cur.ensure_room(n_kv, MIN_KV_SIZE, || {
        format!("metadata ({n_kv} entries of at least {MIN_KV_SIZE} bytes)")
    })?;

    let metadata = read_metadata(&mut cur, n_kv, limits)?;
    let alignment = match metadata.opt_u64(ALIGNMENT_KEY)? {
        None => DEFAULT_ALIGNMENT,
        Some(a) if a.is_power_of_two() => a,
        Some(a) => return Err(FormatError::BadAlignment { alignment: a }),
    };

    cur.ensure_room(n_tensors, MIN_TENSOR_INFO_SIZE, || {
        format!("tensor infos ({n_tensors} of at least {MIN_TENSOR_INFO_SIZE} bytes)")
    })?;
    let (tensors, by_name) = read_tensor_infos(&mut cur, n_tensors, limits)?;

    let infos_end = cur.pos();
    let data_offset = infos_end
        .checked_next_multiple_of(alignment)
        .ok_or(FormatError::BadAlignment { alignment })?;
    let file_len = bytes.len() as u64;
    if data_offset > file_len && !tensors.is_empty() {
        return Err(FormatError::Truncated {
            field: "padding before the data section".into(),
            offset: infos_end,
            needed: data_offset - infos_end,
            available: cur.remaining(),
        });
    }
    let data_len = file_len.saturating_sub(data_offset);
    for t in &tensors {
        if !t.offset.is_multiple_of(alignment) {
            return Err(FormatError::MisalignedTensor {
                tensor: t.name.clone(),
                offset: t.offset,
                alignment,
            });
        }
        if t.offset
            .checked_add(t.n_bytes)
            .is_none_or(|end| end > data_len)
        {
            return Err(FormatError::TensorOutOfBounds {
                tensor: t.name.clone(),
                offset: t.offset,
                size: t.n_bytes,
                data_len,
            });
        }
    }

    Ok(Parsed {
        version,
        alignment,
        data_offset,
        metadata,
        tensors,
        by_name,
    })
}

fn check_limit(what: &'static str, key: &str, value: u64, limit: u64) -> Result<(), FormatError> {
    if value > limit {
        return Err(FormatError::LimitExceeded {
            what,
            key: key.to_owned(),
            value,
            limit,
        });
    }
    Ok(())
}

/// A capacity hint for a count already bounded by the remaining bytes.
fn cap(n: u64) -> usize {
    usize::try_from(n).unwrap_or(0)
}

fn read_metadata(
    cur: &mut Cursor<'_>,
    n_kv: u64,
    limits: &Limits,
) -> Result<Metadata, FormatError> {
    let mut metadata = Metadata::with_capacity(cap(n_kv));
    for i in 0..n_kv {
        let key = cur.string(limits.max_string_len, || format!("metadata[{i}].key"))?;
        if metadata.contains_key(key) {
            return Err(FormatError::DuplicateKey {
                key: key.to_owned(),
            });
        }
        let type_id = cur.u32(|| format!("metadata '{key}' value type"))?;
        let ty = ValueType::from_id(type_id).ok_or_else(|| FormatError::UnknownValueType {
            key: key.to_owned(),
            type_id,
        })?;
        let value = read_value(cur, ty, key, limits)?;
        metadata.insert(key, value)?;
    }
    Ok(metadata)
}

fn read_value(
    cur: &mut Cursor<'_>,
    ty: ValueType,
    key: &str,
    limits: &Limits,
) -> Result<Value, FormatError> {
    let field = || format!("metadata '{key}' value");
    Ok(match ty {
        ValueType::U8 => Value::U8(u8::from_le_bytes(cur.array(field)?)),
        ValueType::I8 => Value::I8(i8::from_le_bytes(cur.array(field)?)),
        ValueType::U16 => Value::U16(u16::from_le_bytes(cur.array(field)?)),
        ValueType::I16 => Value::I16(i16::from_le_bytes(cur.array(field)?)),
        ValueType::U32 => Value::U32(u32::from_le_bytes(cur.array(field)?)),
        ValueType::I32 => Value::I32(i32::from_le_bytes(cur.array(field)?)),
        ValueType::F32 => Value::F32(f32::from_le_bytes(cur.array(field)?)),
        ValueType::U64 => Value::U64(u64::from_le_bytes(cur.array(field)?)),
        ValueType::I64 => Value::I64(i64::from_le_bytes(cur.array(field)?)),
        ValueType::F64 => Value::F64(f64::from_le_bytes(cur.array(field)?)),
        ValueType::Bool => {
            let [byte] = cur.array(field)?;
            Value::Bool(to_bool(byte, field)?)
        }
        ValueType::String => Value::String(cur.string(limits.max_string_len, field)?.to_owned()),
        ValueType::Array => {
            let mut cx = ArrayCx {
                key,
                limits,
                max_depth: limits.max_array_depth.min(HARD_MAX_ARRAY_DEPTH),
                budget: limits.max_array_len,
                path: Vec::new(),
            };
            Value::Array(read_array(cur, &mut cx, 1)?)
        }
    })
}

fn to_bool(byte: u8, field: impl FnOnce() -> String) -> Result<bool, FormatError> {
    match byte {
        0 => Ok(false),
        1 => Ok(true),
        byte => Err(FormatError::InvalidBool {
            field: field(),
            byte,
        }),
    }
}

/// State shared by the recursive reads of one array value.
struct ArrayCx<'a> {
    key: &'a str,
    limits: &'a Limits,
    max_depth: u32,
    /// Elements still allowed in this value (all nesting levels together).
    budget: u64,
    /// Indices of the enclosing inner arrays, for field names (`value[2][7]`).
    path: Vec<u64>,
}

impl ArrayCx<'_> {
    /// `metadata 'key' value[2]` for the array at the current path.
    fn field(&self) -> String {
        let mut s = format!("metadata '{}' value", self.key);
        for i in &self.path {
            s.push_str(&format!("[{i}]"));
        }
        s
    }

    fn elem_field(&self, j: u64) -> String {
        format!("{}[{j}]", self.field())
    }
}

fn read_array(
    cur: &mut Cursor<'_>,
    cx: &mut ArrayCx<'_>,
    depth: u32,
) -> Result<Array, FormatError> {
    if depth > cx.max_depth {
        return Err(FormatError::LimitExceeded {
            what: "metadata array nesting depth",
            key: cx.field(),
            value: depth.into(),
            limit: cx.max_depth.into(),
        });
    }
    let type_id = cur.u32(|| format!("{} element type", cx.field()))?;
    let ty = ValueType::from_id(type_id).ok_or_else(|| FormatError::UnknownValueType {
        key: cx.field(),
        type_id,
    })?;
    let len = cur.u64(|| format!("{} length", cx.field()))?;
    if len > cx.budget {
        let used = cx.limits.max_array_len.saturating_sub(cx.budget);
        return Err(FormatError::LimitExceeded {
            what: "metadata array length",
            key: cx.field(),
            value: used.saturating_add(len),
            limit: cx.limits.max_array_len,
        });
    }
    cx.budget -= len;
    cur.ensure_room(len, ty.min_encoded_size(), || {
        format!("{} ({len} elements of type {})", cx.field(), ty.name())
    })?;

    macro_rules! numbers {
        ($variant:ident, $t:ty) => {{
            const N: usize = size_of::<$t>();
            let bytes = cur.take(len.saturating_mul(N as u64), || cx.field())?;
            let (chunks, _) = bytes.as_chunks::<N>();
            Array::$variant(chunks.iter().map(|c| <$t>::from_le_bytes(*c)).collect())
        }};
    }

    Ok(match ty {
        ValueType::U8 => numbers!(U8, u8),
        ValueType::I8 => numbers!(I8, i8),
        ValueType::U16 => numbers!(U16, u16),
        ValueType::I16 => numbers!(I16, i16),
        ValueType::U32 => numbers!(U32, u32),
        ValueType::I32 => numbers!(I32, i32),
        ValueType::F32 => numbers!(F32, f32),
        ValueType::U64 => numbers!(U64, u64),
        ValueType::I64 => numbers!(I64, i64),
        ValueType::F64 => numbers!(F64, f64),
        ValueType::Bool => {
            let bytes = cur.take(len, || cx.field())?;
            let mut out = Vec::with_capacity(bytes.len());
            for (j, &b) in bytes.iter().enumerate() {
                out.push(to_bool(b, || cx.elem_field(j as u64))?);
            }
            Array::Bool(out)
        }
        ValueType::String => {
            let mut out = Vec::with_capacity(cap(len));
            for j in 0..len {
                let s = cur.string(cx.limits.max_string_len, || cx.elem_field(j))?;
                out.push(s.to_owned());
            }
            Array::String(out)
        }
        ValueType::Array => {
            let mut out = Vec::with_capacity(cap(len));
            for j in 0..len {
                cx.path.push(j);
                out.push(read_array(cur, cx, depth + 1)?);
                cx.path.pop();
            }
            Array::Array(out)
        }
    })
}

type TensorTable = (Vec<TensorInfo>, HashMap<String, usize>);

fn read_tensor_infos(
    cur: &mut Cursor<'_>,
    n_tensors: u64,
    limits: &Limits,
) -> Result<TensorTable, FormatError> {
    let mut tensors = Vec::with_capacity(cap(n_tensors));
    let mut by_name = HashMap::with_capacity(cap(n_tensors));
    for i in 0..n_tensors {
        let name = cur.string(limits.max_string_len, || format!("tensor_info[{i}].name"))?;
        if by_name.contains_key(name) {
            return Err(FormatError::DuplicateTensor {
                name: name.to_owned(),
            });
        }
        let field = |what: &str| format!("tensor_info[{i}].{what} ('{name}')");
        let n_dims = cur.u32(|| field("n_dims"))?;
        if n_dims > GGML_MAX_DIMS {
            return Err(FormatError::TooManyDims {
                tensor: name.to_owned(),
                n_dims,
                max: GGML_MAX_DIMS,
            });
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for d in 0..n_dims {
            dims.push(cur.u64(|| field(&format!("dims[{d}]")))?);
        }
        let type_id = cur.u32(|| field("type"))?;
        let ty = GgmlType::from_id(type_id).ok_or_else(|| FormatError::UnknownTensorType {
            tensor: name.to_owned(),
            type_id,
        })?;
        let offset = cur.u64(|| field("offset"))?;
        let n_bytes = checked_tensor_size(name, &dims, ty)?;
        by_name.insert(name.to_owned(), tensors.len());
        tensors.push(TensorInfo {
            name: name.to_owned(),
            dims,
            ty,
            offset,
            n_bytes,
        });
    }
    Ok((tensors, by_name))
}
