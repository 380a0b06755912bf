//! `gemma2`: Gemma 2. As Gemma 3 without the Q/K norms: embeddings scaled by √hidden,
//! pre- and post-norms around attention and FFN, GELU-tanh gated FFN, NeoX RoPE with one
//! base; attention scores soft-capped (50) and final logits soft-capped (30); a sliding
//! window (4096) on every other layer, starting with the first; queries scaled by
//! `query_pre_attn_scalar^-1/2`, which differs from the head size in the 27B, and a query
//! size (`heads × key_length`) that differs from the hidden size (2B: 2048 vs 2304).

use kiln_format::Metadata;

use super::{BlockTensors, Want, attn_scale, bind_head, bind_layers, spec, swa_layers};
use crate::ModelError;
use crate::config::{Activation, RopeStyle, arch_opt_f32, arch_opt_usize, common_config};
use crate::spec::ModelSpec;
use crate::weights::WeightStore;

/// Layers `0, 2, 4, …` slide; the others attend globally.
const SWA_PERIOD: usize = 2;
/// The window when the metadata does not give one (every released Gemma 2).
const DEFAULT_WINDOW: usize = 4096;

pub(crate) fn build(md: &Metadata, store: &WeightStore) -> Result<ModelSpec, ModelError> {
    let mut cfg = common_config(md, "gemma2", RopeStyle::Neox, Activation::GeluTanh)?;
    // The 27B (46 layers) scales by (hidden / heads)^-1/2, the others by key_length^-1/2
    // (GGUF files do not store query_pre_attn_scalar; checkpoints give attention.scale).
    let scale_dim = if cfg.n_layer == 46 {
        cfg.n_embd / cfg.n_head
    } else {
        cfg.head_dim
    };
    cfg.attn_scale = attn_scale(md, "gemma2", scale_dim)?;
    cfg.attn_softcap = arch_opt_f32(md, "gemma2", "attn_logit_softcapping")?;
    cfg.final_logit_softcap = arch_opt_f32(md, "gemma2", "final_logit_softcapping")?;
    cfg.validate()?;
    let window =
        arch_opt_usize(md, "gemma2", "attention.sliding_window")?.unwrap_or(DEFAULT_WINDOW);
    let sliding = swa_layers(md, "gemma2", cfg.n_layer, SWA_PERIOD)?;
    let opts = BlockTensors {
        qkv_bias: Want::No,
        out_bias: Want::No,
        post_norms: true,
        ..BlockTensors::LLAMA
    };
    let mut layers = bind_layers(store, &cfg, &opts)?;
    for (layer, &s) in layers.iter_mut().zip(&sliding) {
        if s {
            layer.sliding_window = Some(window);
        }
    }
    let head = bind_head(store, &cfg, false, false)?;
    let embed_scale = Some((cfg.n_embd as f32).sqrt());
    let mut s = spec(cfg, head, layers);
    s.embed_scale = embed_scale;
    Ok(s)
}
