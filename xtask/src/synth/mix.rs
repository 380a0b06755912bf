//! Quantization mixes: which type each tensor gets, following llama.cpp's `llama-quantize`
//! choices for the same file type, so a synthetic file has the bytes a user's download has.

use kiln_format::GgmlType;

/// A file type as `llama-quantize` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mix {
    Q4_0,
    Q4KM,
    Q5KM,
    Q8_0,
}

/// What a tensor is, as far as the choice of type goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The output projection, or the token embedding when it is also the output.
    Output,
    TokenEmbedding,
    AttnV,
    FfnDown,
    /// Every other matrix.
    Matrix,
    /// Norm weights, biases, RoPE factors: never quantized.
    Vector,
}

pub const MIXES: &[(&str, Mix)] = &[
    ("q4_0", Mix::Q4_0),
    ("q4_k_m", Mix::Q4KM),
    ("q5_k_m", Mix::Q5KM),
    ("q8_0", Mix::Q8_0),
];

impl Mix {
    pub fn parse(name: &str) -> Option<Mix> {
        let name = name.to_ascii_lowercase();
        MIXES.iter().find(|(n, _)| *n == name).map(|&(_, m)| m)
    }

    pub fn name(self) -> &'static str {
        MIXES
            .iter()
            .find(|(_, m)| *m == self)
            .map_or("?", |(n, _)| n)
    }

    /// `general.file_type` (llama.cpp's `LLAMA_FTYPE_MOSTLY_*`).
    pub fn file_type(self) -> u32 {
        match self {
            Mix::Q4_0 => 2,
            Mix::Q8_0 => 7,
            Mix::Q4KM => 15,
            Mix::Q5KM => 17,
        }
    }

    fn base(self) -> GgmlType {
        match self {
            Mix::Q4_0 => GgmlType::Q4_0,
            Mix::Q8_0 => GgmlType::Q8_0,
            Mix::Q4KM => GgmlType::Q4_K,
            Mix::Q5KM => GgmlType::Q5_K,
        }
    }

    /// The type of a tensor of `role` in layer `layer` of `n_layer`. The output (and a tied
    /// embedding) is Q6_K unless the mix is Q8_0; the K-quant "M" mixes give Q6_K to
    /// `attn_v` and `ffn_down` on the layers [`use_more_bits`] picks.
    pub fn tensor_type(self, role: Role, layer: u64, n_layer: u64) -> GgmlType {
        let base = self.base();
        let more_bits = matches!(self, Mix::Q4KM | Mix::Q5KM) && use_more_bits(layer, n_layer);
        match role {
            Role::Vector => GgmlType::F32,
            Role::Output if base == GgmlType::Q8_0 => GgmlType::Q8_0,
            Role::Output => GgmlType::Q6_K,
            Role::AttnV | Role::FfnDown if more_bits => GgmlType::Q6_K,
            Role::TokenEmbedding | Role::AttnV | Role::FfnDown | Role::Matrix => base,
        }
    }
}

/// The layers that get more bits in the "M" mixes: the first and last eighth, and every
/// third layer between.
pub fn use_more_bits(layer: u64, n_layer: u64) -> bool {
    let eighth = n_layer / 8;
    layer < eighth || layer >= 7 * n_layer / 8 || (layer - eighth) % 3 == 2
}

/// The known mix names, comma-separated (for errors).
pub fn mix_names() -> String {
    MIXES.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
}
