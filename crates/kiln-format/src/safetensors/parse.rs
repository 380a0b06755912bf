//! Parsing and checking a safetensors header.
//!
//! Layout: an 8-byte little-endian header length `N`, `N` bytes of UTF-8 JSON (an object
//! mapping tensor names to `{dtype, shape, data_offsets}`, plus an optional
//! `__metadata__` object of string values), then the data section. Offsets are relative to
//! the data section. As the reference implementation requires, the tensors must cover the
//! data section exactly: sorted by offset, each begins where the previous one ends, and the
//! last ends at the end of the file.

use std::collections::HashMap;

use serde_json::Value;

use super::{Dtype, SafetensorsTensorInfo};
use crate::{FormatError, Limits};

/// Largest header accepted (the reference implementation's limit): a header is a table of
/// names and shapes, and even models with tens of thousands of tensors stay far below it.
pub const MAX_HEADER_LEN: u64 = 100 << 20;

/// The key of the optional string-to-string metadata object.
pub const METADATA_KEY: &str = "__metadata__";

pub(crate) struct Parsed {
    pub data_offset: u64,
    pub tensors: Vec<SafetensorsTensorInfo>,
    pub by_name: HashMap<String, usize>,
    pub metadata: Vec<(String, String)>,
}

fn header_err(field: impl Into<String>, reason: impl Into<String>) -> FormatError {
    FormatError::SafetensorsHeader {
        field: field.into(),
        reason: reason.into(),
    }
}

/// Parses and checks the header of the file whose bytes are `buf`.
pub(crate) fn parse(buf: &[u8], limits: &Limits) -> Result<Parsed, FormatError> {
    let file_len = buf.len() as u64;
    let Some(len_bytes) = buf.get(..8) else {
        return Err(FormatError::Truncated {
            field: "header length".into(),
            offset: 0,
            needed: 8,
            available: file_len,
        });
    };
    let mut n = [0u8; 8];
    n.copy_from_slice(len_bytes);
    let header_len = u64::from_le_bytes(n);
    if header_len > MAX_HEADER_LEN {
        return Err(FormatError::LimitExceeded {
            what: "safetensors header length",
            key: "header length".into(),
            value: header_len,
            limit: MAX_HEADER_LEN,
        });
    }
    if header_len > file_len - 8 {
        return Err(FormatError::Truncated {
            field: "header".into(),
            offset: 8,
            needed: header_len,
            available: file_len - 8,
        });
    }
    // `header_len <= file_len - 8`, so both bounds fit in usize.
    let data_offset = 8 + header_len;
    let header = &buf[8..data_offset as usize];
    let text = std::str::from_utf8(header).map_err(|_| FormatError::InvalidUtf8 {
        field: "header".into(),
    })?;
    let json: Value = serde_json::from_str(text)
        .map_err(|e| header_err("header", format!("not valid JSON: {e}")))?;
    let Value::Object(entries) = json else {
        return Err(header_err("header", "not a JSON object"));
    };
    let n_tensors = entries.len() as u64 - u64::from(entries.contains_key(METADATA_KEY));
    if n_tensors > limits.max_tensors {
        return Err(FormatError::LimitExceeded {
            what: "tensor count",
            key: "header".into(),
            value: n_tensors,
            limit: limits.max_tensors,
        });
    }
    let data_len = file_len - data_offset;
    let mut tensors = Vec::with_capacity(n_tensors as usize);
    let mut metadata = Vec::new();
    for (name, value) in &entries {
        if name.len() as u64 > limits.max_string_len {
            return Err(FormatError::LimitExceeded {
                what: "string length",
                key: "tensor name".into(),
                value: name.len() as u64,
                limit: limits.max_string_len,
            });
        }
        if name == METADATA_KEY {
            metadata = parse_metadata(value)?;
            continue;
        }
        tensors.push(parse_tensor(name, value, data_len)?);
    }
    check_coverage(&mut tensors, data_len)?;
    let by_name = tensors
        .iter()
        .enumerate()
        .map(|(i, t)| (t.name.clone(), i))
        .collect();
    Ok(Parsed {
        data_offset,
        tensors,
        by_name,
        metadata,
    })
}

