//! `gemma2`: Gemma 2, and the Gemma builder Gemma 3 shares. Embeddings scaled by √hidden,
//! pre- and post-norms around attention and FFN, GELU-tanh gated FFN, NeoX RoPE with one
//! base; attention scores soft-capped (50) and final logits soft-capped (30); a sliding
//! window (4096) on every other layer, starting with the first; queries scaled by
//! `query_pre_attn_scalar^-1/2`, which differs from the head size in the 27B, and a query
//! size (`heads × key_length`) that differs from the hidden size (2B: 2048 vs 2304).
//! Checkpoints store norms as `w` for `1 + w` and name the FFN pre-norm
//! `pre_feedforward_layernorm`.

use kiln_format::Metadata;

use super::ArchDescriptor;
use super::bind::{BlockTensors, Want, attn_scale, bind_head, bind_layers, spec, swa_layers};
use crate::ModelError;
use crate::config::{Activation, RopeStyle, arch_opt_f32, arch_opt_usize, common_config};
use crate::hf::{ArchKeys, HfArch, HfConfig, names};
use crate::spec::ModelSpec;
use crate::weights::WeightStore;

pub(crate) static GEMMA2: ArchDescriptor = ArchDescriptor {
    gguf_name: GEMMA2_VARIANT.name,
    hf_model_types: &["gemma2"],
    qk_permute: false,
    gguf_export: false,
    build: |md, store| build_gemma(md, store, &GEMMA2_VARIANT),
    hf: HF_GEMMA,
};

/// How a Gemma generation differs from the others.
pub(super) struct GemmaVariant {
    /// The GGUF architecture name.
    pub name: &'static str,
    /// The layer count of the 27B, which scales queries by `(hidden / heads)^-1/2` rather
    /// than `key_length^-1/2` (GGUF files do not store `query_pre_attn_scalar`; checkpoints
    /// give it as `attention.scale`).
    pub layers_27b: usize,
    /// Per-head RMSNorm of Q and K.
    pub qk_norm: bool,
    /// Layer `i` slides when `i % period < period - 1`, unless the metadata gives a
    /// pattern.
    pub swa_period: usize,
    /// The window when the metadata gives none; `None`: no sliding window then.
    pub default_window: Option<usize>,
    /// The sliding layers' own RoPE base (`rope.freq_base_swa`) and its default; `None`:
    /// every layer uses the one base.
    pub swa_rope_base: Option<f32>,
}

const GEMMA2_VARIANT: GemmaVariant = GemmaVariant {
    name: "gemma2",
    layers_27b: 46,
    qk_norm: false,
    swa_period: 2,
    // Every released Gemma 2.
    default_window: Some(4096),
    swa_rope_base: None,
};

/// The Hugging Face side every Gemma shares: RMSNorm stored as `w`, GELU-tanh, tied head.
pub(super) const HF_GEMMA: HfArch = HfArch {
    activation_keys: &["hidden_activation", "hidden_act"],
    activations: &["gelu_pytorch_tanh", "gelu_new"],
    tied_default: true,
    tensor: names::gemma,
    config: hf_gemma,
    ..HfArch::LLAMA
};

pub(super) fn build_gemma(
    md: &Metadata,
    store: &WeightStore,
    g: &GemmaVariant,
) -> Result<ModelSpec, ModelError> {
    let arch = g.name;
    let mut cfg = common_config(md, arch, RopeStyle::Neox, Activation::GeluTanh)?;
    let scale_dim = if cfg.n_layer == g.layers_27b {
        cfg.n_embd / cfg.n_head
    } else {
        cfg.head_dim
    };
    cfg.attn_scale = attn_scale(md, arch, scale_dim)?;
    cfg.scale_query = true;
    cfg.attn_softcap = arch_opt_f32(md, arch, "attn_logit_softcapping")?;
    cfg.final_logit_softcap = arch_opt_f32(md, arch, "final_logit_softcapping")?;
    cfg.validate()?;
    let window = arch_opt_usize(md, arch, "attention.sliding_window")?.or(g.default_window);
    let swa_base = match g.swa_rope_base {
        Some(default) => Some(arch_opt_f32(md, arch, "rope.freq_base_swa")?.unwrap_or(default)),
        None => None,
    };
    let sliding = swa_layers(md, arch, cfg.n_layer, g.swa_period)?;
    let opts = BlockTensors {
        qkv_bias: Want::No,
        out_bias: Want::No,
        qk_norm: g.qk_norm,
        post_norms: true,
        ..BlockTensors::LLAMA
    };
    let mut layers = bind_layers(store, &cfg, &opts)?;
    if let Some(w) = window {
        for (layer, _) in layers.iter_mut().zip(&sliding).filter(|(_, s)| **s) {
            layer.sliding_window = Some(w);
            if let Some(base) = swa_base {
                layer.rope_base = base;
            }
        }
    }
    let head = bind_head(store, &cfg, false, false)?;
    let embed_scale = Some((cfg.n_embd as f32).sqrt());
    let mut s = spec(cfg, head, layers);
    s.embed_scale = embed_scale;
    Ok(s)
}

/// The query scale, soft-caps and sliding-window layout of a Gemma `config.json`.
pub(super) fn hf_gemma(c: &HfConfig<'_>, keys: &mut ArchKeys<'_>) -> Result<(), ModelError> {
    if let Some(s) = c.opt_f32(&["query_pre_attn_scalar"])? {
        keys.set("attention.scale", 1.0 / s.sqrt());
    }
    if let Some(cap) = c.opt_f32(&["attn_logit_softcapping"])? {
        keys.set("attn_logit_softcapping", cap);
    }
    if let Some(cap) = c.opt_f32(&["final_logit_softcapping"])? {
        keys.set("final_logit_softcapping", cap);
    }
    if let Some(w) = c.opt_usize(&["sliding_window"])? {
        keys.set("attention.sliding_window", w as u64);
    }
    if let Some(types) = c.layer_types()? {
        keys.set("attention.sliding_window_pattern", types);
    } else if let Some(p) = c.opt_usize(&["sliding_window_pattern"])? {
        keys.set("attention.sliding_window_pattern", p as u64);
    }
    Ok(())
}
