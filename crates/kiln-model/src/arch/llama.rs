//! `llama`: Llama 1/2/3, Mistral, TinyLlama, SmolLM, and Mixtral. RMSNorm, SwiGLU, GQA,
//! optional attention biases, Llama 3 RoPE frequency factors (`rope_freqs`), and a sliding
//! window on every layer when the metadata has one (Mistral checkpoints). A file with
//! `llama.expert_count` (Mixtral) has a mixture-of-experts feed-forward in every layer:
//! softmax over all experts, top-k, the selected weights renormalised to sum 1.
//!
//! RoPE pairing depends on the source: GGUF converters permute the Q/K rows so that
//! adjacent pairs `(x[2i], x[2i+1])` rotate together; Hugging Face checkpoints keep the
//! original rotate-half layout. Rather than permuting weights on load (a copy), Kiln runs
//! GGUF llama files with [`RopeStyle::Normal`] and checkpoints with [`RopeStyle::Neox`] —
//! the same arithmetic on the same values, pairs gathered differently.

use kiln_format::Metadata;

use super::ArchDescriptor;
use super::bind::{BlockTensors, Ffn, bind_head, bind_layers, spec};
use crate::ModelError;
use crate::config::{Activation, RopeStyle, arch_opt_usize, common_config};
use crate::hf::{ArchKeys, HfArch, HfConfig, moe_keys, names};
use crate::moe::config::{MoeConfig, MoeDefaults};
use crate::spec::ModelSpec;
use crate::weights::{SourceKind, WeightStore};

const NAME: &str = "llama";

pub(crate) static LLAMA: ArchDescriptor = ArchDescriptor {
    gguf_name: NAME,
    hf_model_types: &["llama", "mistral", "mixtral"],
    qk_permute: true,
    gguf_export: true,
    build,
    hf: HfArch {
        tensor: names::moe,
        config: hf_config,
        ..HfArch::LLAMA
    },
};

fn build(md: &Metadata, store: &WeightStore) -> Result<ModelSpec, ModelError> {
    let style = match store.kind() {
        SourceKind::Gguf => RopeStyle::Normal,
        SourceKind::Safetensors => RopeStyle::Neox,
    };
    let cfg = common_config(md, NAME, style, Activation::Silu)?;
    cfg.validate()?;
    let opts = match MoeConfig::from_metadata(md, &MoeDefaults::LLAMA, cfg.n_ff)? {
        Some(moe) => BlockTensors {
            ffn: Ffn::Moe(moe),
            ..BlockTensors::LLAMA
        },
        None => BlockTensors::LLAMA,
    };
    let mut layers = bind_layers(store, &cfg, &opts)?;
    if let Some(w) = arch_opt_usize(md, NAME, "attention.sliding_window")? {
        layers.iter_mut().for_each(|l| l.sliding_window = Some(w));
    }
    let head = bind_head(store, &cfg, false, false)?;
    let rope_freqs = store.opt_vector("rope_freqs.weight", cfg.n_rot / 2)?;
    let mut s = spec(cfg, head, layers);
    s.rope_freqs = rope_freqs;
    Ok(s)
}

/// Refuses MLP biases; Mistral's `sliding_window` applies to every layer; Mixtral's expert
/// keys.
fn hf_config(c: &HfConfig<'_>, keys: &mut ArchKeys<'_>) -> Result<(), ModelError> {
    if c.opt_bool("mlp_bias")? == Some(true) {
        return Err(c.err("mlp_bias", "biases on the MLP are not supported"));
    }
    if c.model_type()? == "mistral"
        && let Some(w) = c.opt_usize(&["sliding_window"])?
    {
        keys.set("attention.sliding_window", w as u64);
    }
    if c.model_type()? == "mixtral" {
        if let Some(w) = c.opt_usize(&["sliding_window"])? {
            keys.set("attention.sliding_window", w as u64);
        }
        moe_keys(c, keys)?;
    }
    Ok(())
}
