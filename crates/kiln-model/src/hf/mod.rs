//! Hugging Face model directories: `config.json` translated into the GGUF metadata keys the
//! architecture modules read (as llama.cpp's converter would write them), and the tensor
//! name map ([`names`]). One reader for every architecture keeps the modules agnostic of
//! the source; what differs between architectures is data in their descriptors
//! ([`HfArch`]) and, for keys only one architecture has, its [`HfArch::config`] hook.

pub(crate) mod names;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use kiln_format::{Metadata, SafetensorsSet};
use serde_json::{Map, Value};

pub(crate) use names::{HfNames, Transform};

use crate::ModelError;
use crate::blocks::llama3_rope_factors;
use crate::config::NormKind;

/// How one architecture's checkpoints translate: the parts of `config.json` every
/// architecture has but reads differently, its tensor names, and a hook for the keys only
/// it has.
#[derive(Debug)]
pub(crate) struct HfArch {
    /// Which epsilon is read: `rms_norm_eps` (default 1e-6) for RMSNorm,
    /// `layer_norm_eps`/`layer_norm_epsilon` (default 1e-5) for LayerNorm.
    pub norm: NormKind,
    /// The keys naming the activation, first present wins.
    pub activation_keys: &'static [&'static str],
    /// The activations the architecture computes; any other is refused.
    pub activations: &'static [&'static str],
    pub positions: Positions,
    /// `intermediate_size` when the config omits it, as a multiple of `hidden_size`
    /// (`None`: required).
    pub ff_default_mult: Option<usize>,
    /// `tie_word_embeddings` when the config omits it.
    pub tied_default: bool,
    /// The tensor-name table.
    pub tensor: names::TensorNames,
    /// Reads what only this architecture has (or refuses what it cannot run), after the
    /// common keys and RoPE.
    pub config: ConfigHook,
}

/// See [`HfArch::config`].
pub(crate) type ConfigHook = fn(&HfConfig<'_>, &mut ArchKeys<'_>) -> Result<(), ModelError>;

/// How positions enter the model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Positions {
    /// RoPE, over `partial_rotary_factor` of each head (this default when the config has
    /// none).
    Rope { default_partial: f32 },
    /// A learned position embedding (GPT-2); no RoPE keys are read.
    Learned,
}

impl HfArch {
    /// A llama checkpoint: RMSNorm, SiLU, RoPE over the whole head, an untied head unless
    /// the config says otherwise, llama tensor names, nothing else to read.
    pub const LLAMA: HfArch = HfArch {
        norm: NormKind::Rms,
        activation_keys: &["hidden_act"],
        activations: &["silu"],
        positions: Positions::Rope {
            default_partial: 1.0,
        },
        ff_default_mult: None,
        tied_default: false,
        tensor: names::llama,
        config: no_more_keys,
    };
}

/// The [`HfArch::config`] of an architecture with nothing of its own.
pub(crate) fn no_more_keys(_: &HfConfig<'_>, _: &mut ArchKeys<'_>) -> Result<(), ModelError> {
    Ok(())
}

/// The mixture-of-experts keys of a checkpoint, as llama.cpp's converter writes them:
/// `num_local_experts`/`num_experts` → `expert_count`, `num_experts_per_tok` →
/// `expert_used_count`, `moe_intermediate_size` → `expert_feed_forward_length`,
/// `shared_expert_intermediate_size` → `expert_shared_feed_forward_length`, and
/// `norm_topk_prob` → `expert_weights_norm` (transformers follows it; absent, the
/// architecture's default holds). Dense layers among the MoE ones (`mlp_only_layers`,
/// `decoder_sparse_step` above 1) are refused. A key the config lacks is left out, for the
/// architecture to refuse by name.
pub(crate) fn moe_keys(c: &HfConfig<'_>, keys: &mut ArchKeys<'_>) -> Result<(), ModelError> {
    let pairs: [(&[&str], &str); 4] = [
        (&["num_local_experts", "num_experts"], "expert_count"),
        (&["num_experts_per_tok"], "expert_used_count"),
        (&["moe_intermediate_size"], "expert_feed_forward_length"),
        (
            &["shared_expert_intermediate_size"],
            "expert_shared_feed_forward_length",
        ),
    ];
    for (hf, key) in pairs {
        if let Some(v) = c.opt_usize(hf)? {
            keys.set(key, v as u64);
        }
    }
    if let Some(norm) = c.opt_bool("norm_topk_prob")? {
        keys.set("expert_weights_norm", norm);
    }
    if let Some(step) = c.opt_usize(&["decoder_sparse_step"])?
        && step > 1
    {
        return Err(c.err(
            "decoder_sparse_step",
            format!("{step}: dense layers between mixture-of-experts layers are not supported"),
        ));
    }
    if let Some((k, v)) = c.get(&["mlp_only_layers"])
        && v.as_array().is_none_or(|a| !a.is_empty())
    {
        return Err(c.err(
            k,
            "dense layers among mixture-of-experts layers are not supported",
        ));
    }
    Ok(())
}

