//! `phi2`: Phi-2 (and Phi-1.5). The GPT-2 block with RoPE: LayerNorm with biases;
//! attention and FFN in parallel on the same normalised input, both added to the residual;
//! Q/K/V with biases (fused `attn_qkv` or separate); NeoX RoPE on only the first
//! `rope.dimension_count` dimensions of each head (partial rotary: 32 of 80, the
//! checkpoint default 0.5 when `partial_rotary_factor` is absent); a plain GELU FFN
//! (`ffn_up`, no gate) with biases; an output head with a bias.

use kiln_format::Metadata;

use super::ArchDescriptor;
use super::bind::{BlockTensors, plain_gelu_config, uniform_spec};
use crate::ModelError;
use crate::config::{NormKind, RopeStyle};
use crate::hf::names::{HfTensor, Transform, one, split_layer};
use crate::hf::{ArchKeys, HfArch, HfConfig, Positions};
use crate::spec::ModelSpec;
use crate::weights::WeightStore;

const NAME: &str = "phi2";

pub(crate) static PHI2: ArchDescriptor = ArchDescriptor {
    gguf_name: NAME,
    hf_model_types: &["phi"],
    qk_permute: false,
    gguf_export: false,
    build,
    hf: HfArch {
        norm: NormKind::Layer,
        activations: &["gelu_new", "gelu_pytorch_tanh"],
        positions: Positions::Rope {
            default_partial: 0.5,
        },
        tensor: hf_tensor,
        config: hf_config,
        ..HfArch::LLAMA
    },
};

fn build(md: &Metadata, store: &WeightStore) -> Result<ModelSpec, ModelError> {
    let mut cfg = plain_gelu_config(md, NAME, RopeStyle::Neox)?;
    cfg.parallel_residual = true;
    // llama.cpp's graph scales the query, not the scores.
    cfg.scale_query = true;
    // Parallel blocks: the FFN reads the attention norm's output.
    let opts = BlockTensors {
        ffn_norm: false,
        ..BlockTensors::GPT2
    };
    uniform_spec(store, cfg, &opts, true)
}

/// Refuses Q/K LayerNorm (`qk_layernorm`).
fn hf_config(c: &HfConfig<'_>, _: &mut ArchKeys<'_>) -> Result<(), ModelError> {
    if c.opt_bool("qk_layernorm")? == Some(true) {
        return Err(c.err("qk_layernorm", "Q/K LayerNorm is not supported"));
    }
    Ok(())
}

/// `model.layers.N.{self_attn.dense, mlp.fc1, mlp.fc2}`, LayerNorms with biases.
fn hf_tensor(gguf: &str, tied: bool) -> Option<HfTensor> {
    let none = Transform::None;
    match gguf {
        "token_embd.weight" => return Some(one("model.embed_tokens.weight".into(), none)),
        "output_norm.weight" => return Some(one("model.final_layernorm.weight".into(), none)),
        "output_norm.bias" => return Some(one("model.final_layernorm.bias".into(), none)),
        "output.weight" if !tied => return Some(one("lm_head.weight".into(), none)),
        "output.bias" => return Some(one("lm_head.bias".into(), none)),
        _ => {}
    }
    let (il, rest) = split_layer(gguf)?;
    let (part, kind) = rest.rsplit_once('.')?;
    let hf = match part {
        "attn_norm" => "input_layernorm",
        "attn_q" => "self_attn.q_proj",
        "attn_k" => "self_attn.k_proj",
        "attn_v" => "self_attn.v_proj",
        "attn_output" => "self_attn.dense",
        "ffn_up" => "mlp.fc1",
        "ffn_down" => "mlp.fc2",
        _ => return None,
    };
    Some(one(format!("model.layers.{il}.{hf}.{kind}"), none))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_cover_biases_and_dense() {
        let first = |gguf| hf_tensor(gguf, false).unwrap().candidates[0].clone();
        assert_eq!(
            first("blk.0.attn_output.bias"),
            "model.layers.0.self_attn.dense.bias"
        );
        assert_eq!(first("output.bias"), "lm_head.bias");
        assert_eq!(first("output_norm.bias"), "model.final_layernorm.bias");
    }
}
