//! `qwen2`: Qwen2 / Qwen2.5. Llama-like with biases on Q, K and V and NeoX-style RoPE.

use kiln_format::Metadata;

use super::{BlockTensors, Want, bind_head, bind_layers, spec};
use crate::ModelError;
use crate::config::{Activation, RopeStyle, common_config};
use crate::spec::ModelSpec;
use crate::weights::WeightStore;

pub(crate) fn build(md: &Metadata, store: &WeightStore) -> Result<ModelSpec, ModelError> {
    let cfg = common_config(md, "qwen2", RopeStyle::Neox, Activation::Silu)?;
    cfg.validate()?;
    let opts = BlockTensors {
        qkv_bias: Want::Yes,
        out_bias: Want::No,
        ..BlockTensors::LLAMA
    };
    let layers = bind_layers(store, &cfg, &opts)?;
    let head = bind_head(store, &cfg, false, false)?;
    Ok(spec(cfg, head, layers))
}