/// Writes `{arch}.{key}` metadata values.
pub(crate) struct ArchKeys<'m> {
    md: &'m mut Metadata,
    arch: &'static str,
}

impl ArchKeys<'_> {
    pub fn set(&mut self, key: &str, v: impl Into<kiln_format::Value>) {
        self.md.set(format!("{}.{key}", self.arch), v.into());
    }
}

/// Largest `config.json` read.
const MAX_CONFIG_LEN: u64 = 4 << 20;

/// A checkpoint's configuration as GGUF-style metadata, its name map, and tensors computed
/// from the configuration.
pub(crate) struct HfModel {
    pub metadata: Metadata,
    pub names: HfNames,
    pub extra: HashMap<String, Vec<f32>>,
}

impl HfModel {
    /// Checks what the name map cannot: an untied head must be in the checkpoint.
    pub fn check_tensors(&self, set: &SafetensorsSet) -> Result<(), ModelError> {
        if !self.names.tied && self.names.lookup("output.weight").is_some() {
            let t = self
                .names
                .lookup("output.weight")
                .unwrap_or_else(|| unreachable!());
            if !t.candidates.iter().any(|c| set.tensor_info(c).is_some()) {
                return Err(ModelError::MissingTensor {
                    name: t.candidates[0].clone(),
                });
            }
        }
        Ok(())
    }
}

/// A parsed `config.json` and where it came from. Which architecture it is, and so how it
/// translates, is the caller's to decide (`crate::arch::translate_hf`).
pub(crate) struct ConfigJson {
    obj: Map<String, Value>,
    path: PathBuf,
}

impl ConfigJson {
    /// Readers over the values, naming the file in their errors.
    pub fn config(&self) -> HfConfig<'_> {
        HfConfig {
            json: &self.obj,
            path: self.path.clone(),
        }
    }
}

/// Reads `dir/config.json`.
pub(crate) fn read_config(dir: &Path) -> Result<ConfigJson, ModelError> {
    let path = dir.join("config.json");
    let io = |source| kiln_format::FormatError::Io {
        path: path.clone(),
        source,
    };
    let meta = std::fs::metadata(&path).map_err(|e| ModelError::NotAModel {
        path: dir.to_path_buf(),
        reason: format!("not a Hugging Face model directory: cannot read config.json ({e})"),
    })?;
    if meta.len() > MAX_CONFIG_LEN {
        return Err(ModelError::HfConfig {
            path,
            field: "config.json".into(),
            reason: format!("{} bytes is more than a config can be", meta.len()),
        });
    }
    let text = std::fs::read_to_string(&path).map_err(io)?;
    parse_config(&text, &path)
}

/// Parses the text of a `config.json`; `path` names it in errors.
pub(crate) fn parse_config(text: &str, path: &Path) -> Result<ConfigJson, ModelError> {
    let json: Value = serde_json::from_str(text).map_err(|e| ModelError::HfConfig {
        path: path.to_path_buf(),
        field: "config.json".into(),
        reason: format!("not valid JSON: {e}"),
    })?;
    let Value::Object(obj) = json else {
        return Err(ModelError::HfConfig {
            path: path.to_path_buf(),
            field: "config.json".into(),
            reason: "not a JSON object".into(),
        });
    };
    Ok(ConfigJson {
        obj,
        path: path.to_path_buf(),
    })
}

/// A parsed `config.json`, with readers that name the field in their errors.
pub(crate) struct HfConfig<'a> {
    json: &'a Map<String, Value>,
    path: PathBuf,
}

/// RoPE settings from `rope_parameters` (transformers ≥ 5) or `rope_theta`/`rope_scaling`.
pub(crate) struct Rope<'a> {
    pub theta: Option<f32>,
    kind: Option<String>,
    params: Option<&'a Map<String, Value>>,
    partial: Option<f32>,
}

impl<'a> HfConfig<'a> {
    /// An error naming `field` of this file.
    pub fn err(&self, field: &str, reason: impl Into<String>) -> ModelError {
        ModelError::HfConfig {
            path: self.path.clone(),
            field: field.into(),
            reason: reason.into(),
        }
    }

