//! `gemma3`: Gemma 3. Embeddings scaled by √hidden, per-head Q/K RMSNorm, norms after
//! attention and FFN as well as before, GELU-tanh gated FFN, NeoX RoPE, and sliding-window
//! attention on five of every six layers with their own RoPE base.

use kiln_format::Metadata;

use super::{BlockTensors, bind_head, bind_layer};
use crate::ModelError;
use crate::config::{Activation, RopeStyle, arch_opt_f32, arch_opt_usize, common_config};
use crate::model::ModelSpec;
use crate::weights::WeightStore;

/// Every `SWA_PATTERN`-th layer attends globally; the others use the sliding window.
const SWA_PATTERN: usize = 6;
/// RoPE base of the sliding-window layers (not stored in GGUF files; fixed by the model).
const SWA_ROPE_BASE: f32 = 10_000.0;

pub(crate) fn build(md: &Metadata, store: &WeightStore) -> Result<ModelSpec, ModelError> {
    let mut cfg = common_config(md, "gemma3", RopeStyle::Neox, Activation::GeluTanh)?;
    // Gemma 3 scales queries by key_length^-1/2 (query_pre_attn_scalar = head_dim).
    cfg.attn_scale = 1.0 / (cfg.head_dim as f32).sqrt();
    cfg.validate()?;
    let window = arch_opt_usize(md, "gemma3", "attention.sliding_window")?;
    let swa_base = arch_opt_f32(md, "gemma3", "rope.freq_base_swa")?.unwrap_or(SWA_ROPE_BASE);
    let opts = BlockTensors {
        qkv_bias: false,
        qk_norm: true,
        post_norms: true,
    };
    let mut layers = Vec::with_capacity(cfg.n_layer);
    for il in 0..cfg.n_layer {
        let mut layer = bind_layer(store, &cfg, il, &opts)?;
        if let Some(w) = window
            && il % SWA_PATTERN < SWA_PATTERN - 1
        {
            layer.sliding_window = Some(w);
            layer.rope_base = swa_base;
        }
        layers.push(layer);
    }
    let (tok_embd, output_norm, output) = bind_head(store, &cfg)?;
    let embed_scale = Some((cfg.n_embd as f32).sqrt());
    Ok(ModelSpec {
        cfg,
        tok_embd,
        output_norm,
        output,
        layers,
        embed_scale,
    })
}
