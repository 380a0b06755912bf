//! `qwen3`: Qwen3 (dense). Llama-like with per-head RMSNorm of Q and K before RoPE, NeoX
//! RoPE, no biases, and a head dimension from `attention.key_length` that need not be
//! `hidden / heads` (Qwen3-0.6B: 16 heads × 128 = 2048 ≠ 1024), so the output projection
//! maps `q_dim` back to the hidden size.

use kiln_format::Metadata;

use super::ArchDescriptor;
use super::bind::{BlockTensors, Want, uniform_spec};
use crate::ModelError;
use crate::config::{Activation, RopeStyle, common_config};
use crate::hf::HfArch;
use crate::spec::ModelSpec;
use crate::weights::WeightStore;

const NAME: &str = "qwen3";

pub(crate) static QWEN3: ArchDescriptor = ArchDescriptor {
    gguf_name: NAME,
    hf_model_types: &["qwen3"],
    qk_permute: false,
    gguf_export: false,
    build,
    hf: HfArch::LLAMA,
};

fn build(md: &Metadata, store: &WeightStore) -> Result<ModelSpec, ModelError> {
    let cfg = common_config(md, NAME, RopeStyle::Neox, Activation::Silu)?;
    let opts = BlockTensors {
        qkv_bias: Want::No,
        out_bias: Want::No,
        qk_norm: true,
        ..BlockTensors::LLAMA
    };
    uniform_spec(store, cfg, &opts, false)
}
