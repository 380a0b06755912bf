//! One module per architecture, each exporting one [`ArchDescriptor`] that holds everything
//! Kiln knows about it: its GGUF and Hugging Face names, the builder that reads its
//! configuration from metadata and binds its tensors, how a checkpoint's `config.json` and
//! tensor names translate, and what conversion to GGUF does to it. [`ARCHITECTURES`] lists
//! them; every list of supported names is derived from it, and a name that is not in it is
//! an [`ModelError::UnsupportedArchitecture`], never a fallback to a similar architecture.
//!
//! The compute is shared ([`crate::model`]); tensors are named the GGUF way whatever the
//! source ([`crate::weights`] maps Hugging Face names through the descriptor).

mod bind;
mod gemma2;
mod gemma3;
mod gpt2;
mod granite;
mod llama;
mod olmo2;
mod olmoe;
mod phi2;
mod phi3;
mod qwen2;
mod qwen2moe;
mod qwen3;
mod qwen3moe;
mod smollm3;

#[cfg(test)]
mod hf_tests;
#[cfg(test)]
mod tests;

use std::path::Path;

use kiln_format::Metadata;

use crate::ModelError;
use crate::hf::{ConfigJson, HfArch, HfModel};
use crate::moe::config::MOE_ARCHITECTURES;
use crate::spec::ModelSpec;
use crate::weights::WeightStore;

/// Reads an architecture's configuration from (GGUF-keyed) metadata and binds its tensors.
pub(crate) type BuildFn = fn(&Metadata, &WeightStore) -> Result<ModelSpec, ModelError>;

/// Everything about one architecture. Each `arch/<name>.rs` defines one, and
/// [`ARCHITECTURES`] lists them.
#[derive(Debug)]
pub struct ArchDescriptor {
    /// GGUF `general.architecture`, also the prefix of the architecture's metadata keys.
    pub gguf_name: &'static str,
    /// The `model_type`s of a Hugging Face `config.json` loaded as this architecture.
    pub hf_model_types: &'static [&'static str],
    /// Whether a checkpoint converted to GGUF has its Q/K rows permuted from rotate-half to
    /// adjacent pairs, as llama.cpp's converter does for the llama family (whose GGUF files
    /// then run with adjacent-pair RoPE).
    pub qk_permute: bool,
    /// Whether `kiln quantize` writes a checkpoint of this architecture as a GGUF file: its
    /// converted layout (names, metadata keys, permutations) has been checked to load and
    /// generate in llama.cpp.
    pub gguf_export: bool,
    /// Reads the configuration from metadata and binds the tensors.
    pub(crate) build: BuildFn,
    /// How a Hugging Face checkpoint of this architecture translates.
    pub(crate) hf: HfArch,
}

/// Every architecture Kiln implements. Error messages, conversion and the documentation
/// tests all derive their lists from this one.
pub static ARCHITECTURES: &[&ArchDescriptor] = &[
    &llama::LLAMA,
    &qwen2::QWEN2,
    &qwen3::QWEN3,
    &gemma2::GEMMA2,
    &gemma3::GEMMA3,
    &phi2::PHI2,
    &phi3::PHI3,
    &gpt2::GPT2,
    &smollm3::SMOLLM3,
    &olmo2::OLMO2,
    &granite::GRANITE,
    &qwen3moe::QWEN3MOE,
    &qwen2moe::QWEN2MOE,
    &olmoe::OLMOE,
];

/// The Hugging Face `model_type`s of the mixture-of-experts architectures Kiln implements
/// (their GGUF names: [`MOE_ARCHITECTURES`]).
pub const MOE_HF_MODEL_TYPES: &[&str] = &["mixtral", "qwen3_moe", "qwen2_moe", "olmoe"];

