//! The hyper-parameters of a mixture-of-experts feed-forward block, read from GGUF metadata
//! (`{arch}.expert_*`), with each architecture's defaults for what its files leave out.
//!
//! The keys and their meaning are llama.cpp's (`llama-arch.cpp`, `gguf-py` constants):
//!
//! | key | meaning | when absent |
//! |---|---|---|
//! | `{arch}.expert_count` | experts per layer | required (`llama`: a dense model) |
//! | `{arch}.expert_used_count` | experts each token is routed to (top-k) | required with experts |
//! | `{arch}.expert_feed_forward_length` | inner size of one expert | the architecture's fallback |
//! | `{arch}.expert_shared_count` | shared (always-on) experts | none, or the architecture's |
//! | `{arch}.expert_shared_feed_forward_length` | inner size of the shared expert | the architecture's fallback |
//! | `{arch}.expert_weights_norm` | renormalise the top-k weights to sum 1 | the architecture's |
//! | `{arch}.expert_weights_scale` | multiply the top-k weights by this (0 and 1: no scaling) | no scaling |
//! | `{arch}.expert_gating_func` | 0 the architecture's, 1 softmax, 2 sigmoid | the architecture's |
//!
//! llama.cpp fixes gating and normalisation per architecture for the four implemented here
//! (its converter writes neither key for them), so the defaults below are what applies to
//! the files in circulation; a file that does carry the keys is read as saying what it means.

use kiln_format::{FormatError, Metadata};

use crate::ModelError;

/// The most experts a layer may have (llama.cpp's `LLAMA_MAX_EXPERTS`).
pub const MAX_EXPERTS: usize = 512;

/// The architectures with a mixture-of-experts feed-forward block ([`MoeDefaults::for_arch`]).
pub const MOE_ARCHITECTURES: &[&str] = &["llama", "olmoe", "qwen2moe", "qwen3moe"];

/// How router logits become expert probabilities.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gating {
    /// Softmax over all experts' logits (before top-k selection).
    Softmax,
    /// An independent sigmoid of each logit.
    Sigmoid,
}

impl Gating {
    /// The values of `{arch}.expert_gating_func` Kiln implements, for messages.
    pub const SUPPORTED: &[&str] = &["0 (architecture default)", "1 (softmax)", "2 (sigmoid)"];

    /// `Some(None)` for 0 (the architecture's), `None` for a value Kiln does not implement
    /// (3, softmax over the selected logits; 4, sqrt-softplus).
    fn from_gguf(v: u64) -> Option<Option<Gating>> {
        match v {
            0 => Some(None),
            1 => Some(Some(Gating::Softmax)),
            2 => Some(Some(Gating::Sigmoid)),
            _ => None,
        }
    }
}

/// How an expert's inner size is found when `expert_feed_forward_length` is absent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpertFfFallback {
    /// `feed_forward_length` (Mixtral, OLMoE: the experts are the model's FFN size).
    FeedForwardLength,
    /// `feed_forward_length / expert_used_count` (Qwen2-MoE, Qwen3-MoE).
    FeedForwardOverUsed,
}

/// Which shared expert an architecture has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SharedKind {
    /// None: `expert_shared_count` must be absent or 0.
    None,
    /// Exactly one, its output scaled by `sigmoid(x · ffn_gate_inp_shexp)` (Qwen2-MoE); its
    /// inner size defaults to `feed_forward_length`.
    OneSigmoidGated,
    /// One ungated shared expert when `expert_shared_feed_forward_length` is positive
    /// (llama-architecture files with a shared expert).
    OptionalUngated,
}

/// What an architecture fixes or falls back to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MoeDefaults {
    /// `general.architecture`.
    pub arch: &'static str,
    /// Whether the architecture is always mixture-of-experts (`llama` is dense without
    /// `expert_count`).
    pub required: bool,
    pub gating: Gating,
    /// Renormalise the selected experts' weights to sum 1 (`norm_topk_prob`).
    pub norm_weights: bool,
    pub expert_ff: ExpertFfFallback,
    pub shared: SharedKind,
}

