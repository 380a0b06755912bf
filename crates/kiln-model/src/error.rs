//! Errors raised while building or running a model.

use kiln_format::{Dtype, FormatError};
use kiln_quant::QuantError;

/// What went wrong loading or running a model, with the facts a user needs.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// `general.architecture` names an architecture Kiln does not implement.
    #[error("unsupported architecture '{arch}'; supported: {}", supported.join(", "))]
    UnsupportedArchitecture {
        arch: String,
        supported: Vec<&'static str>,
    },
    /// `general.architecture` (or a checkpoint's `model_type`) names a mixture-of-experts
    /// architecture Kiln does not implement; refused before any tensor is read.
    #[error(
        "unsupported mixture-of-experts architecture '{arch}'; supported mixture-of-experts \
         architectures: {}; all supported: {}", moe_supported.join(", "), supported.join(", ")
    )]
    UnsupportedMoeArchitecture {
        arch: String,
        /// The mixture-of-experts architectures Kiln implements, as the source names them.
        moe_supported: Vec<&'static str>,
        /// Every architecture Kiln implements, as the source names them.
        supported: Vec<&'static str>,
    },
    /// A tensor the architecture needs is not in the file.
    #[error("missing tensor '{name}'")]
    MissingTensor { name: String },
    /// A tensor has a shape other than the configuration implies.
    #[error("tensor '{tensor}' has shape {found:?}, expected {expected:?} (ggml order)")]
    ShapeMismatch {
        tensor: String,
        expected: Vec<u64>,
        found: Vec<u64>,
    },
    /// A tensor is stored in a type the kernels cannot compute with.
    #[error(
        "tensor '{tensor}' has type {type_name} (id {type_id}), which Kiln cannot compute \
         with; supported: {}", supported.join(", ")
    )]
    UnsupportedTensorType {
        tensor: String,
        type_id: u32,
        type_name: &'static str,
        /// The types Kiln computes with, as the tensor's source names them.
        supported: Vec<&'static str>,
    },
    /// A metadata value is inconsistent (zero heads, head count not dividing, …).
    #[error("invalid model configuration: {0}")]
    InvalidConfig(String),
    /// The sequence would exceed the context the session was created with.
    #[error("context overflow: {needed} positions needed, the context holds {n_ctx}")]
    ContextOverflow { needed: usize, n_ctx: usize },
    /// A token id outside the vocabulary.
    #[error("token id {id} is outside the vocabulary of {vocab} tokens")]
    TokenOutOfRange { id: u32, vocab: usize },
    /// An embedding pooling Kiln does not have (by name, or a model file's
    /// `<arch>.pooling_type`).
    #[error("pooling '{pooling}' is not supported; supported: {}", supported.join(", "))]
    UnsupportedPooling {
        pooling: String,
        supported: &'static [&'static str],
    },
    /// A batched pass the session cannot run (too many tokens, a sequence twice, an
    /// empty row).
    #[error("invalid batch: {0}")]
    InvalidBatch(String),
    /// `--quantize` asked for a type Kiln cannot quantize to.
    #[error("cannot quantize to {requested}; supported: {}", supported.join(", "))]
    UnsupportedQuantization {
        requested: String,
        supported: Vec<&'static str>,
    },
    /// A RoPE scaling method Kiln does not implement.
    #[error("RoPE scaling '{kind}' is not supported; supported: {}", supported.join(", "))]
    UnsupportedRopeScaling {
        kind: String,
        supported: Vec<&'static str>,
    },
    /// A Hugging Face `config.json` that is missing a value or holds one Kiln cannot use.
    #[error("{}: {field}: {reason}", .path.display())]
    HfConfig {
        path: std::path::PathBuf,
        field: String,
        reason: String,
    },
    /// A model path that is neither a GGUF file nor a Hugging Face model directory.
    #[error("{}: {reason}", .path.display())]
    NotAModel {
        path: std::path::PathBuf,
        reason: String,
    },
    /// Reading the file or its metadata failed.
    #[error(transparent)]
    Format(#[from] FormatError),
    /// A kernel refused its inputs.
    #[error(transparent)]
    Quant(#[from] QuantError),
    /// The KV cache refused an operation (out of blocks, an unknown sequence, an
    /// unsupported K/V type for this model's head size).
    #[error(transparent)]
    Kv(#[from] kiln_kv::KvError),
}

impl ModelError {
    /// A GGUF tensor stored in a type kiln-quant cannot compute with; lists the ones it can.
    pub(crate) fn unsupported_ggml_type(
        tensor: String,
        type_id: u32,
        type_name: &'static str,
    ) -> Self {
        ModelError::UnsupportedTensorType {
            tensor,
            type_id,
            type_name,
            supported: kiln_quant::supported_types()
                .into_iter()
                .map(|t| t.name())
                .collect(),
        }
    }

    /// A safetensors tensor of a dtype Kiln cannot compute with (`type_id` is `u32::MAX`:
    /// safetensors dtypes have no GGML id); lists the dtypes it can.
    pub(crate) fn unsupported_dtype(tensor: String, type_name: &'static str) -> Self {
        ModelError::UnsupportedTensorType {
            tensor,
            type_id: u32::MAX,
            type_name,
            supported: kiln_quant::supported_types()
                .into_iter()
                .filter_map(|t| Dtype::ALL.into_iter().find(|d| d.ggml_type() == Some(t)))
                .map(|d| d.name())
                .collect(),
        }
    }
}
