//! `gemma3`: Gemma 3 (text). Gemma 2 ([`super::gemma2`]) plus per-head Q/K RMSNorm, and
//! sliding-window attention on five of every six layers with their own RoPE base.
//! Soft-capping when the metadata asks for it (Gemma 3 checkpoints set none).

use super::ArchDescriptor;
use super::gemma2::{GemmaVariant, HF_GEMMA, build_gemma, hf_gemma};
use crate::ModelError;
use crate::hf::{ArchKeys, HfArch, HfConfig};

pub(crate) static GEMMA3: ArchDescriptor = ArchDescriptor {
    gguf_name: GEMMA3_VARIANT.name,
    hf_model_types: &["gemma3_text"],
    qk_permute: false,
    gguf_export: true,
    build: |md, store| build_gemma(md, store, &GEMMA3_VARIANT),
    hf: HfArch {
        config: hf_config,
        ..HF_GEMMA
    },
};

const GEMMA3_VARIANT: GemmaVariant = GemmaVariant {
    name: "gemma3",
    layers_27b: 62,
    qk_norm: true,
    swa_period: 6,
    default_window: None,
    swa_rope_base: Some(10_000.0),
};

/// The sliding layers' RoPE base (`rope_local_base_freq`, or transformers 5's
/// `rope_parameters.sliding_attention`), then what every Gemma reads.
fn hf_config(c: &HfConfig<'_>, keys: &mut ArchKeys<'_>) -> Result<(), ModelError> {
    let local = c.rope(Some("sliding_attention"))?;
    if let Some(b) = c.opt_f32(&["rope_local_base_freq"])?.or(local.theta) {
        keys.set("rope.freq_base_swa", b);
    }
    hf_gemma(c, keys)
}
