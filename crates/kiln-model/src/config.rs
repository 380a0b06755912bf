//! The hyper-parameters of a decoder-only transformer, read from GGUF metadata (or from
//! metadata synthesised from a Hugging Face `config.json`, see [`crate::hf`]).

use kiln_format::Metadata;

use crate::ModelError;

/// How rotary position embeddings pair up the dimensions of a head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeStyle {
    /// Adjacent pairs `(x[2i], x[2i+1])`: llama-family GGUFs, whose Q/K weights were
    /// permuted at conversion for this layout.
    Normal,
    /// Halves `(x[i], x[i + n_rot/2])`: GPT-NeoX, Qwen2, Gemma, and all HF checkpoints.
    Neox,
}

/// The feed-forward activation: applied to the gate of a gated FFN (`act(gate) * up`), or
/// to the up projection of a plain one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// SiLU (llama, qwen, phi-3).
    Silu,
    /// GELU, tanh approximation (gemma gated; phi-2 and GPT-2 plain).
    GeluTanh,
}

/// Which normalisation a model uses before (and after) its blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NormKind {
    /// RMSNorm, `x / rms(x) · w`.
    Rms,
    /// LayerNorm, `(x − mean) / std · w + b` (phi-2, GPT-2).
    Layer,
}

/// Everything the forward pass needs to know about the shapes and constants of a model.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    /// `general.architecture`.
    pub arch: String,
    pub n_layer: usize,
    /// Hidden size.
    pub n_embd: usize,
    /// Feed-forward inner size.
    pub n_ff: usize,
    pub n_head: usize,
    pub n_head_kv: usize,
    /// Per-head size of queries and keys (`attention.key_length`).
    pub head_dim: usize,
    /// Per-head size of values (`attention.value_length`).
    pub head_dim_v: usize,
    /// How many dimensions of each head are rotated.
    pub n_rot: usize,
    pub rope_base: f32,
    /// Linear RoPE scaling: positions are multiplied by this (1.0 when absent).
    pub rope_freq_scale: f32,
    pub rope_style: RopeStyle,
    pub norm_eps: f32,
    pub vocab_size: usize,
    /// The context length the model was trained for.
    pub n_ctx_train: usize,
    pub activation: Activation,
    /// Multiplier applied to the attention scores (`1/sqrt(head_dim)` unless the
    /// architecture says otherwise).
    pub attn_scale: f32,
    /// `attn_scale` multiplies the query (in f32, after RoPE, before attention rounds it)
    /// rather than each score, as llama.cpp's graphs for Gemma and Phi apply it. The two
    /// differ in rounding: the f16 query of the one-row arithmetic is rounded after the
    /// scaling (small elements scaled into the f16 subnormal range lose bits), and a scale
    /// that is not a power of two rounds every query element.
    pub scale_query: bool,
    /// RMSNorm or LayerNorm.
    pub norm: NormKind,
    /// Attention and feed-forward read the same normalised input and their outputs are
    /// added to the residual together (phi-2).
    pub parallel_residual: bool,
    /// Attention scores are soft-capped, `c · tanh(s / c)` (Gemma 2).
    pub attn_softcap: Option<f32>,
    /// Output logits are soft-capped, `c · tanh(l / c)` (Gemma 2).
    pub final_logit_softcap: Option<f32>,
}

impl ModelConfig {
    /// Size of the query projection output (`n_head * head_dim`), which need not equal
    /// `n_embd`.
    pub fn q_dim(&self) -> usize {
        self.n_head * self.head_dim
    }

    /// Size of one layer's key vectors for all KV heads.
    pub fn k_dim(&self) -> usize {
        self.n_head_kv * self.head_dim
    }

    /// Size of one layer's value vectors for all KV heads.
    pub fn v_dim(&self) -> usize {
        self.n_head_kv * self.head_dim_v
    }

    /// Checks the internal consistency of the numbers.
    pub(crate) fn validate(&self) -> Result<(), ModelError> {
        let bad = |what: String| Err(ModelError::InvalidConfig(what));
        if self.n_layer == 0 || self.n_embd == 0 || self.n_head == 0 || self.n_head_kv == 0 {
            return bad(format!(
                "zero-sized dimension: layers {}, embedding {}, heads {}, kv heads {}",
                self.n_layer, self.n_embd, self.n_head, self.n_head_kv
            ));
        }
        if !self.n_head.is_multiple_of(self.n_head_kv) {
            return bad(format!(
                "head count {} is not a multiple of the KV head count {}",
                self.n_head, self.n_head_kv
            ));
        }
        if self.head_dim == 0 || !self.head_dim.is_multiple_of(2) {
            return bad(format!(
                "head dimension {} must be even and nonzero",
                self.head_dim
            ));
        }
        if self.n_rot > self.head_dim || !self.n_rot.is_multiple_of(2) {
            return bad(format!(
                "rotary dimension {} must be even and at most the head dimension {}",
                self.n_rot, self.head_dim
            ));
        }
        if self.vocab_size == 0 {
            return bad("empty vocabulary".into());
        }
        if !(self.norm_eps.is_finite() && self.norm_eps >= 0.0) {
            return bad(format!(
                "normalisation epsilon {} is not a finite non-negative number",
                self.norm_eps
            ));
        }
        if !(self.rope_base.is_finite() && self.rope_base > 0.0) {
            return bad(format!(
                "RoPE base {} is not a positive number",
                self.rope_base
            ));
        }
        for (what, cap) in [
            ("attention soft-cap", self.attn_softcap),
            ("final logit soft-cap", self.final_logit_softcap),
        ] {
            if let Some(c) = cap
                && !(c.is_finite() && c > 0.0)
            {
                return bad(format!("{what} {c} is not a positive number"));
            }
        }
        Ok(())
    }
}

