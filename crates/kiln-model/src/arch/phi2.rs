//! `phi2`: Phi-2 (and Phi-1.5). LayerNorm with biases; attention and FFN in parallel on
//! the same normalised input, both added to the residual; Q/K/V with biases (fused
//! `attn_qkv` or separate); NeoX RoPE on only the first `rope.dimension_count` dimensions
//! of each head (partial rotary: 32 of 80); a plain GELU FFN (`ffn_up`, no gate) with
//! biases; an output head with a bias.

use kiln_format::Metadata;

use super::{BlockTensors, Ffn, Qkv, Want, bind_head, bind_layers, spec};
use crate::ModelError;
use crate::config::{Activation, NormKind, RopeStyle, common_config_with};
use crate::spec::ModelSpec;
use crate::weights::WeightStore;

pub(crate) fn build(md: &Metadata, store: &WeightStore) -> Result<ModelSpec, ModelError> {
    let mut cfg = common_config_with(
        md,
        "phi2",
        RopeStyle::Neox,
        Activation::GeluTanh,
        NormKind::Layer,
    )?;
    cfg.parallel_residual = true;
    cfg.validate()?;
    let opts = BlockTensors {
        qkv: Qkv::FusedOrSeparate,
        qkv_bias: Want::Yes,
        out_bias: Want::Yes,
        qk_norm: false,
        post_norms: false,
        norm_bias: true,
        ffn: Ffn::Plain,
        ffn_bias: true,
        ffn_norm: false,
    };
    let layers = bind_layers(store, &cfg, &opts)?;
    let head = bind_head(store, &cfg, true, true)?;
    Ok(spec(cfg, head, layers))
}
