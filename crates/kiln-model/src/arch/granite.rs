//! `granite`: IBM Granite 3 (dense). The llama block with four multipliers: embeddings ×
//! `embedding_scale`, attention scores × `attention.scale` (instead of `head_dim^-1/2`),
//! each block's attention and feed-forward outputs × `residual_scale` before they join the
//! residual stream, and logits ÷ `logit_scale`. Checkpoints name them
//! `embedding_multiplier`, `attention_multiplier`, `residual_multiplier` and
//! `logits_scaling`; absent, each is 1 (and the attention scale `head_dim^-1/2`).
//!
//! RoPE pairing follows the source as for `llama`: llama.cpp's converter permutes the Q/K
//! rows (adjacent pairs), checkpoints keep halves.

use kiln_format::Metadata;

use super::ArchDescriptor;
use super::bind::{BlockTensors, attn_scale, bind_head, bind_layers, spec};
use crate::ModelError;
use crate::config::{Activation, RopeStyle, arch_opt_f32, common_config};
use crate::hf::{ArchKeys, HfArch, HfConfig};
use crate::spec::ModelSpec;
use crate::weights::{SourceKind, WeightStore};

const NAME: &str = "granite";

pub(crate) static GRANITE: ArchDescriptor = ArchDescriptor {
    gguf_name: NAME,
    hf_model_types: &["granite"],
    qk_permute: true,
    gguf_export: false,
    build,
    hf: HfArch {
        config: hf_config,
        ..HfArch::LLAMA
    },
};

fn build(md: &Metadata, store: &WeightStore) -> Result<ModelSpec, ModelError> {
    let style = match store.kind() {
        SourceKind::Gguf => RopeStyle::Normal,
        SourceKind::Safetensors => RopeStyle::Neox,
    };
    let mut cfg = common_config(md, NAME, style, Activation::Silu)?;
    cfg.attn_scale = attn_scale(md, NAME, cfg.head_dim)?;
    cfg.validate()?;
    let scale = |key: &str| -> Result<Option<f32>, ModelError> {
        match arch_opt_f32(md, NAME, key)? {
            Some(v) if !(v.is_finite() && v != 0.0) => Err(ModelError::InvalidConfig(format!(
                "{NAME}.{key} {v} is not a finite nonzero number"
            ))),
            v => Ok(v),
        }
    };
    let embed_scale = scale("embedding_scale")?;
    let residual_scale = scale("residual_scale")?;
    let logit_scale = scale("logit_scale")?;
    if !(cfg.attn_scale.is_finite() && cfg.attn_scale != 0.0) {
        return Err(ModelError::InvalidConfig(format!(
            "{NAME}.attention.scale {} is not a finite nonzero number",
            cfg.attn_scale
        )));
    }
    let layers = bind_layers(store, &cfg, &BlockTensors::LLAMA)?;
    let head = bind_head(store, &cfg, false, false)?;
    let mut s = spec(cfg, head, layers);
    s.embed_scale = embed_scale;
    s.residual_scale = residual_scale;
    s.logit_scale = logit_scale;
    Ok(s)
}

/// The four multipliers under llama.cpp's key names; refuses MLP biases.
fn hf_config(c: &HfConfig<'_>, keys: &mut ArchKeys<'_>) -> Result<(), ModelError> {
    if c.opt_bool("mlp_bias")? == Some(true) {
        return Err(c.err("mlp_bias", "biases on the MLP are not supported"));
    }
    for (hf, gguf) in [
        ("attention_multiplier", "attention.scale"),
        ("embedding_multiplier", "embedding_scale"),
        ("residual_multiplier", "residual_scale"),
        ("logits_scaling", "logit_scale"),
    ] {
        if let Some(v) = c.opt_f32(&[hf])? {
            keys.set(gguf, v);
        }
    }
    Ok(())
}
