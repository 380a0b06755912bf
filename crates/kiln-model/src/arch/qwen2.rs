//! `qwen2`: Qwen2 / Qwen2.5. Llama-like with biases on Q, K and V and NeoX-style RoPE.

use kiln_format::Metadata;

use super::ArchDescriptor;
use super::bind::{BlockTensors, Want, uniform_spec};
use crate::ModelError;
use crate::config::{Activation, RopeStyle, common_config};
use crate::hf::{ArchKeys, HfArch, HfConfig};
use crate::spec::ModelSpec;
use crate::weights::WeightStore;

const NAME: &str = "qwen2";

pub(crate) static QWEN2: ArchDescriptor = ArchDescriptor {
    gguf_name: NAME,
    hf_model_types: &["qwen2"],
    qk_permute: false,
    gguf_export: true,
    build,
    hf: HfArch {
        config: hf_config,
        ..HfArch::LLAMA
    },
};

fn build(md: &Metadata, store: &WeightStore) -> Result<ModelSpec, ModelError> {
    let cfg = common_config(md, NAME, RopeStyle::Neox, Activation::Silu)?;
    let opts = BlockTensors {
        qkv_bias: Want::Yes,
        out_bias: Want::No,
        ..BlockTensors::LLAMA
    };
    uniform_spec(store, cfg, &opts, false)
}

/// Refuses Qwen2's sliding-window layers (`use_sliding_window`).
fn hf_config(c: &HfConfig<'_>, _: &mut ArchKeys<'_>) -> Result<(), ModelError> {
    if c.opt_bool("use_sliding_window")? == Some(true) {
        return Err(c.err(
            "use_sliding_window",
            "Qwen2 sliding-window layers are not supported",
        ));
    }
    Ok(())
}
