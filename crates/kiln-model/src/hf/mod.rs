//! Hugging Face model directories: `config.json` translated into the GGUF metadata keys the
//! architecture modules read (as llama.cpp's converter would write them), and the tensor
//! name map ([`names`]). One reader for every architecture keeps the modules agnostic of
//! the source.

mod names;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use kiln_format::{Metadata, SafetensorsSet};
use serde_json::{Map, Value};

pub(crate) use names::{Family, HfNames, Transform};

use crate::ModelError;
use crate::blocks::llama3_rope_factors;

/// The `model_type`s of `config.json` Kiln loads, and the architecture each becomes.
pub const HF_MODEL_TYPES: &[(&str, &str)] = &[
    ("llama", "llama"),
    ("mistral", "llama"),
    ("qwen2", "qwen2"),
    ("qwen3", "qwen3"),
    ("gemma2", "gemma2"),
    ("gemma3_text", "gemma3"),
    ("phi3", "phi3"),
    ("phi", "phi2"),
    ("gpt2", "gpt2"),
];

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

/// Reads `dir/config.json`.
pub(crate) fn read_config(dir: &Path) -> Result<HfModel, ModelError> {
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
    from_config_json(&text, &path)
}

/// Translates the text of a `config.json`; `path` names it in errors.
pub(crate) fn from_config_json(text: &str, path: &Path) -> Result<HfModel, ModelError> {
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
    Cfg {
        json: &obj,
        path: path.to_path_buf(),
    }
    .translate()
}

struct Cfg<'a> {
    json: &'a Map<String, Value>,
    path: PathBuf,
}

/// RoPE settings from `rope_parameters` (transformers ≥ 5) or `rope_theta`/`rope_scaling`.
struct Rope<'a> {
    theta: Option<f32>,
    kind: Option<String>,
    params: Option<&'a Map<String, Value>>,
    partial: Option<f32>,
}

impl<'a> Cfg<'a> {
    fn err(&self, field: &str, reason: impl Into<String>) -> ModelError {
        ModelError::HfConfig {
            path: self.path.clone(),
            field: field.into(),
            reason: reason.into(),
        }
    }

