//! Hugging Face tensor names → the GGUF names architectures bind.
//!
//! Each family's table says where `blk.N.attn_q.weight` lives in a transformers checkpoint
//! (`model.layers.N.self_attn.q_proj.weight`) and what must be done to it on load.

/// What the loader does to a tensor on its way from the checkpoint to the graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transform {
    None,
    /// GPT-2 `Conv1D` weights are stored `[in, out]`; the graph wants `[out, in]` rows.
    Transpose,
    /// Gemma's RMSNorm multiplies by `1 + w`; GGUF files store `1 + w`, checkpoints `w`.
    AddOne,
}

/// Where one GGUF-named tensor is in the checkpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HfTensor {
    /// Names to try, in order (GPT-2 checkpoints come with and without `transformer.`).
    pub candidates: Vec<String>,
    pub transform: Transform,
}

/// The naming scheme of one checkpoint family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// `model.layers.N.{self_attn,mlp}.*`: llama, mistral, qwen2, qwen3, phi3.
    Llama,
    /// The same names; norms stored as `w` for `1 + w`, and `pre_feedforward_layernorm`.
    Gemma,
    /// `model.layers.N.{self_attn.dense, mlp.fc1, mlp.fc2}`, LayerNorms with biases (phi-2).
    Phi,
    /// `h.N.{attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj}` with `Conv1D` weights (GPT-2).
    Gpt2,
}

/// The name table of a checkpoint.
#[derive(Clone, Debug)]
pub struct HfNames {
    pub family: Family,
    /// Phi-3 fuses gate and up into one `gate_up_proj` (GGUF: `ffn_up` of `2·n_ff` rows).
    pub fused_gate_up: bool,
    /// Whether `output.weight` is tied to the embedding (then `lm_head.weight`, if a
    /// checkpoint carries it anyway, is ignored as transformers does).
    pub tied: bool,
}

fn one(name: String, transform: Transform) -> HfTensor {
    HfTensor {
        candidates: vec![name],
        transform,
    }
}

impl HfNames {
    /// The checkpoint location of a GGUF-named tensor, or `None` if the family has no such
    /// tensor.
    pub fn lookup(&self, gguf: &str) -> Option<HfTensor> {
        match self.family {
            Family::Gpt2 => self.gpt2(gguf),
            Family::Phi => self.phi(gguf),
            Family::Llama | Family::Gemma => self.llama(gguf),
        }
    }

    fn llama(&self, gguf: &str) -> Option<HfTensor> {
        let gemma = self.family == Family::Gemma;
        let norm = if gemma {
            Transform::AddOne
        } else {
            Transform::None
        };
        match gguf {
            "token_embd.weight" => {
                return Some(one("model.embed_tokens.weight".into(), Transform::None));
            }
            "output_norm.weight" => return Some(one("model.norm.weight".into(), norm)),
            "output.weight" if !self.tied => {
                return Some(one("lm_head.weight".into(), Transform::None));
            }
            _ => {}
        }
        let (il, rest) = split_layer(gguf)?;
        let p = format!("model.layers.{il}.");
        let (hf, t) = match rest {
            "attn_norm.weight" => ("input_layernorm.weight", norm),
            "attn_q.weight" => ("self_attn.q_proj.weight", Transform::None),
            "attn_k.weight" => ("self_attn.k_proj.weight", Transform::None),
            "attn_v.weight" => ("self_attn.v_proj.weight", Transform::None),
            "attn_q.bias" => ("self_attn.q_proj.bias", Transform::None),
            "attn_k.bias" => ("self_attn.k_proj.bias", Transform::None),
            "attn_v.bias" => ("self_attn.v_proj.bias", Transform::None),
            "attn_qkv.weight" => ("self_attn.qkv_proj.weight", Transform::None),
            "attn_output.weight" => ("self_attn.o_proj.weight", Transform::None),
            "attn_output.bias" => ("self_attn.o_proj.bias", Transform::None),
            "attn_q_norm.weight" => ("self_attn.q_norm.weight", norm),
            "attn_k_norm.weight" => ("self_attn.k_norm.weight", norm),
            "ffn_norm.weight" if gemma => ("pre_feedforward_layernorm.weight", norm),
            "ffn_norm.weight" => ("post_attention_layernorm.weight", norm),
            "post_attention_norm.weight" if gemma => ("post_attention_layernorm.weight", norm),
            "post_ffw_norm.weight" if gemma => ("post_feedforward_layernorm.weight", norm),
            "ffn_gate.weight" if !self.fused_gate_up => ("mlp.gate_proj.weight", Transform::None),
            "ffn_up.weight" if self.fused_gate_up => ("mlp.gate_up_proj.weight", Transform::None),
            "ffn_up.weight" => ("mlp.up_proj.weight", Transform::None),
            "ffn_down.weight" => ("mlp.down_proj.weight", Transform::None),
            _ => return None,
        };
        Some(one(format!("{p}{hf}"), t))
    }

    fn phi(&self, gguf: &str) -> Option<HfTensor> {
        let none = Transform::None;
        match gguf {
            "token_embd.weight" => return Some(one("model.embed_tokens.weight".into(), none)),
            "output_norm.weight" => return Some(one("model.final_layernorm.weight".into(), none)),
            "output_norm.bias" => return Some(one("model.final_layernorm.bias".into(), none)),
            "output.weight" if !self.tied => return Some(one("lm_head.weight".into(), none)),
            "output.bias" => return Some(one("lm_head.bias".into(), none)),
            _ => {}
        }
        let (il, rest) = split_layer(gguf)?;
        let (part, kind) = rest.rsplit_once('.')?;
        let hf = match part {
            "attn_norm" => "input_layernorm",
            "attn_q" => "self_attn.q_proj",
            "attn_k" => "self_attn.k_proj",
            "attn_v" => "self_attn.v_proj",
            "attn_output" => "self_attn.dense",
            "ffn_up" => "mlp.fc1",
            "ffn_down" => "mlp.fc2",
            _ => return None,
        };
        Some(one(format!("model.layers.{il}.{hf}.{kind}"), none))
    }

