//! `olmo2`: OLMo 2 (dense). No pre-norms: attention and the feed-forward read the residual
//! stream itself, and RMSNorms on their outputs (`post_attention_norm`, `post_ffw_norm`)
//! come before each residual add. Q and K are RMSNormed over the whole projection (one
//! weight of `heads × head_dim`, not per head) before NeoX RoPE. No biases, SwiGLU, an
//! untied head by default. Checkpoints name the output norms `post_attention_layernorm`
//! (a pre-FFN norm in llama checkpoints) and `post_feedforward_layernorm`.
//!
//! llama.cpp also files OLMo 3's sliding-window layers under this name; a GGUF file with
//! `olmo2.attention.sliding_window` is refused rather than run without its windows.

use kiln_format::Metadata;

use super::ArchDescriptor;
use super::bind::{BlockTensors, Want, bind_head, bind_layers, spec};
use crate::ModelError;
use crate::config::{Activation, RopeStyle, common_config};
use crate::hf::HfArch;
use crate::hf::names::{self, HfTensor, Transform, one, split_layer};
use crate::spec::ModelSpec;
use crate::weights::WeightStore;

const NAME: &str = "olmo2";

pub(crate) static OLMO2: ArchDescriptor = ArchDescriptor {
    gguf_name: NAME,
    hf_model_types: &["olmo2"],
    qk_permute: false,
    gguf_export: false,
    build,
    hf: HfArch {
        tensor: hf_names,
        ..HfArch::LLAMA
    },
};

fn build(md: &Metadata, store: &WeightStore) -> Result<ModelSpec, ModelError> {
    let cfg = common_config(md, NAME, RopeStyle::Neox, Activation::Silu)?;
    cfg.validate()?;
    let key = format!("{NAME}.attention.sliding_window");
    if md.get(&key).is_some() {
        return Err(ModelError::InvalidConfig(format!(
            "{key}: sliding-window layers (OLMo 3) are not supported; supported: OLMo 2 \
             (full attention on every layer)"
        )));
    }
    let opts = BlockTensors {
        qkv_bias: Want::No,
        out_bias: Want::No,
        attn_norm: false,
        ffn_norm: false,
        post_norms: true,
        ..BlockTensors::LLAMA
    };
    let mut layers = bind_layers(store, &cfg, &opts)?;
    for (il, layer) in layers.iter_mut().enumerate() {
        let n = |s: &str| format!("blk.{il}.{s}");
        layer.q_norm = Some(store.vector(&n("attn_q_norm.weight"), cfg.q_dim())?);
        layer.k_norm = Some(store.vector(&n("attn_k_norm.weight"), cfg.k_dim())?);
    }
    let head = bind_head(store, &cfg, false, false)?;
    Ok(spec(cfg, head, layers))
}

/// The llama names, with the two output norms where OLMo 2 keeps them and no pre-norms.
fn hf_names(gguf: &str, tied: bool) -> Option<HfTensor> {
    let hf = match split_layer(gguf) {
        Some((_, "attn_norm.weight" | "ffn_norm.weight")) => return None,
        Some((il, "post_attention_norm.weight")) => {
            format!("model.layers.{il}.post_attention_layernorm.weight")
        }
        Some((il, "post_ffw_norm.weight")) => {
            format!("model.layers.{il}.post_feedforward_layernorm.weight")
        }
        _ => return names::llama(gguf, tied),
    };
    Some(one(hf, Transform::None))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_norms_map_to_olmo2_names_and_pre_norms_to_none() {
        let name = |g: &str| hf_names(g, false).map(|t| t.candidates[0].clone());
        assert_eq!(
            name("blk.1.post_attention_norm.weight").as_deref(),
            Some("model.layers.1.post_attention_layernorm.weight")
        );
        assert_eq!(
            name("blk.1.post_ffw_norm.weight").as_deref(),
            Some("model.layers.1.post_feedforward_layernorm.weight")
        );
        assert_eq!(name("blk.1.ffn_norm.weight"), None);
        assert_eq!(name("blk.1.attn_norm.weight"), None);
        assert_eq!(
            name("blk.1.attn_q_norm.weight").as_deref(),
            Some("model.layers.1.self_attn.q_norm.weight")
        );
    }
}
