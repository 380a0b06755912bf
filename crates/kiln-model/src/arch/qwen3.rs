//! `qwen3`: Qwen3 (dense). Llama-like with per-head RMSNorm of Q and K before RoPE, NeoX
//! RoPE, no biases, and a head dimension from `attention.key_length` that need not be
//! `hidden / heads` (Qwen3-0.6B: 16 heads × 128 = 2048 ≠ 1024), so the output projection
//! maps `q_dim` back to the hidden size.

use kiln_format::Metadata;

use super::{BlockTensors, Want, bind_head, bind_layers, spec};
use crate::ModelError;
use crate::config::{Activation, RopeStyle, common_config};
use crate::spec::ModelSpec;
use crate::weights::WeightStore;

pub(crate) fn build(md: &Metadata, store: &WeightStore) -> Result<ModelSpec, ModelError> {
    let cfg = common_config(md, "qwen3", RopeStyle::Neox, Activation::Silu)?;
    cfg.validate()?;
    let opts = BlockTensors {
        qkv_bias: Want::No,
        out_bias: Want::No,
        qk_norm: true,
        ..BlockTensors::LLAMA
    };
    let layers = bind_layers(store, &cfg, &opts)?;
    let head = bind_head(store, &cfg, false, false)?;
    Ok(spec(cfg, head, layers))
}
