//! `olmoe`: OLMoE (OLMoE-1B-7B). A llama block whose Q and K are RMS-normalised over each
//! token's whole projection (one weight of `q_dim` / `k_dim` values, not per head) before
//! NeoX RoPE, with a mixture-of-experts feed-forward in every layer: softmax over all
//! experts, top-k, the selected weights **not** renormalised (llama.cpp fixes this for the
//! architecture; a checkpoint's `norm_topk_prob` says it), no shared expert.

use kiln_format::Metadata;

use super::ArchDescriptor;
use super::bind::{BlockTensors, Ffn, bind_head, bind_layers, spec};
use crate::ModelError;
use crate::config::{Activation, RopeStyle, common_config};
use crate::hf::{ArchKeys, HfArch, HfConfig, moe_keys, names};
use crate::moe::config::{MoeConfig, MoeDefaults};
use crate::spec::ModelSpec;
use crate::weights::WeightStore;

const NAME: &str = "olmoe";

pub(crate) static OLMOE: ArchDescriptor = ArchDescriptor {
    gguf_name: NAME,
    hf_model_types: &["olmoe"],
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
    cfg.validate()?;
    let moe = MoeConfig::required(md, &MoeDefaults::OLMOE, cfg.n_ff)?;
    let opts = BlockTensors {
        ffn: Ffn::Moe(moe),
        ..BlockTensors::LLAMA
    };
    let mut layers = bind_layers(store, &cfg, &opts)?;
    for (il, l) in layers.iter_mut().enumerate() {
        l.q_norm = Some(store.vector(&format!("blk.{il}.attn_q_norm.weight"), cfg.q_dim())?);
        l.k_norm = Some(store.vector(&format!("blk.{il}.attn_k_norm.weight"), cfg.k_dim())?);
    }
    let head = bind_head(store, &cfg, false, false)?;
    Ok(spec(cfg, head, layers))
}

/// The expert keys; `clip_qkv` is refused.
fn hf_config(c: &HfConfig<'_>, keys: &mut ArchKeys<'_>) -> Result<(), ModelError> {
    if let Some(clip) = c.opt_f32(&["clip_qkv"])? {
        return Err(c.err(
            "clip_qkv",
            format!("{clip}: clipping Q, K and V is not supported"),
        ));
    }
    moe_keys(c, keys)
}
