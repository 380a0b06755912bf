//! `smollm3`: SmolLM3. The llama block (GQA, SwiGLU, RMSNorm, tied head by default) with
//! RoPE left out of some layers: in checkpoints, the layers whose `no_rope_layers` entry is
//! 0 (by default every `no_rope_layer_interval`-th, 4: layers 3, 7, …); in GGUF files,
//! which carry no such key, every fourth layer, as llama.cpp reads them. A checkpoint's
//! list travels as `smollm3.rope.layers` (one bool per layer, true where the layer
//! rotates), which GGUF files written by Kiln carry and llama.cpp ignores.
//!
//! RoPE pairing follows the source as for `llama`: llama.cpp's converter permutes the Q/K
//! rows (adjacent pairs), checkpoints keep halves.

use kiln_format::{Array, Metadata, Value};

use super::ArchDescriptor;
use super::bind::{BlockTensors, bind_head, bind_layers, spec};
use crate::ModelError;
use crate::config::{Activation, RopeStyle, common_config};
use crate::hf::{ArchKeys, HfArch, HfConfig};
use crate::spec::ModelSpec;
use crate::weights::{SourceKind, WeightStore};

const NAME: &str = "smollm3";

/// Every this-many-th layer leaves RoPE out when nothing says otherwise (llama.cpp's fixed
/// step for GGUF files, transformers' `no_rope_layer_interval` default).
const NO_ROPE_INTERVAL: usize = 4;

pub(crate) static SMOLLM3: ArchDescriptor = ArchDescriptor {
    gguf_name: NAME,
    hf_model_types: &["smollm3"],
    qk_permute: true,
    gguf_export: false,
    build,
    hf: HfArch {
        tied_default: true,
        config: hf_config,
        ..HfArch::LLAMA
    },
};

fn build(md: &Metadata, store: &WeightStore) -> Result<ModelSpec, ModelError> {
    let style = match store.kind() {
        SourceKind::Gguf => RopeStyle::Normal,
        SourceKind::Safetensors => RopeStyle::Neox,
    };
    let cfg = common_config(md, NAME, style, Activation::Silu)?;
    cfg.validate()?;
    let rope = rope_layers(md, cfg.n_layer)?;
    let mut layers = bind_layers(store, &cfg, &BlockTensors::LLAMA)?;
    for (layer, rotates) in layers.iter_mut().zip(rope) {
        layer.rope = rotates;
    }
    let head = bind_head(store, &cfg, false, false)?;
    Ok(spec(cfg, head, layers))
}

/// Which layers apply RoPE: `smollm3.rope.layers` when present, else all but every
/// fourth.
fn rope_layers(md: &Metadata, n_layer: usize) -> Result<Vec<bool>, ModelError> {
    let key = format!("{NAME}.rope.layers");
    match md.get(&key) {
        None => Ok(every_but_interval(n_layer, NO_ROPE_INTERVAL)),
        Some(Value::Array(Array::Bool(v))) if v.len() == n_layer => Ok(v.clone()),
        Some(Value::Array(Array::Bool(v))) => Err(ModelError::InvalidConfig(format!(
            "{key} lists {} layers, the model has {n_layer}",
            v.len()
        ))),
        Some(_) => Err(ModelError::InvalidConfig(format!(
            "{key} is not an array of booleans"
        ))),
    }
}

/// All layers but every `interval`-th (counting from 1).
fn every_but_interval(n_layer: usize, interval: usize) -> Vec<bool> {
    (0..n_layer).map(|il| (il + 1) % interval != 0).collect()
}

/// `no_rope_layers` (1: the layer rotates) or `no_rope_layer_interval` into
/// `smollm3.rope.layers`; refuses MLP biases and sliding-window layers.
fn hf_config(c: &HfConfig<'_>, keys: &mut ArchKeys<'_>) -> Result<(), ModelError> {
    if c.opt_bool("mlp_bias")? == Some(true) {
        return Err(c.err("mlp_bias", "biases on the MLP are not supported"));
    }
    if c.opt_bool("use_sliding_window")? == Some(true) {
        return Err(c.err(
            "use_sliding_window",
            "SmolLM3 sliding-window layers are not supported",
        ));
    }
    let n_layer = c.usize(&["num_hidden_layers"])?;
    let layers = match c.get(&["no_rope_layers"]) {
        Some((k, v)) => {
            let arr = v.as_array().ok_or_else(|| c.err(k, "not an array"))?;
            if arr.len() != n_layer {
                return Err(c.err(
                    k,
                    format!("lists {} layers, the model has {n_layer}", arr.len()),
                ));
            }
            arr.iter()
                .map(|e| match e.as_u64() {
                    Some(0) => Ok(false),
                    Some(1) => Ok(true),
                    _ => Err(c.err(k, format!("entry {e} is not 0 or 1"))),
                })
                .collect::<Result<Vec<_>, _>>()?
        }
        None => {
            let interval = c
                .opt_usize(&["no_rope_layer_interval"])?
                .unwrap_or(NO_ROPE_INTERVAL);
            if interval == 0 {
                return Err(c.err("no_rope_layer_interval", "zero"));
            }
            every_but_interval(n_layer, interval)
        }
    };
    keys.set("rope.layers", layers);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fourth_layer_goes_without_rope_by_default() {
        assert_eq!(
            every_but_interval(8, 4),
            [true, true, true, false, true, true, true, false]
        );
    }
}