    /// The first of `keys` present with a non-null value.
    pub fn get<'k>(&self, keys: &[&'k str]) -> Option<(&'k str, &'a Value)> {
        keys.iter().find_map(|&k| match self.json.get(k) {
            Some(Value::Null) | None => None,
            Some(v) => Some((k, v)),
        })
    }

    pub fn opt_usize(&self, keys: &[&str]) -> Result<Option<usize>, ModelError> {
        match self.get(keys) {
            None => Ok(None),
            Some((k, v)) => v
                .as_u64()
                .map(|n| Some(n as usize))
                .ok_or_else(|| self.err(k, "not a non-negative integer")),
        }
    }

    pub fn usize(&self, keys: &[&str]) -> Result<usize, ModelError> {
        self.opt_usize(keys)?
            .ok_or_else(|| self.err(keys[0], "missing"))
    }

    pub fn opt_f32(&self, keys: &[&str]) -> Result<Option<f32>, ModelError> {
        match self.get(keys) {
            None => Ok(None),
            Some((k, v)) => v
                .as_f64()
                .map(|n| Some(n as f32))
                .ok_or_else(|| self.err(k, "not a number")),
        }
    }

    pub fn opt_str(&self, keys: &[&str]) -> Result<Option<&'a str>, ModelError> {
        match self.get(keys) {
            None => Ok(None),
            Some((k, v)) => v
                .as_str()
                .map(Some)
                .ok_or_else(|| self.err(k, "not a string")),
        }
    }

    pub fn opt_bool(&self, key: &str) -> Result<Option<bool>, ModelError> {
        match self.get(&[key]) {
            None => Ok(None),
            Some((k, v)) => v
                .as_bool()
                .map(Some)
                .ok_or_else(|| self.err(k, "not a boolean")),
        }
    }

    /// The RoPE settings, for one layer type when `rope_parameters` is keyed by layer type
    /// (Gemma 3: `full_attention`, `sliding_attention`).
    pub fn rope(&self, layer_type: Option<&str>) -> Result<Rope<'a>, ModelError> {
        let mut params = match self.json.get("rope_parameters") {
            Some(Value::Object(m)) => Some(m),
            Some(Value::Null) | None => None,
            Some(_) => return Err(self.err("rope_parameters", "not an object")),
        };
        if let (Some(p), Some(lt)) = (params, layer_type)
            && let Some(Value::Object(inner)) = p.get(lt)
        {
            params = Some(inner);
        }
        let scaling = match self.json.get("rope_scaling") {
            Some(Value::Object(m)) => Some(m),
            Some(Value::Null) | None => None,
            Some(_) => return Err(self.err("rope_scaling", "not an object")),
        };
        let num = |m: Option<&Map<String, Value>>, k: &str| {
            m.and_then(|m| m.get(k))
                .and_then(Value::as_f64)
                .map(|v| v as f32)
        };
        let text = |m: Option<&'a Map<String, Value>>, k: &str| {
            m.and_then(|m| m.get(k))
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let theta = num(params, "rope_theta").or(self.opt_f32(&["rope_theta"])?);
        let kind = text(params, "rope_type")
            .or_else(|| text(scaling, "rope_type"))
            .or_else(|| text(scaling, "type"));
        let partial =
            num(params, "partial_rotary_factor").or(self.opt_f32(&["partial_rotary_factor"])?);
        let params = match kind.as_deref() {
            Some("default") | None => params,
            // Scaling values live in `rope_scaling` in older configs.
            _ => scaling.or(params),
        };
        Ok(Rope {
            theta,
            kind,
            params,
            partial,
        })
    }

    /// `model_type`.
    pub fn model_type(&self) -> Result<&'a str, ModelError> {
        self.opt_str(&["model_type"])?
            .ok_or_else(|| self.err("model_type", "missing"))
    }

    /// The configuration as the GGUF metadata keys of architecture `arch`, translated as
    /// `hf` says.
    pub fn translate(&self, arch: &'static str, hf: &HfArch) -> Result<HfModel, ModelError> {
        let mut md = Metadata::new();
        let mut extra = HashMap::new();
        let mut keys = ArchKeys { md: &mut md, arch };

        let n_embd = self.usize(&["hidden_size", "n_embd"])?;
        let n_head = self.usize(&["num_attention_heads", "n_head"])?;
        if n_head == 0 {
            return Err(self.err("num_attention_heads", "zero"));
        }
        let head_dim = self.opt_usize(&["head_dim"])?;
        let hd = head_dim.unwrap_or(n_embd / n_head);
        keys.set("embedding_length", n_embd as u64);
        keys.set("attention.head_count", n_head as u64);
        keys.set(
            "block_count",
            self.usize(&["num_hidden_layers", "n_layer"])? as u64,
        );
        let n_ff = match self.opt_usize(&["intermediate_size", "n_inner"])? {
            Some(f) => f,
            None => match hf.ff_default_mult {
                Some(m) => m * n_embd,
                None => return Err(self.err("intermediate_size", "missing")),
            },
        };
        keys.set("feed_forward_length", n_ff as u64);
        if let Some(kv) = self.opt_usize(&["num_key_value_heads"])? {
            keys.set("attention.head_count_kv", kv as u64);
        }
        if let Some(hd) = head_dim {
            keys.set("attention.key_length", hd as u64);
            keys.set("attention.value_length", hd as u64);
        }
        keys.set("vocab_size", self.usize(&["vocab_size"])? as u64);
        if let Some(ctx) = self.opt_usize(&["max_position_embeddings", "n_positions", "n_ctx"])? {
            keys.set("context_length", ctx as u64);
        }
        match hf.norm {
            NormKind::Layer => {
                let eps = self.opt_f32(&["layer_norm_eps", "layer_norm_epsilon"])?;
                keys.set("attention.layer_norm_epsilon", eps.unwrap_or(1e-5));
            }
            NormKind::Rms => {
                let eps = self.opt_f32(&["rms_norm_eps"])?;
                keys.set("attention.layer_norm_rms_epsilon", eps.unwrap_or(1e-6));
            }
        }
        self.check_activation(arch, hf)?;

        // RoPE.
        if let Positions::Rope { default_partial } = hf.positions {
            let full = self.rope(Some("full_attention"))?;
            if let Some(t) = full.theta {
                keys.set("rope.freq_base", t);
            }
            let partial = full.partial.unwrap_or(default_partial);
            if partial != 1.0 {
                let n_rot = (hd as f32 * partial) as u64;
                keys.set("rope.dimension_count", n_rot);
            }
            match full.kind.as_deref() {
                None | Some("default") => {}
                Some("linear") => {
                    let factor = full
                        .params
                        .and_then(|m| m.get("factor"))
                        .and_then(Value::as_f64)
                        .ok_or_else(|| self.err("rope_scaling.factor", "missing"))?;
                    keys.set("rope.scaling.type", "linear");
                    keys.set("rope.scaling.factor", factor as f32);
                }
                Some("llama3") => {
                    let p = |k: &str| {
                        full.params
                            .and_then(|m| m.get(k))
                            .and_then(Value::as_f64)
                            .map(|v| v as f32)
                            .ok_or_else(|| self.err(&format!("rope_scaling.{k}"), "missing"))
                    };
                    let n_rot = (hd as f32 * partial) as usize;
                    extra.insert(
                        "rope_freqs.weight".to_string(),
                        llama3_rope_factors(
                            n_rot,
                            full.theta.unwrap_or(10_000.0),
                            p("factor")?,
                            p("low_freq_factor")?,
                            p("high_freq_factor")?,
                            p("original_max_position_embeddings")?,
                        ),
                    );
                }
                // yarn, dynamic, longrope, …: passed on, refused by the architecture with
                // the list of what is supported.
                Some(other) => keys.set("rope.scaling.type", other),
            }
        }

        // What only this architecture has.
        (hf.config)(self, &mut keys)?;

        let tied = self
            .opt_bool("tie_word_embeddings")?
            .unwrap_or(hf.tied_default);
        md.set("general.architecture", arch);
        md.set("general.source", "huggingface");
        Ok(HfModel {
            metadata: md,
            names: HfNames {
                tensor: hf.tensor,
                tied,
            },
            extra,
        })
    }

    /// `layer_types` as one bool per layer (`true` = sliding window).
    pub fn layer_types(&self) -> Result<Option<Vec<bool>>, ModelError> {
        let Some((k, v)) = self.get(&["layer_types"]) else {
            return Ok(None);
        };
        let arr = v.as_array().ok_or_else(|| self.err(k, "not an array"))?;
        arr.iter()
            .map(|t| match t.as_str() {
                Some("sliding_attention") => Ok(true),
                Some("full_attention") => Ok(false),
                _ => Err(self.err(
                    k,
                    format!("layer type {t} is not sliding_attention or full_attention"),
                )),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }

    /// Refuses an activation other than the one the architecture computes.
    fn check_activation(&self, arch: &str, hf: &HfArch) -> Result<(), ModelError> {
        let (keys, allowed) = (hf.activation_keys, hf.activations);
        match self.opt_str(keys)? {
            Some(a) if !allowed.contains(&a) => Err(self.err(
                keys[0],
                format!(
                    "activation '{a}' is not supported for {arch}; supported: {}",
                    allowed.join(", ")
                ),
            )),
            _ => Ok(()),
        }
    }
}
