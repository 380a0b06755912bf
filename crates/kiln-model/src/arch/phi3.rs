//! `phi3`: Phi-3 / Phi-3.5 / Phi-4-mini. Llama-like with a fused QKV projection (or
//! separate ones), a fused gate+up projection (`ffn_up` of `2·n_ff` rows, gate first) when
//! `ffn_gate` is absent, NeoX RoPE (partial when `rope.dimension_count` says so). As in
//! llama.cpp, the sliding window some Phi-3 configs declare is not applied, and the
//! LongRoPE scaling of the 128k models (`rope_factors_long`) is refused.

use kiln_format::Metadata;

use super::{BlockTensors, Qkv, Want, bind_head, bind_layers, spec};
use crate::ModelError;
use crate::config::{Activation, RopeStyle, SUPPORTED_ROPE_SCALING, common_config};
use crate::spec::ModelSpec;
use crate::weights::WeightStore;

pub(crate) fn build(md: &Metadata, store: &WeightStore) -> Result<ModelSpec, ModelError> {
    let cfg = common_config(md, "phi3", RopeStyle::Neox, Activation::Silu)?;
    cfg.validate()?;
    if store.has("rope_factors_long.weight") || store.has("rope_factors_short.weight") {
        return Err(ModelError::UnsupportedRopeScaling {
            kind: "longrope".into(),
            supported: SUPPORTED_ROPE_SCALING.to_vec(),
        });
    }
    let opts = BlockTensors {
        qkv: Qkv::FusedOrSeparate,
        qkv_bias: Want::No,
        out_bias: Want::No,
        ..BlockTensors::LLAMA
    };
    let layers = bind_layers(store, &cfg, &opts)?;
    let head = bind_head(store, &cfg, false, false)?;
    Ok(spec(cfg, head, layers))
}