/// Reads `{arch}.{suffix}` as a usize.
pub(crate) fn arch_usize(md: &Metadata, arch: &str, suffix: &str) -> Result<usize, ModelError> {
    Ok(md.u64(&format!("{arch}.{suffix}"))? as usize)
}

/// Reads `{arch}.{suffix}` as a usize when present.
pub(crate) fn arch_opt_usize(
    md: &Metadata,
    arch: &str,
    suffix: &str,
) -> Result<Option<usize>, ModelError> {
    Ok(md.opt_u64(&format!("{arch}.{suffix}"))?.map(|v| v as usize))
}

/// Reads `{arch}.{suffix}` as an f32 when present.
pub(crate) fn arch_opt_f32(
    md: &Metadata,
    arch: &str,
    suffix: &str,
) -> Result<Option<f32>, ModelError> {
    Ok(md.opt_f32(&format!("{arch}.{suffix}"))?)
}

/// The RoPE scaling methods Kiln implements (Llama 3 scaling comes as `rope_freqs`).
pub const SUPPORTED_ROPE_SCALING: &[&str] = &["none", "linear"];

/// The parts of the configuration every architecture reads the same way. `vocab_size`
/// falls back to the tokenizer's vocabulary length; the epsilon is read from
/// `attention.layer_norm_rms_epsilon` or `attention.layer_norm_epsilon` by `norm`. The
/// feed-forward is gated; architectures change the fields that differ.
pub(crate) fn common_config(
    md: &Metadata,
    arch: &str,
    rope_style: RopeStyle,
    activation: Activation,
) -> Result<ModelConfig, ModelError> {
    common_config_with(md, arch, rope_style, activation, NormKind::Rms)
}

pub(crate) fn common_config_with(
    md: &Metadata,
    arch: &str,
    rope_style: RopeStyle,
    activation: Activation,
    norm: NormKind,
) -> Result<ModelConfig, ModelError> {
    let n_embd = arch_usize(md, arch, "embedding_length")?;
    let n_head = arch_usize(md, arch, "attention.head_count")?;
    let n_head_kv = arch_opt_usize(md, arch, "attention.head_count_kv")?.unwrap_or(n_head);
    if n_head == 0 {
        return Err(ModelError::InvalidConfig(format!(
            "{arch}.attention.head_count is zero"
        )));
    }
    let head_dim = arch_opt_usize(md, arch, "attention.key_length")?.unwrap_or(n_embd / n_head);
    let head_dim_v = arch_opt_usize(md, arch, "attention.value_length")?.unwrap_or(head_dim);
    let n_rot = arch_opt_usize(md, arch, "rope.dimension_count")?.unwrap_or(head_dim);
    let vocab_size = match arch_opt_usize(md, arch, "vocab_size")? {
        Some(v) => v,
        None => md.str_array("tokenizer.ggml.tokens")?.len(),
    };
    let rope_freq_scale = match md.opt_str(&format!("{arch}.rope.scaling.type"))? {
        None | Some("none") => 1.0,
        Some("linear") => match arch_opt_f32(md, arch, "rope.scaling.factor")? {
            Some(f) if f > 0.0 => 1.0 / f,
            _ => 1.0,
        },
        Some(other) => {
            return Err(ModelError::UnsupportedRopeScaling {
                kind: other.to_string(),
                supported: SUPPORTED_ROPE_SCALING.to_vec(),
            });
        }
    };
    let eps_key = match norm {
        NormKind::Rms => "attention.layer_norm_rms_epsilon",
        NormKind::Layer => "attention.layer_norm_epsilon",
    };
    let cfg = ModelConfig {
        arch: arch.to_string(),
        n_layer: arch_usize(md, arch, "block_count")?,
        n_embd,
        n_ff: arch_usize(md, arch, "feed_forward_length")?,
        n_head,
        n_head_kv,
        head_dim,
        head_dim_v,
        n_rot,
        rope_base: arch_opt_f32(md, arch, "rope.freq_base")?.unwrap_or(10_000.0),
        rope_freq_scale,
        rope_style,
        norm_eps: arch_opt_f32(md, arch, eps_key)?.unwrap_or(1e-5),
        vocab_size,
        n_ctx_train: arch_opt_usize(md, arch, "context_length")?.unwrap_or(2048),
        activation,
        attn_scale: 1.0 / (head_dim as f32).sqrt(),
        scale_query: false,
        norm,
        parallel_residual: false,
        attn_softcap: None,
        final_logit_softcap: None,
    };
    Ok(cfg)
}