impl MoeDefaults {
    /// Mixtral (and any llama-architecture file with `expert_count`): softmax, top-k weights
    /// renormalised (equal to a softmax over the selected logits).
    pub const LLAMA: MoeDefaults = MoeDefaults {
        arch: "llama",
        required: false,
        gating: Gating::Softmax,
        norm_weights: true,
        expert_ff: ExpertFfFallback::FeedForwardLength,
        shared: SharedKind::OptionalUngated,
    };
    /// OLMoE: softmax, weights not renormalised.
    pub const OLMOE: MoeDefaults = MoeDefaults {
        arch: "olmoe",
        required: true,
        gating: Gating::Softmax,
        norm_weights: false,
        expert_ff: ExpertFfFallback::FeedForwardLength,
        shared: SharedKind::None,
    };
    /// Qwen1.5-MoE / Qwen2-MoE: softmax, not renormalised, one sigmoid-gated shared expert.
    pub const QWEN2MOE: MoeDefaults = MoeDefaults {
        arch: "qwen2moe",
        required: true,
        gating: Gating::Softmax,
        norm_weights: false,
        expert_ff: ExpertFfFallback::FeedForwardOverUsed,
        shared: SharedKind::OneSigmoidGated,
    };
    /// Qwen3-MoE: softmax, renormalised (`norm_topk_prob`).
    pub const QWEN3MOE: MoeDefaults = MoeDefaults {
        arch: "qwen3moe",
        required: true,
        gating: Gating::Softmax,
        norm_weights: true,
        expert_ff: ExpertFfFallback::FeedForwardOverUsed,
        shared: SharedKind::None,
    };

    /// The defaults of an architecture in [`MOE_ARCHITECTURES`].
    #[cfg(test)]
    pub fn for_arch(arch: &str) -> Option<MoeDefaults> {
        [Self::LLAMA, Self::OLMOE, Self::QWEN2MOE, Self::QWEN3MOE]
            .into_iter()
            .find(|d| d.arch == arch)
    }
}

/// The shared expert of a layer: a gated FFN every token goes through.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SharedExpertConfig {
    /// Inner size.
    pub n_ff: usize,
    /// Output scaled by `sigmoid(x · ffn_gate_inp_shexp)` (Qwen2-MoE).
    pub sigmoid_gated: bool,
}

/// The configuration of a mixture-of-experts feed-forward block.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MoeConfig {
    pub n_expert: usize,
    /// Experts per token (top-k).
    pub n_expert_used: usize,
    /// Inner size of one expert.
    pub n_ff_exp: usize,
    pub gating: Gating,
    /// Divide the selected weights by their sum.
    pub norm_weights: bool,
    /// Multiply the selected weights by this after normalisation (`None`: no scaling).
    pub weights_scale: Option<f32>,
    pub shared: Option<SharedExpertConfig>,
}

