//! The weight and activation types kiln-quant computes with, as small dense enums that index
//! the kernel tables.
//!
//! [`weight_types!`] and [`activation_types!`] are the only places these sets are written
//! down. Each is a list that hands itself to a macro: here it defines [`WType`] / [`AType`]
//! (and through them [`crate::supported_types`]), and in `scalar` it builds the scalar
//! kernel table, which every SIMD table starts from. A type added to the list is therefore a
//! supported type with scalar kernels, and every test that iterates
//! [`crate::supported_types`] runs it.

use kiln_format::GgmlType;

/// The weight types, grouped by family (the file of each kernel directory that holds them),
/// one line each: the type (a [`GgmlType`] variant), its activation type (ggml's
/// `vec_dot_type`, an [`AType`] variant), and its scalar kernels (the module under
/// `scalar/`, then the dequantizer and the dot product; the four-row kernels are made of
/// the dot). Invokes `$then!` with the list.
macro_rules! weight_types {
    ($then:ident) => {
        $then! {
            F32 => F32, float::{dequant_f32, dot_f32};
            F16 => F16, float::{dequant_f16, dot_f16};
            BF16 => BF16, float::{dequant_bf16, dot_bf16};
            Q4_0 => Q8_0, legacy::{dequant_q4_0, dot_q4_0};
            Q4_1 => Q8_1, legacy::{dequant_q4_1, dot_q4_1};
            Q5_0 => Q8_0, legacy::{dequant_q5_0, dot_q5_0};
            Q5_1 => Q8_1, legacy::{dequant_q5_1, dot_q5_1};
            Q8_0 => Q8_0, legacy::{dequant_q8_0, dot_q8_0};
            Q2_K => Q8_K, kquants::{dequant_q2_k, dot_q2_k};
            Q3_K => Q8_K, kquants::{dequant_q3_k, dot_q3_k};
            Q4_K => Q8_K, kquants::{dequant_q4_k, dot_q4_k};
            Q5_K => Q8_K, kquants::{dequant_q5_k, dot_q5_k};
            Q6_K => Q8_K, kquants::{dequant_q6_k, dot_q6_k};
            IQ4_NL => Q8_0, iquants::{dequant_iq4_nl, dot_iq4_nl};
            IQ4_XS => Q8_K, iquants::{dequant_iq4_xs, dot_iq4_xs};
        }
    };
}
pub(crate) use weight_types;

/// The activation types (what a row of `f32` activations is converted to before a dot
/// product), one line each: the type and its scalar converter in `scalar::act`. Invokes
/// `$then!` with the list.
macro_rules! activation_types {
    ($then:ident) => {
        $then! {
            F32 => convert_f32;
            F16 => convert_f16;
            BF16 => convert_bf16;
            Q8_0 => quantize_q8_0;
            Q8_1 => quantize_q8_1;
            Q8_K => quantize_q8_k;
        }
    };
}
pub(crate) use activation_types;

macro_rules! define_wtype {
    ($($w:ident => $a:ident, $fam:ident::{$deq:ident, $dot:ident};)*) => {
        /// A weight type kiln-quant can dequantize and dot (see [`weight_types!`]).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[allow(non_camel_case_types)]
        pub(crate) enum WType {
            $($w,)*
        }

        impl WType {
            pub(crate) const COUNT: usize = [$(stringify!($w)),*].len();
            pub(crate) const ALL: [WType; WType::COUNT] = [$(WType::$w),*];

            pub(crate) fn ggml(self) -> GgmlType {
                match self {
                    $(WType::$w => GgmlType::$w,)*
                }
            }

            /// ggml's `vec_dot_type`: what activations are converted to before the dot product.
            pub(crate) fn act(self) -> AType {
                match self {
                    $(WType::$w => AType::$a,)*
                }
            }
        }
    };
}
weight_types!(define_wtype);

macro_rules! define_atype {
    ($($a:ident => $quantize:ident;)*) => {
        /// An activation type: what a row of `f32` activations is converted to (see
        /// [`activation_types!`]).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[allow(non_camel_case_types)]
        pub(crate) enum AType {
            $($a,)*
        }

        impl AType {
            pub(crate) const COUNT: usize = [$(stringify!($a)),*].len();
            pub(crate) const ALL: [AType; AType::COUNT] = [$(AType::$a),*];

            pub(crate) fn ggml(self) -> GgmlType {
                match self {
                    $(AType::$a => GgmlType::$a,)*
                }
            }
        }
    };
}
activation_types!(define_atype);

impl WType {
    pub(crate) fn of(ty: GgmlType) -> Option<WType> {
        WType::ALL.into_iter().find(|w| w.ggml() == ty)
    }
}

impl AType {
    pub(crate) fn of(ty: GgmlType) -> Option<AType> {
        AType::ALL.into_iter().find(|a| a.ggml() == ty)
    }

    /// Bytes of a row of `n` elements (`n` a whole number of blocks).
    pub(crate) fn row_bytes(self, n: usize) -> usize {
        let t = self.ggml();
        n / t.block_elems() * t.block_bytes()
    }
}
