//! `qwen3moe`: Qwen3-MoE (Qwen3-30B-A3B, Qwen3-235B-A22B). The Qwen3 block (per-head
//! RMSNorm of Q and K, NeoX RoPE, no biases, head dimension from `attention.key_length`)
//! with a mixture-of-experts feed-forward in every layer: softmax over all experts, top-k,
//! the selected weights renormalised to sum 1 (llama.cpp fixes this for the architecture;
//! a checkpoint's `norm_topk_prob` says it), no shared expert.

use kiln_format::Metadata;

use super::ArchDescriptor;
use super::bind::{BlockTensors, Ffn, Want, uniform_spec};
use crate::ModelError;
use crate::config::{Activation, RopeStyle, common_config};
use crate::hf::{ArchKeys, HfArch, HfConfig, moe_keys, names};
use crate::moe::config::{MoeConfig, MoeDefaults};
use crate::spec::ModelSpec;
use crate::weights::WeightStore;

const NAME: &str = "qwen3moe";

pub(crate) static QWEN3MOE: ArchDescriptor = ArchDescriptor {
    gguf_name: NAME,
    hf_model_types: &["qwen3_moe"],
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
    let moe = MoeConfig::required(md, &MoeDefaults::QWEN3MOE, cfg.n_ff)?;
    let opts = BlockTensors {
        qkv_bias: Want::No,
        out_bias: Want::No,
        qk_norm: true,
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
            "Qwen3-MoE sliding-window layers are not supported",
        ));
    }
    moe_keys(c, keys)
}
