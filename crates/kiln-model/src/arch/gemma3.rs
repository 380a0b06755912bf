//! `gemma3`: Gemma 3 (text). Embeddings scaled by √hidden, per-head Q/K RMSNorm, norms after
//! attention and FFN as well as before, GELU-tanh gated FFN, NeoX RoPE, and sliding-window
//! attention on five of every six layers with their own RoPE base. Soft-capping when the
//! metadata asks for it (Gemma 3 checkpoints set none).

use kiln_format::Metadata;

use super::{BlockTensors, Want, attn_scale, bind_head, bind_layers, spec, swa_layers};
use crate::ModelError;
use crate::config::{Activation, RopeStyle, arch_opt_f32, arch_opt_usize, common_config};
use crate::spec::ModelSpec;
use crate::weights::WeightStore;

/// Every `SWA_PERIOD`-th layer attends globally; the others use the sliding window.
const SWA_PERIOD: usize = 6;
/// RoPE base of the sliding-window layers when the metadata does not give one.
const SWA_ROPE_BASE: f32 = 10_000.0;

pub(crate) fn build(md: &Metadata, store: &WeightStore) -> Result<ModelSpec, ModelError> {
    let mut cfg = common_config(md, "gemma3", RopeStyle::Neox, Activation::GeluTanh)?;
    // Queries are scaled by query_pre_attn_scalar^-1/2: key_length, except for the 27B
    // (62 layers), where it is hidden / heads (as llama.cpp decides for GGUF files, which
    // do not store the scalar; a checkpoint's config gives it as attention.scale).
    let scale_dim = if cfg.n_layer == 62 {
        cfg.n_embd / cfg.n_head
    } else {
        cfg.head_dim
    };
    cfg.attn_scale = attn_scale(md, "gemma3", scale_dim)?;
    cfg.attn_softcap = arch_opt_f32(md, "gemma3", "attn_logit_softcapping")?;
    cfg.final_logit_softcap = arch_opt_f32(md, "gemma3", "final_logit_softcapping")?;
    cfg.validate()?;
    let window = arch_opt_usize(md, "gemma3", "attention.sliding_window")?;
    let swa_base = arch_opt_f32(md, "gemma3", "rope.freq_base_swa")?.unwrap_or(SWA_ROPE_BASE);
    let sliding = swa_layers(md, "gemma3", cfg.n_layer, SWA_PERIOD)?;
    let opts = BlockTensors {
        qkv_bias: Want::No,
        out_bias: Want::No,
        qk_norm: true,
        post_norms: true,
        ..BlockTensors::LLAMA
    };
    let mut layers = bind_layers(store, &cfg, &opts)?;
    if let Some(w) = window {
        for (layer, _) in layers.iter_mut().zip(&sliding).filter(|(_, s)| **s) {
            layer.sliding_window = Some(w);
            layer.rope_base = swa_base;
        }
    }
    let head = bind_head(store, &cfg, false, false)?;
    let embed_scale = Some((cfg.n_embd as f32).sqrt());
    let mut s = spec(cfg, head, layers);
    s.embed_scale = embed_scale;
    Ok(s)
}