    fn gpt2(&self, gguf: &str) -> Option<HfTensor> {
        let both = |name: String, transform| HfTensor {
            candidates: vec![name.clone(), format!("transformer.{name}")],
            transform,
        };
        let none = Transform::None;
        match gguf {
            "token_embd.weight" => return Some(both("wte.weight".into(), none)),
            "position_embd.weight" => return Some(both("wpe.weight".into(), none)),
            "output_norm.weight" => return Some(both("ln_f.weight".into(), none)),
            "output_norm.bias" => return Some(both("ln_f.bias".into(), none)),
            "output.weight" if !self.tied => return Some(one("lm_head.weight".into(), none)),
            _ => {}
        }
        let (il, rest) = split_layer(gguf)?;
        let (part, kind) = rest.rsplit_once('.')?;
        let hf = match part {
            "attn_norm" => "ln_1",
            "attn_qkv" => "attn.c_attn",
            "attn_output" => "attn.c_proj",
            "ffn_norm" => "ln_2",
            "ffn_up" => "mlp.c_fc",
            "ffn_down" => "mlp.c_proj",
            _ => return None,
        };
        let conv1d = kind == "weight" && !part.ends_with("norm");
        let t = if conv1d { Transform::Transpose } else { none };
        Some(both(format!("h.{il}.{hf}.{kind}"), t))
    }
}

/// `blk.N.rest` → `(N, rest)`.
fn split_layer(name: &str) -> Option<(usize, &str)> {
    let rest = name.strip_prefix("blk.")?;
    let (n, rest) = rest.split_once('.')?;
    Some((n.parse().ok()?, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(family: Family, fused: bool, tied: bool) -> HfNames {
        HfNames {
            family,
            fused_gate_up: fused,
            tied,
        }
    }

    fn first(n: &HfNames, gguf: &str) -> Option<(String, Transform)> {
        n.lookup(gguf)
            .map(|t| (t.candidates[0].clone(), t.transform))
    }

    #[test]
    fn llama_names_map_to_transformers_names() {
        let n = names(Family::Llama, false, true);
        assert_eq!(
            first(&n, "blk.3.attn_q.weight").unwrap().0,
            "model.layers.3.self_attn.q_proj.weight"
        );
        assert_eq!(
            first(&n, "blk.0.ffn_norm.weight").unwrap().0,
            "model.layers.0.post_attention_layernorm.weight"
        );
        assert_eq!(first(&n, "output.weight"), None, "tied: no lm_head");
        assert_eq!(first(&n, "blk.0.post_ffw_norm.weight"), None);
        let untied = names(Family::Llama, false, false);
        assert_eq!(first(&untied, "output.weight").unwrap().0, "lm_head.weight");
    }

    #[test]
    fn phi3_maps_fused_gate_up_and_qkv() {
        let n = names(Family::Llama, true, false);
        assert_eq!(
            first(&n, "blk.1.ffn_up.weight").unwrap().0,
            "model.layers.1.mlp.gate_up_proj.weight"
        );
        assert_eq!(first(&n, "blk.1.ffn_gate.weight"), None);
        assert_eq!(
            first(&n, "blk.1.attn_qkv.weight").unwrap().0,
            "model.layers.1.self_attn.qkv_proj.weight"
        );
    }

    #[test]
    fn gemma_norms_add_one_and_ffn_norm_is_pre_feedforward() {
        let n = names(Family::Gemma, false, true);
        assert_eq!(
            first(&n, "blk.2.ffn_norm.weight").unwrap(),
            (
                "model.layers.2.pre_feedforward_layernorm.weight".into(),
                Transform::AddOne
            )
        );
        assert_eq!(
            first(&n, "blk.2.post_attention_norm.weight").unwrap().0,
            "model.layers.2.post_attention_layernorm.weight"
        );
        assert_eq!(
            first(&n, "blk.2.attn_k_norm.weight").unwrap().1,
            Transform::AddOne
        );
        assert_eq!(
            first(&n, "output_norm.weight").unwrap().1,
            Transform::AddOne
        );
        assert_eq!(first(&n, "blk.2.attn_q.weight").unwrap().1, Transform::None);
    }

    #[test]
    fn gpt2_conv1d_weights_are_transposed_and_prefixes_tried() {
        let n = names(Family::Gpt2, false, true);
        let t = n.lookup("blk.4.attn_qkv.weight").unwrap();
        assert_eq!(
            t.candidates,
            [
                "h.4.attn.c_attn.weight",
                "transformer.h.4.attn.c_attn.weight"
            ]
        );
        assert_eq!(t.transform, Transform::Transpose);
        assert_eq!(
            n.lookup("blk.4.attn_qkv.bias").unwrap().transform,
            Transform::None
        );
        assert_eq!(
            n.lookup("blk.4.ffn_norm.weight").unwrap().transform,
            Transform::None
        );
    }

    #[test]
    fn phi2_names_cover_biases_and_dense() {
        let n = names(Family::Phi, false, false);
        assert_eq!(
            first(&n, "blk.0.attn_output.bias").unwrap().0,
            "model.layers.0.self_attn.dense.bias"
        );
        assert_eq!(first(&n, "output.bias").unwrap().0, "lm_head.bias");
        assert_eq!(
            first(&n, "output_norm.bias").unwrap().0,
            "model.final_layernorm.bias"
        );
    }
}
