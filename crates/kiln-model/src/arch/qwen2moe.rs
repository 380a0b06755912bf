//! `qwen2moe`: Qwen1.5-MoE / Qwen2-MoE. The Qwen2 block (biases on Q, K and V, NeoX RoPE)
//! with a mixture-of-experts feed-forward in every layer: softmax over all experts, top-k,
//! the selected weights **not** renormalised (llama.cpp fixes this for the architecture),
//! plus one shared expert every token goes through, its output scaled by
//! `sigmoid(x · ffn_gate_inp_shexp)` and added to the routed sum.

use kiln_format::Metadata;

use super::ArchDescriptor;
use super::bind::{BlockTensors, Ffn, Want, uniform_spec};
use crate::ModelError;
use crate::config::{Activation, RopeStyle, common_config};
use crate::hf::{ArchKeys, HfArch, HfConfig, moe_keys, names};
use crate::moe::config::{MoeConfig, MoeDefaults};
use crate::spec::ModelSpec;
use crate::weights::WeightStore;

const NAME: &str = "qwen2moe";

pub(crate) static QWEN2MOE: ArchDescriptor = ArchDescriptor {
    gguf_name: NAME,
    hf_model_types: &["qwen2_moe"],
    qk_permute: false,
    gguf_export: false,
    build,
    hf: HfArch {
        tensor: names::moe,
        config: hf_config,
        ..HfArch::LLAMA
    },
};

fn build(md: &Metadata, store: &WeightStore) -> Result<ModelSpec, ModelError> {
    let cfg = common_config(md, NAME, RopeStyle::Neox, Activation::Silu)?;
    let moe = MoeConfig::required(md, &MoeDefaults::QWEN2MOE, cfg.n_ff)?;
    let opts = BlockTensors {
        qkv_bias: Want::Yes,
        out_bias: Want::No,
        ffn: Ffn::Moe(moe),
        ..BlockTensors::LLAMA
    };
    uniform_spec(store, cfg, &opts, false)
}

/// The expert keys; sliding-window layers are refused.
fn hf_config(c: &HfConfig<'_>, keys: &mut ArchKeys<'_>) -> Result<(), ModelError> {
    if c.opt_bool("use_sliding_window")? == Some(true) {
        return Err(c.err(
            "use_sliding_window",
            "Qwen2-MoE sliding-window layers are not supported",
        ));
    }
    moe_keys(c, keys)
}
