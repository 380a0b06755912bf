//! `phi3`: Phi-3 / Phi-3.5 / Phi-4-mini. Llama-like with a fused QKV projection (or
//! separate ones), a fused gate+up projection (`ffn_up` of `2·n_ff` rows, gate first) when
//! `ffn_gate` is absent, NeoX RoPE (partial when `rope.dimension_count` says so). As in
//! llama.cpp, the sliding window some Phi-3 configs declare is not applied, and the
//! LongRoPE scaling of the 128k models (`rope_factors_long`) is refused.

use kiln_format::Metadata;

use super::ArchDescriptor;
use super::bind::{BlockTensors, Qkv, Want, uniform_spec};
use crate::ModelError;
use crate::config::{Activation, RopeStyle, SUPPORTED_ROPE_SCALING, common_config};
use crate::hf::{HfArch, names};
use crate::spec::ModelSpec;
use crate::weights::WeightStore;

const NAME: &str = "phi3";

pub(crate) static PHI3: ArchDescriptor = ArchDescriptor {
    gguf_name: NAME,
    hf_model_types: &["phi3"],
    qk_permute: false,
    gguf_export: false,
    build,
    hf: HfArch {
        // Checkpoints fuse gate and up into one `gate_up_proj`.
        tensor: names::llama_fused_gate_up,
        ..HfArch::LLAMA
    },
};

fn build(md: &Metadata, store: &WeightStore) -> Result<ModelSpec, ModelError> {
    let mut cfg = common_config(md, NAME, RopeStyle::Neox, Activation::Silu)?;
    // llama.cpp's graph scales the query, not the scores.
    cfg.scale_query = true;
    cfg.validate()?;
    if store.has("rope_factors_long.weight") || store.has("rope_factors_short.weight") {
        return Err(ModelError::UnsupportedRopeScaling {
            kind: "longrope".into(),
            supported: SUPPORTED_ROPE_SCALING.to_vec(),
        });
    }
    let opts = BlockTensors {
        qkv: Qkv::FusedOrSeparate,
        qkv_bias: Want::No,
        out_bias: Want::No,
        ..BlockTensors::LLAMA
    };
    uniform_spec(store, cfg, &opts, false)
}
