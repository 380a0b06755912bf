use kiln_format::GgmlType;

/// Errors from kiln-quant. The model layer wraps these with the tensor's name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QuantError {
    /// Kiln cannot compute with this tensor type (yet).
    #[error("tensor type {type_name} (id {type_id}) is not supported by kiln-quant")]
    UnsupportedType {
        type_name: &'static str,
        type_id: u32,
    },
    /// A row length that is not a whole number of blocks of its type.
    #[error("{elems} elements are not a whole number of {type_name} blocks of {block_elems}")]
    PartialBlock {
        type_name: &'static str,
        elems: usize,
        block_elems: usize,
    },
    /// A buffer whose length does not match the shape it is used with.
    #[error("{type_name}: {what}: expected {expected}, got {actual}")]
    BadShape {
        type_name: &'static str,
        what: &'static str,
        expected: usize,
        actual: usize,
    },
    /// Activations can only be converted to F32, F16, BF16, Q8_0, Q8_1 or Q8_K.
    #[error("{type_name} is not an activation type (F32, F16, BF16, Q8_0, Q8_1, Q8_K)")]
    NotAnActivationType { type_name: &'static str },
    /// No quantizer writes this type (see `quantize_types`).
    #[error("cannot quantize to {type_name}: supported quantization types are {}", supported.join(", "))]
    NoQuantizer {
        type_name: &'static str,
        supported: Vec<&'static str>,
    },
}

impl QuantError {
    pub(crate) fn unsupported(ty: GgmlType) -> QuantError {
        QuantError::UnsupportedType {
            type_name: ty.name(),
            type_id: ty.id(),
        }
    }
}
