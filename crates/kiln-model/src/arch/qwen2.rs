//! `qwen2`: Qwen2 / Qwen2.5. Llama-like with biases on Q, K and V and NeoX-style RoPE.

use kiln_format::Metadata;

use super::{BlockTensors, bind_head, bind_layer};
use crate::ModelError;
use crate::config::{Activation, RopeStyle, common_config};
use crate::model::ModelSpec;
use crate::weights::WeightStore;

pub(crate) fn build(md: &Metadata, store: &WeightStore) -> Result<ModelSpec, ModelError> {
    let cfg = common_config(md, "qwen2", RopeStyle::Neox, Activation::Silu)?;
    cfg.validate()?;
    let opts = BlockTensors {
        qkv_bias: true,
        qk_norm: false,
        post_norms: false,
    };
    let layers = (0..cfg.n_layer)
        .map(|il| bind_layer(store, &cfg, il, &opts))
        .collect::<Result<_, _>>()?;
    let (tok_embd, output_norm, output) = bind_head(store, &cfg)?;
    Ok(ModelSpec {
        cfg,
        tok_embd,
        output_norm,
        output,
        layers,
        embed_scale: None,
    })
}
