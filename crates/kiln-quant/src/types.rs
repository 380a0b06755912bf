//! The weight and activation types kiln-quant computes with, as small dense enums that index
//! the kernel tables.

use kiln_format::GgmlType;

/// A weight type kiln-quant can dequantize and dot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)]
pub(crate) enum WType {
    F32,
    F16,
    BF16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q8_0,
    Q4K,
    Q6K,
    Q5_1,
    Q2K,
    Q3K,
    Q5K,
    IQ4NL,
    IQ4XS,
}

impl WType {
    pub(crate) const COUNT: usize = 15;
    pub(crate) const ALL: [WType; WType::COUNT] = [
        WType::F32,
        WType::F16,
        WType::BF16,
        WType::Q4_0,
        WType::Q4_1,
        WType::Q5_0,
        WType::Q8_0,
        WType::Q4K,
        WType::Q6K,
        WType::Q5_1,
        WType::Q2K,
        WType::Q3K,
        WType::Q5K,
        WType::IQ4NL,
        WType::IQ4XS,
    ];

    pub(crate) fn of(ty: GgmlType) -> Option<WType> {
        WType::ALL.into_iter().find(|w| w.ggml() == ty)
    }

    pub(crate) fn ggml(self) -> GgmlType {
        match self {
            WType::F32 => GgmlType::F32,
            WType::F16 => GgmlType::F16,
            WType::BF16 => GgmlType::BF16,
            WType::Q4_0 => GgmlType::Q4_0,
            WType::Q4_1 => GgmlType::Q4_1,
            WType::Q5_0 => GgmlType::Q5_0,
            WType::Q8_0 => GgmlType::Q8_0,
            WType::Q4K => GgmlType::Q4_K,
            WType::Q6K => GgmlType::Q6_K,
            WType::Q5_1 => GgmlType::Q5_1,
            WType::Q2K => GgmlType::Q2_K,
            WType::Q3K => GgmlType::Q3_K,
            WType::Q5K => GgmlType::Q5_K,
            WType::IQ4NL => GgmlType::IQ4_NL,
            WType::IQ4XS => GgmlType::IQ4_XS,
        }
    }

    /// ggml's `vec_dot_type`: what activations are converted to before the dot product.
    pub(crate) fn act(self) -> AType {
        match self {
            WType::F32 => AType::F32,
            WType::F16 => AType::F16,
            WType::BF16 => AType::BF16,
            WType::Q4_0 | WType::Q5_0 | WType::Q8_0 | WType::IQ4NL => AType::Q8_0,
            WType::Q4_1 | WType::Q5_1 => AType::Q8_1,
            WType::Q2K | WType::Q3K | WType::Q4K | WType::Q5K | WType::Q6K | WType::IQ4XS => {
                AType::Q8K
            }
        }
    }
}

/// An activation type: what a row of `f32` activations is converted to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)]
pub(crate) enum AType {
    F32,
    F16,
    BF16,
    Q8_0,
    Q8_1,
    Q8K,
}

impl AType {
    pub(crate) const COUNT: usize = 6;
    pub(crate) const ALL: [AType; AType::COUNT] = [
        AType::F32,
        AType::F16,
        AType::BF16,
        AType::Q8_0,
        AType::Q8_1,
        AType::Q8K,
    ];

    pub(crate) fn of(ty: GgmlType) -> Option<AType> {
        AType::ALL.into_iter().find(|a| a.ggml() == ty)
    }

    pub(crate) fn ggml(self) -> GgmlType {
        match self {
            AType::F32 => GgmlType::F32,
            AType::F16 => GgmlType::F16,
            AType::BF16 => GgmlType::BF16,
            AType::Q8_0 => GgmlType::Q8_0,
            AType::Q8_1 => GgmlType::Q8_1,
            AType::Q8K => GgmlType::Q8_K,
        }
    }

    /// Bytes of a row of `n` elements (`n` a whole number of blocks).
    pub(crate) fn row_bytes(self, n: usize) -> usize {
        let t = self.ggml();
        n / t.block_elems() * t.block_bytes()
    }
}
