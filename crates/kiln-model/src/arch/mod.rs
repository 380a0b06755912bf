//! One module per architecture: each reads its configuration from metadata and names its
//! tensors; the compute itself is shared ([`crate::model`]).

mod gemma3;
mod llama;
mod qwen2;

use kiln_format::Metadata;

use crate::model::{LayerSpec, ModelSpec};
use crate::weights::WeightStore;
use crate::{ModelConfig, ModelError};

/// The architectures Kiln implements, by their `general.architecture` name.
pub const SUPPORTED_ARCHITECTURES: &[&str] = &["llama", "qwen2", "gemma3"];

/// Builds the configuration and tensor bindings for the file's architecture.
pub(crate) fn build(md: &Metadata, store: &WeightStore) -> Result<ModelSpec, ModelError> {
    let arch = md.str("general.architecture")?;
    match arch {
        "llama" => llama::build(md, store),
        "qwen2" => qwen2::build(md, store),
        "gemma3" => gemma3::build(md, store),
        other => Err(ModelError::UnsupportedArchitecture {
            arch: other.to_string(),
            supported: SUPPORTED_ARCHITECTURES.to_vec(),
        }),
    }
}

/// The tensors of a llama-style block (`blk.N.*`): pre-norms, separate Q/K/V, output
/// projection, gated FFN. Optional pieces (biases, per-head norms, post-norms) are bound
/// when the architecture says so.
pub(crate) struct BlockTensors {
    pub qkv_bias: bool,
    pub qk_norm: bool,
    pub post_norms: bool,
}

pub(crate) fn bind_layer(
    store: &WeightStore,
    cfg: &ModelConfig,
    il: usize,
    opts: &BlockTensors,
) -> Result<LayerSpec, ModelError> {
    let n = |s: &str| format!("blk.{il}.{s}");
    let (d, qd, kd, vd, ff) = (cfg.n_embd, cfg.q_dim(), cfg.k_dim(), cfg.v_dim(), cfg.n_ff);
    let vec_if = |cond: bool, name: String, len: usize| -> Result<Option<Vec<f32>>, ModelError> {
        if cond {
            store.vector(&name, len).map(Some)
        } else {
            Ok(None)
        }
    };
    Ok(LayerSpec {
        attn_norm: store.vector(&n("attn_norm.weight"), d)?,
        wq: store.matrix(&n("attn_q.weight"), d, qd)?,
        wk: store.matrix(&n("attn_k.weight"), d, kd)?,
        wv: store.matrix(&n("attn_v.weight"), d, vd)?,
        wo: store.matrix(&n("attn_output.weight"), cfg.n_head * cfg.head_dim_v, d)?,
        bq: vec_if(opts.qkv_bias, n("attn_q.bias"), qd)?,
        bk: vec_if(opts.qkv_bias, n("attn_k.bias"), kd)?,
        bv: vec_if(opts.qkv_bias, n("attn_v.bias"), vd)?,
        q_norm: vec_if(opts.qk_norm, n("attn_q_norm.weight"), cfg.head_dim)?,
        k_norm: vec_if(opts.qk_norm, n("attn_k_norm.weight"), cfg.head_dim)?,
        post_attn_norm: vec_if(opts.post_norms, n("post_attention_norm.weight"), d)?,
        ffn_norm: store.vector(&n("ffn_norm.weight"), d)?,
        w_gate: store.matrix(&n("ffn_gate.weight"), d, ff)?,
        w_up: store.matrix(&n("ffn_up.weight"), d, ff)?,
        w_down: store.matrix(&n("ffn_down.weight"), ff, d)?,
        post_ffn_norm: vec_if(opts.post_norms, n("post_ffw_norm.weight"), d)?,
        sliding_window: None,
        rope_base: cfg.rope_base,
    })
}

/// The embedding, final norm and output head; the head is tied to the embedding when
/// `output.weight` is absent.
pub(crate) fn bind_head(
    store: &WeightStore,
    cfg: &ModelConfig,
) -> Result<(crate::weights::Weight, Vec<f32>, crate::weights::Weight), ModelError> {
    let tok_embd = store.matrix("token_embd.weight", cfg.n_embd, cfg.vocab_size)?;
    let output_norm = store.vector("output_norm.weight", cfg.n_embd)?;
    let output = match store.opt_matrix("output.weight", cfg.n_embd, cfg.vocab_size)? {
        Some(w) => w,
        None => tok_embd.clone(),
    };
    Ok((tok_embd, output_norm, output))
}
