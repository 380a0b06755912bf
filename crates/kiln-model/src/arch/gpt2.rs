//! `gpt2`: GPT-2. Learned absolute position embeddings (no RoPE), LayerNorm with biases,
//! a fused QKV projection with bias, a plain GELU FFN with biases, the head tied to the
//! embedding unless `output.weight` exists. Checkpoints store `Conv1D` weights `[in, out]`
//! and come with and without the `transformer.` prefix.

use kiln_format::Metadata;

use super::ArchDescriptor;
use super::bind::{BlockTensors, plain_gelu_config, uniform_spec};
use crate::ModelError;
use crate::config::{NormKind, RopeStyle};
use crate::hf::names::{HfTensor, Transform, one, split_layer};
use crate::hf::{HfArch, Positions};
use crate::spec::ModelSpec;
use crate::weights::WeightStore;

const NAME: &str = "gpt2";

pub(crate) static GPT2: ArchDescriptor = ArchDescriptor {
    gguf_name: NAME,
    hf_model_types: &["gpt2"],
    qk_permute: false,
    gguf_export: false,
    build,
    hf: HfArch {
        norm: NormKind::Layer,
        activation_keys: &["activation_function"],
        activations: &["gelu_new", "gelu_pytorch_tanh"],
        positions: Positions::Learned,
        ff_default_mult: Some(4),
        tied_default: true,
        tensor: hf_tensor,
        ..HfArch::LLAMA
    },
};

fn build(md: &Metadata, store: &WeightStore) -> Result<ModelSpec, ModelError> {
    let mut cfg = plain_gelu_config(md, NAME, RopeStyle::Normal)?;
    cfg.n_rot = 0;
    let mut s = uniform_spec(store, cfg, &BlockTensors::GPT2, false)?;
    s.pos_embd = Some(store.matrix("position_embd.weight", s.cfg.n_embd, s.cfg.n_ctx_train)?);
    Ok(s)
}

/// `h.N.{attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj}`, `Conv1D` weights transposed.
fn hf_tensor(gguf: &str, tied: bool) -> Option<HfTensor> {
    let both = |name: String, transform| HfTensor {
        candidates: vec![name.clone(), format!("transformer.{name}")],
        transform,
    };
    let none = Transform::None;
    match gguf {
        "token_embd.weight" => return Some(both("wte.weight".into(), none)),
        "position_embd.weight" => return Some(both("wpe.weight".into(), none)),
        "output_norm.weight" => return Some(both("ln_f.weight".into(), none)),
        "output_norm.bias" => return Some(both("ln_f.bias".into(), none)),
        "output.weight" if !tied => return Some(one("lm_head.weight".into(), none)),
        _ => {}
    }
    let (il, rest) = split_layer(gguf)?;
    let (part, kind) = rest.rsplit_once('.')?;
    let hf = match part {
        "attn_norm" => "ln_1",
        "attn_qkv" => "attn.c_attn",
        "attn_output" => "attn.c_proj",
        "ffn_norm" => "ln_2",
        "ffn_up" => "mlp.c_fc",
        "ffn_down" => "mlp.c_proj",
        _ => return None,
    };
    let conv1d = kind == "weight" && !part.ends_with("norm");
    let t = if conv1d { Transform::Transpose } else { none };
    Some(both(format!("h.{il}.{hf}.{kind}"), t))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conv1d_weights_are_transposed_and_prefixes_tried() {
        let t = hf_tensor("blk.4.attn_qkv.weight", true).unwrap();
        assert_eq!(
            t.candidates,
            [
                "h.4.attn.c_attn.weight",
                "transformer.h.4.attn.c_attn.weight"
            ]
        );
        assert_eq!(t.transform, Transform::Transpose);
        assert_eq!(
            hf_tensor("blk.4.attn_qkv.bias", true).unwrap().transform,
            Transform::None
        );
        assert_eq!(
            hf_tensor("blk.4.ffn_norm.weight", true).unwrap().transform,
            Transform::None
        );
    }
}
