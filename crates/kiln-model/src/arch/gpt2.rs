//! `gpt2`: GPT-2. Learned absolute position embeddings (no RoPE), LayerNorm with biases,
//! a fused QKV projection with bias, a plain GELU FFN with biases, the head tied to the
//! embedding unless `output.weight` exists.

use kiln_format::Metadata;

use super::{BlockTensors, Ffn, Qkv, Want, bind_head, bind_layers, spec};
use crate::ModelError;
use crate::config::{Activation, NormKind, RopeStyle, common_config_with};
use crate::spec::ModelSpec;
use crate::weights::WeightStore;

pub(crate) fn build(md: &Metadata, store: &WeightStore) -> Result<ModelSpec, ModelError> {
    let mut cfg = common_config_with(
        md,
        "gpt2",
        RopeStyle::Normal,
        Activation::GeluTanh,
        NormKind::Layer,
    )?;
    cfg.n_rot = 0;
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
        ffn_norm: true,
    };
    let layers = bind_layers(store, &cfg, &opts)?;
    let head = bind_head(store, &cfg, true, false)?;
    let pos_embd = store.matrix("position_embd.weight", cfg.n_embd, cfg.n_ctx_train)?;
    let mut s = spec(cfg, head, layers);
    s.pos_embd = Some(pos_embd);
    Ok(s)
}