/// A mixture-of-experts configuration Kiln cannot run, naming the metadata key.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MoeConfigError {
    /// A key the architecture needs is absent.
    #[error("missing metadata key '{key}' (a mixture-of-experts {arch} model needs it)")]
    MissingKey { key: String, arch: &'static str },
    /// A key holds a value out of range or inconsistent with another.
    #[error("metadata key '{key}' = {value}: {reason}")]
    InvalidValue {
        key: String,
        value: String,
        reason: String,
    },
    /// `expert_gating_func` names a function Kiln does not implement.
    #[error("metadata key '{key}' = {value} is a gating function Kiln does not implement; supported: {}", supported.join(", "))]
    UnsupportedGating {
        key: String,
        value: u64,
        supported: Vec<&'static str>,
    },
    /// A key has the wrong type.
    #[error(transparent)]
    Metadata(#[from] FormatError),
}

impl From<MoeConfigError> for ModelError {
    fn from(e: MoeConfigError) -> ModelError {
        match e {
            MoeConfigError::Metadata(f) => ModelError::Format(f),
            other => ModelError::InvalidConfig(other.to_string()),
        }
    }
}

impl MoeConfig {
    /// [`MoeConfig::from_metadata`] for an architecture that is always mixture-of-experts.
    pub fn required(
        md: &Metadata,
        defaults: &MoeDefaults,
        n_ff: usize,
    ) -> Result<MoeConfig, MoeConfigError> {
        MoeConfig::from_metadata(md, defaults, n_ff)?.ok_or_else(|| MoeConfigError::MissingKey {
            key: format!("{}.expert_count", defaults.arch),
            arch: defaults.arch,
        })
    }

    /// Reads the configuration of architecture `defaults.arch` from `md`; `n_ff` is the
    /// model's `feed_forward_length`. `Ok(None)` for a dense file of an architecture that
    /// may be either (`llama` without `expert_count`, or with 0).
    pub fn from_metadata(
        md: &Metadata,
        defaults: &MoeDefaults,
        n_ff: usize,
    ) -> Result<Option<MoeConfig>, MoeConfigError> {
        let arch = defaults.arch;
        let key = |suffix: &str| format!("{arch}.{suffix}");
        let invalid = |k: &str, value: String, reason: String| MoeConfigError::InvalidValue {
            key: key(k),
            value,
            reason,
        };
        let get_usize = |k: &str| -> Result<Option<usize>, MoeConfigError> {
            Ok(md.opt_u64(&key(k))?.map(|v| v as usize))
        };

        let n_expert = match get_usize("expert_count")? {
            Some(0) | None if !defaults.required => return Ok(None),
            Some(n) => n,
            None => {
                return Err(MoeConfigError::MissingKey {
                    key: key("expert_count"),
                    arch,
                });
            }
        };
        if n_expert == 0 || n_expert > MAX_EXPERTS {
            return Err(invalid(
                "expert_count",
                n_expert.to_string(),
                format!("must be between 1 and {MAX_EXPERTS}"),
            ));
        }
        let n_expert_used =
            get_usize("expert_used_count")?.ok_or_else(|| MoeConfigError::MissingKey {
                key: key("expert_used_count"),
                arch,
            })?;
        if n_expert_used == 0 || n_expert_used > n_expert {
            return Err(invalid(
                "expert_used_count",
                n_expert_used.to_string(),
                format!("must be between 1 and the expert count {n_expert}"),
            ));
        }

        let n_ff_exp = match get_usize("expert_feed_forward_length")? {
            Some(0) => {
                return Err(invalid(
                    "expert_feed_forward_length",
                    "0".into(),
                    "must be positive".into(),
                ));
            }
            Some(n) => n,
            None => match defaults.expert_ff {
                ExpertFfFallback::FeedForwardLength => n_ff,
                ExpertFfFallback::FeedForwardOverUsed => n_ff / n_expert_used,
            },
        };
        if n_ff_exp == 0 {
            return Err(invalid(
                "feed_forward_length",
                n_ff.to_string(),
                "gives experts an inner size of 0 (and expert_feed_forward_length is absent)"
                    .into(),
            ));
        }

        let shared_count = get_usize("expert_shared_count")?;
        let shared_ff = get_usize("expert_shared_feed_forward_length")?;
        let shared = match defaults.shared {
            SharedKind::None => match shared_count {
                None | Some(0) => None,
                Some(n) => {
                    return Err(invalid(
                        "expert_shared_count",
                        n.to_string(),
                        format!("{arch} has no shared expert"),
                    ));
                }
            },
            SharedKind::OneSigmoidGated => match shared_count {
                None | Some(1) => Some(SharedExpertConfig {
                    n_ff: match shared_ff {
                        Some(0) => {
                            return Err(invalid(
                                "expert_shared_feed_forward_length",
                                "0".into(),
                                "must be positive".into(),
                            ));
                        }
                        Some(n) => n,
                        None => n_ff,
                    },
                    sigmoid_gated: true,
                }),
                Some(n) => {
                    return Err(invalid(
                        "expert_shared_count",
                        n.to_string(),
                        format!("{arch} has exactly one shared expert"),
                    ));
                }
            },
            SharedKind::OptionalUngated => match (shared_count, shared_ff) {
                (None | Some(0) | Some(1), None | Some(0)) => None,
                (None | Some(1), Some(n)) => Some(SharedExpertConfig {
                    n_ff: n,
                    sigmoid_gated: false,
                }),
                (Some(n), _) => {
                    return Err(invalid(
                        "expert_shared_count",
                        n.to_string(),
                        "at most one shared expert is supported".into(),
                    ));
                }
            },
        };

        let norm_weights = md
            .opt_bool(&key("expert_weights_norm"))?
            .unwrap_or(defaults.norm_weights);
        let weights_scale = match md.opt_f32(&key("expert_weights_scale"))? {
            None => None,
            Some(s) if !(s.is_finite() && s >= 0.0) => {
                return Err(invalid(
                    "expert_weights_scale",
                    s.to_string(),
                    "must be a finite non-negative number".into(),
                ));
            }
            // llama.cpp scales only by a value other than 0 and 1.
            Some(s) if s == 0.0 || s == 1.0 => None,
            Some(s) => Some(s),
        };
        let gating = match md.opt_u64(&key("expert_gating_func"))? {
            None => defaults.gating,
            Some(v) => match Gating::from_gguf(v) {
                Some(g) => g.unwrap_or(defaults.gating),
                None => {
                    return Err(MoeConfigError::UnsupportedGating {
                        key: key("expert_gating_func"),
                        value: v,
                        supported: Gating::SUPPORTED.to_vec(),
                    });
                }
            },
        };

        Ok(Some(MoeConfig {
            n_expert,
            n_expert_used,
            n_ff_exp,
            gating,
            norm_weights,
            weights_scale,
            shared,
        }))
    }
}
