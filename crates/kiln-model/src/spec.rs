//! What an architecture module produces: the tensors and settings of a model, bound to the
//! mapped weights. The decoder (`model.rs`) reads these; the architecture modules (`arch/`)
//! write them, so both depend on this module and not on each other.

use crate::ModelConfig;
use crate::blocks::Norm;
use crate::moe::MoeLayer;
use crate::moe::config::MoeConfig;
use crate::weights::Weight;

/// The tensors and per-layer settings of one transformer block. Fused projections (QKV,
/// gate+up) are bound as row ranges of one tensor, so the graph only sees the parts.
pub(crate) struct LayerSpec {
    /// `None`: attention reads the residual stream itself (OLMo 2, which norms outputs
    /// only).
    pub attn_norm: Option<Norm>,
    pub wq: Weight,
    pub wk: Weight,
    pub wv: Weight,
    pub bq: Option<Vec<f32>>,
    pub bk: Option<Vec<f32>>,
    pub bv: Option<Vec<f32>>,
    /// RMSNorm of queries and keys before RoPE: per head when the weight has `head_dim`
    /// values (qwen3, gemma3), over the whole projection when it has the projection's
    /// length (OLMo 2).
    pub q_norm: Option<Vec<f32>>,
    pub k_norm: Option<Vec<f32>>,
    pub wo: Weight,
    pub bo: Option<Vec<f32>>,
    /// RMSNorm of the attention output before the residual add.
    pub post_attn_norm: Option<Vec<f32>>,
    /// `None` for parallel blocks, whose FFN reads the attention norm's output, and for
    /// sequential blocks without a pre-norm, whose FFN reads the residual stream (OLMo 2).
    pub ffn_norm: Option<Norm>,
    /// The feed-forward network: dense, or a mixture of experts.
    pub ffn: FfnSpec,
    /// RMSNorm of the FFN output before the residual add.
    pub post_ffn_norm: Option<Vec<f32>>,
    /// Attend to at most this many most recent positions.
    pub sliding_window: Option<usize>,
    pub rope_base: f32,
    /// Whether the layer rotates Q and K (SmolLM3 leaves every fourth layer unrotated).
    pub rope: bool,
}

/// A block's feed-forward network.
// One per layer, built once and never moved on the hot path: the size difference costs
// nothing worth a box.
#[allow(clippy::large_enum_variant)]
pub(crate) enum FfnSpec {
    Dense(DenseFfn),
    /// A router and experts ([`crate::moe`]).
    Moe(MoeFfn),
}

/// A dense feed-forward network: `down(act(gate) · up)`, or `down(act(up))` without a gate.
pub(crate) struct DenseFfn {
    /// `None` for a plain (ungated) FFN.
    pub w_gate: Option<Weight>,
    pub w_up: Weight,
    pub b_up: Option<Vec<f32>>,
    pub w_down: Weight,
    pub b_down: Option<Vec<f32>>,
}

/// A mixture-of-experts feed-forward network: its configuration and tensors.
pub(crate) struct MoeFfn {
    pub cfg: MoeConfig,
    pub layer: MoeLayer,
}

impl LayerSpec {
    /// The layer's mixture-of-experts block, if its FFN is one.
    pub fn moe(&self) -> Option<&MoeFfn> {
        match &self.ffn {
            FfnSpec::Moe(m) => Some(m),
            FfnSpec::Dense(_) => None,
        }
    }
}

/// What an architecture module produces.
pub(crate) struct ModelSpec {
    pub cfg: ModelConfig,
    pub tok_embd: Weight,
    /// Learned absolute positions (GPT-2), one row per position.
    pub pos_embd: Option<Weight>,
    pub output_norm: Norm,
    pub output: Weight,
    pub output_bias: Option<Vec<f32>>,
    pub layers: Vec<LayerSpec>,
    /// Multiplier for embedding rows (Gemma: √hidden).
    pub embed_scale: Option<f32>,
    /// Per-dimension RoPE frequency divisors (Llama 3 scaling), `n_rot / 2` values.
    pub rope_freqs: Option<Vec<f32>>,
    /// Multiplier of each block's attention and feed-forward outputs before they join the
    /// residual stream (Granite).
    pub residual_scale: Option<f32>,
    /// Divisor of the output logits (Granite's `logits_scaling`).
    pub logit_scale: Option<f32>,
}
