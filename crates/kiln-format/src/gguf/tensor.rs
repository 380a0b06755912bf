//! Tensor infos, zero-copy views, and the shape rules every tensor must satisfy.

use crate::{FormatError, GgmlType};

/// Most dimensions a ggml tensor can have (`GGML_MAX_DIMS`).
pub const GGML_MAX_DIMS: u32 = 4;

/// One entry of the tensor table.
///
/// Only a parser or writer that has checked the shape constructs these from file data, so
/// for a `TensorInfo` obtained from a [`GgufFile`](crate::GgufFile): `1 <= dims.len() <= 4`,
/// every dim is in `1..=i64::MAX`, the element count fits `i64`, `dims[0]` is a whole number
/// of `ty`'s blocks, and `n_bytes == ty.row_bytes(dims[0]) * n_rows()`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    /// Shape in ggml order: `dims[0]` is the contiguous row length.
    pub dims: Vec<u64>,
    pub ty: GgmlType,
    /// Byte offset of the tensor's data, relative to the start of the data section.
    pub offset: u64,
    /// Size of the tensor's data in bytes.
    pub n_bytes: u64,
}

impl TensorInfo {
    /// Total number of elements (product of all dims).
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().fold(1u64, |n, &d| n.saturating_mul(d))
    }

    /// Elements per row: `dims[0]`.
    pub fn row_len(&self) -> u64 {
        self.dims.first().copied().unwrap_or(1)
    }

    /// Number of rows: the product of `dims[1..]` (1 for a vector).
    pub fn n_rows(&self) -> u64 {
        self.dims
            .iter()
            .skip(1)
            .fold(1u64, |n, &d| n.saturating_mul(d))
    }
}

/// A tensor's info and its bytes, borrowed from the file (no copy).
#[derive(Clone, Copy, Debug)]
pub struct TensorView<'a> {
    pub info: &'a TensorInfo,
    pub data: &'a [u8],
}

/// Checks a shape against the rules in [`TensorInfo`]'s doc and returns the tensor's size
/// in bytes.
///
/// Decisions beyond what llama.cpp checks: a dimension of 0 is refused (llama.cpp allows it;
/// no real model has an empty tensor, and an empty one would be a likely sign of a broken
/// converter), and so is a tensor with no dimensions at all (writers store a scalar as
/// `[1]`). Dims above `i64::MAX` are refused because ggml stores them as `int64_t`.
pub(crate) fn checked_tensor_size(
    name: &str,
    dims: &[u64],
    ty: GgmlType,
) -> Result<u64, FormatError> {
    let bad = |reason| FormatError::BadShape {
        tensor: name.to_owned(),
        dims: dims.to_vec(),
        reason,
    };
    if dims.len() > GGML_MAX_DIMS as usize {
        return Err(FormatError::TooManyDims {
            tensor: name.to_owned(),
            n_dims: u32::try_from(dims.len()).unwrap_or(u32::MAX),
            max: GGML_MAX_DIMS,
        });
    }
    let Some((&row_len, rest)) = dims.split_first() else {
        return Err(bad("a tensor needs at least one dimension"));
    };
    if dims.contains(&0) {
        return Err(bad("a dimension is zero"));
    }
    let max = i64::MAX as u64;
    let mut n_elements = 1u64;
    for &d in dims {
        n_elements = n_elements
            .checked_mul(d)
            .filter(|&n| n <= max)
            .ok_or_else(|| bad("the element count overflows a 64-bit signed integer"))?;
    }
    let block_elems = ty.block_elems() as u64;
    let row_bytes = ty.row_bytes(row_len).ok_or(FormatError::PartialBlock {
        tensor: name.to_owned(),
        ty,
        row_len,
        block_elems,
    })?;
    let n_rows = rest.iter().product::<u64>(); // <= n_elements, checked above
    row_bytes
        .checked_mul(n_rows)
        .ok_or_else(|| bad("the byte size overflows a 64-bit integer"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_rules_are_enforced() {
        let size = |dims: &[u64], ty| checked_tensor_size("t", dims, ty);
        assert_eq!(
            size(&[576, 49152], GgmlType::Q8_0).unwrap(),
            576 / 32 * 34 * 49152
        );
        assert_eq!(size(&[3], GgmlType::F32).unwrap(), 12);
        assert!(matches!(
            size(&[], GgmlType::F32),
            Err(FormatError::BadShape { .. })
        ));
        assert!(matches!(
            size(&[4, 0], GgmlType::F32),
            Err(FormatError::BadShape { .. })
        ));
        assert!(matches!(
            size(&[1; 5], GgmlType::F32),
            Err(FormatError::TooManyDims { n_dims: 5, .. })
        ));
        assert!(matches!(
            size(&[1 << 32, 1 << 32], GgmlType::F32),
            Err(FormatError::BadShape { .. })
        ));
        assert!(matches!(
            size(&[100], GgmlType::Q4_K),
            Err(FormatError::PartialBlock { row_len: 100, .. })
        ));
        // Elements fit i64 but bytes of an F64 tensor do not fit u64.
        assert!(matches!(
            size(&[1 << 31, 1 << 31], GgmlType::F64),
            Err(FormatError::BadShape { .. })
        ));
    }

    #[test]
    fn row_helpers_follow_ggml_order() {
        let t = TensorInfo {
            name: "w".into(),
            dims: vec![576, 49152],
            ty: GgmlType::Q8_0,
            offset: 0,
            n_bytes: 0,
        };
        assert_eq!(
            (t.row_len(), t.n_rows(), t.n_elements()),
            (576, 49152, 576 * 49152)
        );
    }
}
