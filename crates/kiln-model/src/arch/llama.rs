//! `llama`: Llama 1/2/3, Mistral, TinyLlama, SmolLM. RMSNorm, SwiGLU, GQA, RoPE on
//! adjacent pairs (the GGUF converter permuted Q/K for it).

use kiln_format::Metadata;

use super::{BlockTensors, bind_head, bind_layer};
use crate::ModelError;
use crate::config::{Activation, RopeStyle, common_config};
use crate::model::ModelSpec;
use crate::weights::WeightStore;

pub(crate) fn build(md: &Metadata, store: &WeightStore) -> Result<ModelSpec, ModelError> {
    let cfg = common_config(md, "llama", RopeStyle::Normal, Activation::Silu)?;
    cfg.validate()?;
    let opts = BlockTensors {
        qkv_bias: false,
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
