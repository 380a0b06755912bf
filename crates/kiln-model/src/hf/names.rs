//! Hugging Face tensor names → the GGUF names architectures bind.
//!
//! An architecture's table ([`TensorNames`], in its descriptor) says where
//! `blk.N.attn_q.weight` lives in a transformers checkpoint
//! (`model.layers.N.self_attn.q_proj.weight`) and what must be done to it on load. The
//! llama-style tables several architectures share live here; a table only one architecture
//! uses lives in its `arch/<name>.rs`.

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

/// Where a GGUF-named tensor is in a checkpoint of one architecture, or `None` if the
/// architecture has no such tensor; `tied` says the head is the embedding (then there is
/// no `output.weight` to find).
pub type TensorNames = fn(gguf: &str, tied: bool) -> Option<HfTensor>;

/// The name table of one checkpoint.
#[derive(Clone, Debug)]
pub struct HfNames {
    /// The architecture's table.
    pub tensor: TensorNames,
    /// Whether `output.weight` is tied to the embedding (then `lm_head.weight`, if a
    /// checkpoint carries it anyway, is ignored as transformers does).
    pub tied: bool,
}

impl HfNames {
    /// The checkpoint location of a GGUF-named tensor, or `None` if the architecture has no
    /// such tensor.
    pub fn lookup(&self, gguf: &str) -> Option<HfTensor> {
        (self.tensor)(gguf, self.tied)
    }
}

pub(crate) fn one(name: String, transform: Transform) -> HfTensor {
    HfTensor {
        candidates: vec![name],
        transform,
    }
}

/// `model.layers.N.{self_attn,mlp}.*`: llama, mistral, qwen2, qwen3.
pub(crate) fn llama(gguf: &str, tied: bool) -> Option<HfTensor> {
    llama_like(gguf, tied, false, false)
}

/// The llama names with gate and up fused into one `gate_up_proj` (phi-3; GGUF: `ffn_up`
/// of `2·n_ff` rows).
pub(crate) fn llama_fused_gate_up(gguf: &str, tied: bool) -> Option<HfTensor> {
    llama_like(gguf, tied, false, true)
}

/// The llama names with norms stored as `w` for `1 + w`, and `pre_feedforward_layernorm`
/// / `post_*_layernorm` around the FFN (Gemma).
pub(crate) fn gemma(gguf: &str, tied: bool) -> Option<HfTensor> {
    llama_like(gguf, tied, true, false)
}

fn llama_like(gguf: &str, tied: bool, gemma: bool, fused_gate_up: bool) -> Option<HfTensor> {
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
        "output.weight" if !tied => {
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
        "ffn_gate.weight" if !fused_gate_up => ("mlp.gate_proj.weight", Transform::None),
        "ffn_up.weight" if fused_gate_up => ("mlp.gate_up_proj.weight", Transform::None),
        "ffn_up.weight" => ("mlp.up_proj.weight", Transform::None),
        "ffn_down.weight" => ("mlp.down_proj.weight", Transform::None),
        _ => return None,
    };
    Some(one(format!("{p}{hf}"), t))
}

/// The llama names plus a mixture-of-experts block (Mixtral, OLMoE, Qwen2-MoE, Qwen3-MoE):
/// the router `ffn_gate_inp`, expert `E`'s projections `ffn_{gate,up,down}.E` (the
/// per-expert names of [`crate::moe::expert_name`]) and Qwen2-MoE's shared expert. Mixtral
/// checkpoints name the block `block_sparse_moe` and the projections `w1`/`w3`/`w2`; the
/// others `mlp` and `{gate,up,down}_proj`.
pub(crate) fn moe(gguf: &str, tied: bool) -> Option<HfTensor> {
    let Some((il, rest)) = split_layer(gguf) else {
        return llama(gguf, tied);
    };
    let p = format!("model.layers.{il}.");
    let both = |mlp: String, mixtral: String| HfTensor {
        candidates: vec![
            format!("{p}mlp.{mlp}"),
            format!("{p}block_sparse_moe.{mixtral}"),
        ],
        transform: Transform::None,
    };
    let mlp = |hf: &str| Some(one(format!("{p}mlp.{hf}"), Transform::None));
    match rest {
        "ffn_gate_inp.weight" => return Some(both("gate.weight".into(), "gate.weight".into())),
        "ffn_gate_shexp.weight" => return mlp("shared_expert.gate_proj.weight"),
        "ffn_up_shexp.weight" => return mlp("shared_expert.up_proj.weight"),
        "ffn_down_shexp.weight" => return mlp("shared_expert.down_proj.weight"),
        "ffn_gate_inp_shexp.weight" => return mlp("shared_expert_gate.weight"),
        _ => {}
    }
    let expert = rest
        .strip_prefix("ffn_")
        .and_then(|r| r.strip_suffix(".weight"))
        .and_then(|r| r.split_once('.'))
        .and_then(|(proj, e)| Some((proj, e.parse::<usize>().ok()?)));
    match expert {
        Some((proj, e)) => {
            let w = match proj {
                "gate" => "w1",
                "up" => "w3",
                "down" => "w2",
                _ => return None,
            };
            Some(both(
                format!("experts.{e}.{proj}_proj.weight"),
                format!("experts.{e}.{w}.weight"),
            ))
        }
        None => llama(gguf, tied),
    }
}