fn parse_metadata(value: &Value) -> Result<Vec<(String, String)>, FormatError> {
    let Value::Object(map) = value else {
        return Err(header_err(METADATA_KEY, "not a JSON object"));
    };
    map.iter()
        .map(|(k, v)| match v {
            Value::String(s) => Ok((k.clone(), s.clone())),
            _ => Err(header_err(
                format!("{METADATA_KEY}.{k}"),
                "metadata values must be strings",
            )),
        })
        .collect()
}

fn parse_tensor(
    name: &str,
    value: &Value,
    data_len: u64,
) -> Result<SafetensorsTensorInfo, FormatError> {
    let field = |f: &str| format!("tensor '{name}' {f}");
    let Value::Object(obj) = value else {
        return Err(header_err(field("entry"), "not a JSON object"));
    };
    if let Some(extra) = obj
        .keys()
        .find(|k| !matches!(k.as_str(), "dtype" | "shape" | "data_offsets"))
    {
        return Err(header_err(field(extra), "unknown field"));
    }
    let dtype_name = match obj.get("dtype") {
        Some(Value::String(s)) => s,
        Some(_) => return Err(header_err(field("dtype"), "not a string")),
        None => return Err(header_err(field("dtype"), "missing")),
    };
    let dtype = Dtype::from_name(dtype_name).ok_or_else(|| FormatError::UnknownDtype {
        tensor: name.to_owned(),
        dtype: dtype_name.clone(),
    })?;
    let shape = match obj.get("shape") {
        Some(Value::Array(dims)) => dims
            .iter()
            .map(|d| d.as_u64())
            .collect::<Option<Vec<u64>>>()
            .ok_or_else(|| header_err(field("shape"), "not an array of non-negative integers"))?,
        Some(_) => return Err(header_err(field("shape"), "not an array")),
        None => return Err(header_err(field("shape"), "missing")),
    };
    let (begin, end) = match obj.get("data_offsets") {
        Some(Value::Array(o)) if o.len() == 2 => match (o[0].as_u64(), o[1].as_u64()) {
            (Some(b), Some(e)) => (b, e),
            _ => {
                return Err(header_err(
                    field("data_offsets"),
                    "not two non-negative integers",
                ));
            }
        },
        Some(_) => {
            return Err(header_err(
                field("data_offsets"),
                "not an array of two integers",
            ));
        }
        None => return Err(header_err(field("data_offsets"), "missing")),
    };
    let n_elements = shape
        .iter()
        .try_fold(1u64, |n, &d| n.checked_mul(d))
        .filter(|&n| n <= i64::MAX as u64)
        .ok_or_else(|| FormatError::BadShape {
            tensor: name.to_owned(),
            dims: shape.clone(),
            reason: "the element count overflows a 64-bit signed integer",
        })?;
    let n_bytes = n_elements
        .checked_mul(dtype.size())
        .ok_or_else(|| FormatError::BadShape {
            tensor: name.to_owned(),
            dims: shape.clone(),
            reason: "the byte size overflows a 64-bit integer",
        })?;
    if begin > end || end > data_len {
        return Err(FormatError::TensorOutOfBounds {
            tensor: name.to_owned(),
            offset: begin,
            size: end.saturating_sub(begin),
            data_len,
        });
    }
    if end - begin != n_bytes {
        return Err(FormatError::DataOffsetsMismatch {
            tensor: name.to_owned(),
            dtype: dtype.name(),
            shape,
            expected: n_bytes,
            begin,
            end,
        });
    }
    Ok(SafetensorsTensorInfo {
        name: name.to_owned(),
        dtype,
        shape,
        offset: begin,
        n_bytes,
    })
}

/// Sorts `tensors` by offset and checks that they tile the data section with no hole and
/// no overlap.
fn check_coverage(tensors: &mut [SafetensorsTensorInfo], data_len: u64) -> Result<(), FormatError> {
    tensors.sort_by_key(|t| (t.offset, t.n_bytes));
    let mut at = 0u64;
    for t in tensors.iter() {
        if t.offset != at {
            return Err(FormatError::DataLayout {
                tensor: t.name.clone(),
                offset: t.offset,
                expected: at,
                reason: if t.offset < at {
                    "overlaps the tensor before it"
                } else {
                    "leaves a hole after the tensor before it"
                },
            });
        }
        at = t.offset + t.n_bytes;
    }
    if at != data_len {
        return Err(FormatError::DataLayout {
            tensor: tensors.last().map_or_else(String::new, |t| t.name.clone()),
            offset: at,
            expected: data_len,
            reason: "the tensors end before the data section does",
        });
    }
    Ok(())
}