/// Mixture-of-experts architectures Kiln does not implement, by GGUF name (llama.cpp's):
/// refused as such, with the list of those it does.
const UNSUPPORTED_MOE_GGUF: &[&str] = &[
    "deepseek",
    "deepseek2",
    "gpt-oss",
    "qwen3next",
    "qwen3vlmoe",
    "glm4moe",
    "dbrx",
    "arctic",
    "grok",
    "llama4",
    "phimoe",
    "granitemoe",
    "hunyuan-moe",
    "ernie4_5-moe",
    "bailingmoe",
    "bailingmoe2",
    "dots1",
    "minimax-m2",
    "jamba",
];

/// The same, by Hugging Face `model_type`.
const UNSUPPORTED_MOE_HF: &[&str] = &[
    "deepseek_v2",
    "deepseek_v3",
    "gpt_oss",
    "qwen3_next",
    "qwen3_vl_moe",
    "glm4_moe",
    "dbrx",
    "arctic",
    "llama4",
    "phimoe",
    "granitemoe",
    "hunyuan_v1_moe",
    "ernie4_5_moe",
    "dots1",
    "minimax",
    "jamba",
    "jetmoe",
];

impl ArchDescriptor {
    /// The architecture whose GGUF `general.architecture` is `name`.
    pub fn by_gguf_name(name: &str) -> Result<&'static ArchDescriptor, ModelError> {
        ARCHITECTURES
            .iter()
            .copied()
            .find(|a| a.gguf_name == name)
            .ok_or_else(|| {
                if UNSUPPORTED_MOE_GGUF.contains(&name) {
                    ModelError::UnsupportedMoeArchitecture {
                        arch: name.to_string(),
                        moe_supported: MOE_ARCHITECTURES.to_vec(),
                        supported: supported_architectures(),
                    }
                } else {
                    ModelError::UnsupportedArchitecture {
                        arch: name.to_string(),
                        supported: supported_architectures(),
                    }
                }
            })
    }

    /// The architecture a Hugging Face `config.json` with this `model_type` loads as.
    pub fn by_hf_model_type(model_type: &str) -> Result<&'static ArchDescriptor, ModelError> {
        ARCHITECTURES
            .iter()
            .copied()
            .find(|a| a.hf_model_types.contains(&model_type))
            .ok_or_else(|| {
                if UNSUPPORTED_MOE_HF.contains(&model_type) {
                    ModelError::UnsupportedMoeArchitecture {
                        arch: model_type.to_string(),
                        moe_supported: MOE_HF_MODEL_TYPES.to_vec(),
                        supported: supported_hf_model_types(),
                    }
                } else {
                    ModelError::UnsupportedArchitecture {
                        arch: model_type.to_string(),
                        supported: supported_hf_model_types(),
                    }
                }
            })
    }
}

/// The GGUF `general.architecture` names Kiln implements, in [`ARCHITECTURES`] order.
pub fn supported_architectures() -> Vec<&'static str> {
    ARCHITECTURES.iter().map(|a| a.gguf_name).collect()
}

/// The Hugging Face `model_type`s Kiln loads, in [`ARCHITECTURES`] order.
pub fn supported_hf_model_types() -> Vec<&'static str> {
    ARCHITECTURES
        .iter()
        .flat_map(|a| a.hf_model_types.iter().copied())
        .collect()
}

/// Reads a Hugging Face directory's `config.json` as the architecture its `model_type`
/// names.
pub(crate) fn read_hf_config(dir: &Path) -> Result<HfModel, ModelError> {
    translate_hf(&crate::hf::read_config(dir)?)
}

/// Translates a `config.json` as the architecture its `model_type` names.
pub(crate) fn translate_hf(json: &ConfigJson) -> Result<HfModel, ModelError> {
    let c = json.config();
    let arch = ArchDescriptor::by_hf_model_type(c.model_type()?)?;
    c.translate(arch.gguf_name, &arch.hf)
}

/// Builds the configuration and tensor bindings for the file's architecture.
pub(crate) fn build(md: &Metadata, store: &WeightStore) -> Result<ModelSpec, ModelError> {
    let arch = ArchDescriptor::by_gguf_name(md.str("general.architecture")?)?;
    (arch.build)(md, store)
}