/// `blk.N.rest` → `(N, rest)`.
pub(crate) fn split_layer(name: &str) -> Option<(usize, &str)> {
    let rest = name.strip_prefix("blk.")?;
    let (n, rest) = rest.split_once('.')?;
    Some((n.parse().ok()?, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn first(table: TensorNames, tied: bool, gguf: &str) -> Option<(String, Transform)> {
        table(gguf, tied).map(|t| (t.candidates[0].clone(), t.transform))
    }

    #[test]
    fn llama_names_map_to_transformers_names() {
        assert_eq!(
            first(llama, true, "blk.3.attn_q.weight").unwrap().0,
            "model.layers.3.self_attn.q_proj.weight"
        );
        assert_eq!(
            first(llama, true, "blk.0.ffn_norm.weight").unwrap().0,
            "model.layers.0.post_attention_layernorm.weight"
        );
        assert_eq!(
            first(llama, true, "output.weight"),
            None,
            "tied: no lm_head"
        );
        assert_eq!(first(llama, true, "blk.0.post_ffw_norm.weight"), None);
        assert_eq!(
            first(llama, false, "output.weight").unwrap().0,
            "lm_head.weight"
        );
    }

    #[test]
    fn moe_names_map_routers_experts_and_the_shared_expert() {
        let all = |gguf: &str| moe(gguf, false).unwrap().candidates;
        assert_eq!(
            all("blk.1.ffn_up.3.weight"),
            [
                "model.layers.1.mlp.experts.3.up_proj.weight",
                "model.layers.1.block_sparse_moe.experts.3.w3.weight"
            ]
        );
        assert_eq!(
            all("blk.0.ffn_gate.0.weight")[1],
            "model.layers.0.block_sparse_moe.experts.0.w1.weight"
        );
        assert_eq!(
            all("blk.0.ffn_down.7.weight")[1],
            "model.layers.0.block_sparse_moe.experts.7.w2.weight"
        );
        assert_eq!(
            all("blk.2.ffn_gate_inp.weight"),
            [
                "model.layers.2.mlp.gate.weight",
                "model.layers.2.block_sparse_moe.gate.weight"
            ]
        );
        assert_eq!(
            all("blk.0.ffn_gate_inp_shexp.weight"),
            ["model.layers.0.mlp.shared_expert_gate.weight"]
        );
        assert_eq!(
            all("blk.0.ffn_down_shexp.weight"),
            ["model.layers.0.mlp.shared_expert.down_proj.weight"]
        );
        assert_eq!(
            all("blk.0.attn_q.weight"),
            ["model.layers.0.self_attn.q_proj.weight"]
        );
        assert_eq!(all("output.weight"), ["lm_head.weight"]);
        assert_eq!(moe("blk.0.ffn_side.1.weight", false), None);
        assert_eq!(moe("blk.0.ffn_up_exps.weight", false), None);
    }

    #[test]
    fn phi3_maps_fused_gate_up_and_qkv() {
        let n = llama_fused_gate_up;
        assert_eq!(
            first(n, false, "blk.1.ffn_up.weight").unwrap().0,
            "model.layers.1.mlp.gate_up_proj.weight"
        );
        assert_eq!(first(n, false, "blk.1.ffn_gate.weight"), None);
        assert_eq!(
            first(n, false, "blk.1.attn_qkv.weight").unwrap().0,
            "model.layers.1.self_attn.qkv_proj.weight"
        );
    }

    #[test]
    fn gemma_norms_add_one_and_ffn_norm_is_pre_feedforward() {
        assert_eq!(
            first(gemma, true, "blk.2.ffn_norm.weight").unwrap(),
            (
                "model.layers.2.pre_feedforward_layernorm.weight".into(),
                Transform::AddOne
            )
        );
        assert_eq!(
            first(gemma, true, "blk.2.post_attention_norm.weight")
                .unwrap()
                .0,
            "model.layers.2.post_attention_layernorm.weight"
        );
        assert_eq!(
            first(gemma, true, "blk.2.attn_k_norm.weight").unwrap().1,
            Transform::AddOne
        );
        assert_eq!(
            first(gemma, true, "output_norm.weight").unwrap().1,
            Transform::AddOne
        );
        assert_eq!(
            first(gemma, true, "blk.2.attn_q.weight").unwrap().1,
            Transform::None
        );
    }
}