    /// The first of `keys` present with a non-null value.
    fn get<'k>(&self, keys: &[&'k str]) -> Option<(&'k str, &'a Value)> {
        keys.iter().find_map(|&k| match self.json.get(k) {
            Some(Value::Null) | None => None,
            Some(v) => Some((k, v)),
        })
    }

    fn opt_usize(&self, keys: &[&str]) -> Result<Option<usize>, ModelError> {
        match self.get(keys) {
            None => Ok(None),
            Some((k, v)) => v
                .as_u64()
                .map(|n| Some(n as usize))
                .ok_or_else(|| self.err(k, "not a non-negative integer")),
        }
    }

    fn usize(&self, keys: &[&str]) -> Result<usize, ModelError> {
        self.opt_usize(keys)?
            .ok_or_else(|| self.err(keys[0], "missing"))
    }

    fn opt_f32(&self, keys: &[&str]) -> Result<Option<f32>, ModelError> {
        match self.get(keys) {
            None => Ok(None),
            Some((k, v)) => v
                .as_f64()
                .map(|n| Some(n as f32))
                .ok_or_else(|| self.err(k, "not a number")),
        }
    }

    fn opt_str(&self, keys: &[&str]) -> Result<Option<&'a str>, ModelError> {
        match self.get(keys) {
            None => Ok(None),
            Some((k, v)) => v
                .as_str()
                .map(Some)
                .ok_or_else(|| self.err(k, "not a string")),
        }
    }

    fn opt_bool(&self, key: &str) -> Result<Option<bool>, ModelError> {
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
    fn rope(&self, layer_type: Option<&str>) -> Result<Rope<'a>, ModelError> {
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

    fn translate(&self) -> Result<HfModel, ModelError> {
        let model_type = self
            .opt_str(&["model_type"])?
            .ok_or_else(|| self.err("model_type", "missing"))?;
        let Some(&(_, arch)) = HF_MODEL_TYPES.iter().find(|(t, _)| *t == model_type) else {
            return Err(ModelError::UnsupportedArchitecture {
                arch: model_type.to_string(),
                supported: HF_MODEL_TYPES.iter().map(|(t, _)| *t).collect(),
            });
        };
        let mut md = Metadata::new();
        let mut extra = HashMap::new();
        let mut set = |key: &str, v: kiln_format::Value| md.set(format!("{arch}.{key}"), v);

        let n_embd = self.usize(&["hidden_size", "n_embd"])?;
        let n_head = self.usize(&["num_attention_heads", "n_head"])?;
        if n_head == 0 {
            return Err(self.err("num_attention_heads", "zero"));
        }
        let head_dim = self.opt_usize(&["head_dim"])?;
        let hd = head_dim.unwrap_or(n_embd / n_head);
        set("embedding_length", (n_embd as u64).into());
        set("attention.head_count", (n_head as u64).into());
        set(
            "block_count",
            (self.usize(&["num_hidden_layers", "n_layer"])? as u64).into(),
        );
        let n_ff = match self.opt_usize(&["intermediate_size", "n_inner"])? {
            Some(f) => f,
            None if arch == "gpt2" => 4 * n_embd,
            None => return Err(self.err("intermediate_size", "missing")),
        };
        set("feed_forward_length", (n_ff as u64).into());
        if let Some(kv) = self.opt_usize(&["num_key_value_heads"])? {
            set("attention.head_count_kv", (kv as u64).into());
        }
        if let Some(hd) = head_dim {
            set("attention.key_length", (hd as u64).into());
            set("attention.value_length", (hd as u64).into());
        }
        set("vocab_size", (self.usize(&["vocab_size"])? as u64).into());
        if let Some(ctx) = self.opt_usize(&["max_position_embeddings", "n_positions", "n_ctx"])? {
            set("context_length", (ctx as u64).into());
        }
        match arch {
            "phi2" | "gpt2" => {
                let eps = self.opt_f32(&["layer_norm_eps", "layer_norm_epsilon"])?;
                set("attention.layer_norm_epsilon", eps.unwrap_or(1e-5).into());
            }
            _ => {
                let eps = self.opt_f32(&["rms_norm_eps"])?;
                set(
                    "attention.layer_norm_rms_epsilon",
                    eps.unwrap_or(1e-6).into(),
                );
            }
        }
        self.check_activation(arch)?;

        // RoPE.
        if arch != "gpt2" {
            let full = self.rope(Some("full_attention"))?;
            if let Some(t) = full.theta {
                set("rope.freq_base", t.into());
            }
            let default_partial = if arch == "phi2" { 0.5 } else { 1.0 };
            let partial = full.partial.unwrap_or(default_partial);
            if partial != 1.0 {
                let n_rot = (hd as f32 * partial) as u64;
                set("rope.dimension_count", n_rot.into());
            }
            match full.kind.as_deref() {
                None | Some("default") => {}
                Some("linear") => {
                    let factor = full
                        .params
                        .and_then(|m| m.get("factor"))
                        .and_then(Value::as_f64)
                        .ok_or_else(|| self.err("rope_scaling.factor", "missing"))?;
                    set("rope.scaling.type", "linear".into());
                    set("rope.scaling.factor", (factor as f32).into());
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
                Some(other) => set("rope.scaling.type", other.into()),
            }
            if arch == "gemma3" {
                let local = self.rope(Some("sliding_attention"))?;
                let base = self.opt_f32(&["rope_local_base_freq"])?.or(local.theta);
                if let Some(b) = base {
                    set("rope.freq_base_swa", b.into());
                }
            }
        }

        // Attention variants.
        match arch {
            "llama" => {
                if self.opt_bool("mlp_bias")? == Some(true) {
                    return Err(self.err("mlp_bias", "biases on the MLP are not supported"));
                }
                if model_type == "mistral"
                    && let Some(w) = self.opt_usize(&["sliding_window"])?
                {
                    set("attention.sliding_window", (w as u64).into());
                }
            }
            "qwen2" if self.opt_bool("use_sliding_window")? == Some(true) => {
                return Err(self.err(
                    "use_sliding_window",
                    "Qwen2 sliding-window layers are not supported",
                ));
            }
            "gemma2" | "gemma3" => {
                if let Some(s) = self.opt_f32(&["query_pre_attn_scalar"])? {
                    set("attention.scale", (1.0 / s.sqrt()).into());
                }
                if let Some(c) = self.opt_f32(&["attn_logit_softcapping"])? {
                    set("attn_logit_softcapping", c.into());
                }
                if let Some(c) = self.opt_f32(&["final_logit_softcapping"])? {
                    set("final_logit_softcapping", c.into());
                }
                if let Some(w) = self.opt_usize(&["sliding_window"])? {
                    set("attention.sliding_window", (w as u64).into());
                }
                if let Some(types) = self.layer_types()? {
                    set("attention.sliding_window_pattern", types.into());
                } else if let Some(p) = self.opt_usize(&["sliding_window_pattern"])? {
                    set("attention.sliding_window_pattern", (p as u64).into());
                }
            }
            "phi2" if self.opt_bool("qk_layernorm")? == Some(true) => {
                return Err(self.err("qk_layernorm", "Q/K LayerNorm is not supported"));
            }
            _ => {}
        }

        let tied_default = matches!(arch, "gemma2" | "gemma3" | "gpt2");
        let tied = self
            .opt_bool("tie_word_embeddings")?
            .unwrap_or(tied_default);
        let family = match arch {
            "gemma2" | "gemma3" => Family::Gemma,
            "phi2" => Family::Phi,
            "gpt2" => Family::Gpt2,
            _ => Family::Llama,
        };
        md.set("general.architecture", arch);
        md.set("general.source", "huggingface");
        Ok(HfModel {
            metadata: md,
            names: HfNames {
                family,
                fused_gate_up: arch == "phi3",
                tied,
            },
            extra,
        })
    }

    /// `layer_types` as one bool per layer (`true` = sliding window).
    fn layer_types(&self) -> Result<Option<Vec<bool>>, ModelError> {
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
    fn check_activation(&self, arch: &str) -> Result<(), ModelError> {
        let (keys, allowed): (&[&str], &[&str]) = match arch {
            "gemma2" | "gemma3" => (
                &["hidden_activation", "hidden_act"],
                &["gelu_pytorch_tanh", "gelu_new"],
            ),
            "phi2" => (&["hidden_act"], &["gelu_new", "gelu_pytorch_tanh"]),
            "gpt2" => (&["activation_function"], &["gelu_new", "gelu_pytorch_tanh"]),
            _ => (&["hidden_act"], &["silu"]),
        };
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

#[cfg(test)]
mod tests;
