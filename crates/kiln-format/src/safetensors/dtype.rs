//! The element types a safetensors header may name.

use std::fmt;

use crate::GgmlType;

/// A safetensors `dtype` string, as the format's specification lists them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)]
pub enum Dtype {
    BOOL,
    U8,
    I8,
    U16,
    I16,
    F16,
    BF16,
    U32,
    I32,
    F32,
    U64,
    I64,
    F64,
    F8_E4M3,
    F8_E5M2,
}

impl Dtype {
    /// Every dtype, in the order of the specification.
    pub const ALL: [Dtype; 15] = [
        Dtype::BOOL,
        Dtype::U8,
        Dtype::I8,
        Dtype::U16,
        Dtype::I16,
        Dtype::F16,
        Dtype::BF16,
        Dtype::U32,
        Dtype::I32,
        Dtype::F32,
        Dtype::U64,
        Dtype::I64,
        Dtype::F64,
        Dtype::F8_E4M3,
        Dtype::F8_E5M2,
    ];

    /// The name used in headers (`"BF16"`).
    pub fn name(self) -> &'static str {
        match self {
            Dtype::BOOL => "BOOL",
            Dtype::U8 => "U8",
            Dtype::I8 => "I8",
            Dtype::U16 => "U16",
            Dtype::I16 => "I16",
            Dtype::F16 => "F16",
            Dtype::BF16 => "BF16",
            Dtype::U32 => "U32",
            Dtype::I32 => "I32",
            Dtype::F32 => "F32",
            Dtype::U64 => "U64",
            Dtype::I64 => "I64",
            Dtype::F64 => "F64",
            Dtype::F8_E4M3 => "F8_E4M3",
            Dtype::F8_E5M2 => "F8_E5M2",
        }
    }

    /// The dtype a header name denotes.
    pub fn from_name(name: &str) -> Option<Dtype> {
        Dtype::ALL.into_iter().find(|d| d.name() == name)
    }

    /// Bytes per element.
    pub fn size(self) -> u64 {
        match self {
            Dtype::BOOL | Dtype::U8 | Dtype::I8 | Dtype::F8_E4M3 | Dtype::F8_E5M2 => 1,
            Dtype::U16 | Dtype::I16 | Dtype::F16 | Dtype::BF16 => 2,
            Dtype::U32 | Dtype::I32 | Dtype::F32 => 4,
            Dtype::U64 | Dtype::I64 | Dtype::F64 => 8,
        }
    }

    /// The GGML type with the same element layout, for the float types GGML computes with
    /// (F32, F16, BF16); `None` for the others.
    pub fn ggml_type(self) -> Option<GgmlType> {
        match self {
            Dtype::F32 => Some(GgmlType::F32),
            Dtype::F16 => Some(GgmlType::F16),
            Dtype::BF16 => Some(GgmlType::BF16),
            _ => None,
        }
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_none() {
        for d in Dtype::ALL {
            assert_eq!(Dtype::from_name(d.name()), Some(d));
        }
        assert_eq!(Dtype::from_name("f32"), None);
        assert_eq!(Dtype::from_name("Q4_0"), None);
    }

    #[test]
    fn float_types_map_to_ggml_types_of_the_same_width() {
        for d in [Dtype::F32, Dtype::F16, Dtype::BF16] {
            let g = d.ggml_type().unwrap();
            assert_eq!(g.block_elems(), 1);
            assert_eq!(g.block_bytes() as u64, d.size());
        }
        assert_eq!(Dtype::I64.ggml_type(), None);
    }
}
