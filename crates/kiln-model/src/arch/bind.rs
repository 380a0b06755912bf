//! The binding helpers every architecture builder shares: which tensors a block has
//! ([`BlockTensors`]), binding them by their GGUF names, the output head, and the metadata
//! readings several architectures make the same way (sliding-window layers, query scale).

use kiln_format::Metadata;

use crate::blocks::Norm;
use crate::config::{Activation, NormKind, RopeStyle, common_config_with};
use crate::moe::MoeLayer;
use crate::moe::config::MoeConfig;
use crate::spec::{DenseFfn, FfnSpec, LayerSpec, ModelSpec, MoeFfn};
use crate::weights::{Weight, WeightStore};
use crate::{ModelConfig, ModelError};

/// Whether a block's optional tensors are required, allowed, or absent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Want {
    /// The architecture does not have them.
    No,
    /// Bound when the file has them (llama GGUFs may carry attention biases).
    IfPresent,
    /// Required.
    Yes,
}

/// How a block's Q, K and V projections are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Qkv {
    /// `attn_q`, `attn_k`, `attn_v`.
    Separate,
    /// One `attn_qkv` of `q_dim + k_dim + v_dim` rows when present, else separate (phi-2,
    /// phi-3 GGUFs come both ways).
    FusedOrSeparate,
}

/// How a block's feed-forward is stored.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Ffn {
    /// `ffn_gate`, `ffn_up`, `ffn_down`; without `ffn_gate`, `ffn_up` holds gate and up
    /// stacked (`2·n_ff` rows, gate first: phi-3).
    Gated,
    /// `ffn_up`, `ffn_down` with the activation between (phi-2, GPT-2).
    Plain,
    /// A mixture of experts of this configuration ([`MoeLayer::bind`]).
    Moe(MoeConfig),
}

/// What a block looks like: which tensors exist beyond the llama core.
pub(crate) struct BlockTensors {
    pub qkv: Qkv,
    /// Biases of Q, K, V (and of a fused QKV).
    pub qkv_bias: Want,
    /// Bias of the attention output projection.
    pub out_bias: Want,
    /// Per-head RMSNorm of Q and K (qwen3, gemma3).
    pub qk_norm: bool,
    /// Whether attention has a pre-norm (false: it reads the residual stream, OLMo 2).
    pub attn_norm: bool,
    /// RMSNorm after attention and after the FFN (gemma).
    pub post_norms: bool,
    /// LayerNorm biases (phi-2, GPT-2).
    pub norm_bias: bool,
    pub ffn: Ffn,
    /// Biases of the FFN projections (phi-2, GPT-2).
    pub ffn_bias: bool,
    /// Whether the FFN has its own pre-norm (false: parallel blocks reuse the attention
    /// norm, phi-2; sequential ones read the residual stream, OLMo 2).
    pub ffn_norm: bool,
}

impl BlockTensors {
    /// The llama block: separate Q/K/V, no biases, gated FFN, RMSNorms.
    pub const LLAMA: BlockTensors = BlockTensors {
        qkv: Qkv::Separate,
        qkv_bias: Want::IfPresent,
        out_bias: Want::IfPresent,
        qk_norm: false,
        attn_norm: true,
        post_norms: false,
        norm_bias: false,
        ffn: Ffn::Gated,
        ffn_bias: false,
        ffn_norm: true,
    };

    /// The GPT-2 block: LayerNorms with biases, a fused (or separate) QKV projection with
    /// biases, an output bias, and a plain FFN with biases.
    pub const GPT2: BlockTensors = BlockTensors {
        qkv: Qkv::FusedOrSeparate,
        qkv_bias: Want::Yes,
        out_bias: Want::Yes,
        qk_norm: false,
        attn_norm: true,
        post_norms: false,
        norm_bias: true,
        ffn: Ffn::Plain,
        ffn_bias: true,
        ffn_norm: true,
    };
}

fn want_vector(
    store: &WeightStore,
    want: Want,
    name: &str,
    n: usize,
) -> Result<Option<Vec<f32>>, ModelError> {
    match want {
        Want::No => Ok(None),
        Want::IfPresent => store.opt_vector(name, n),
        Want::Yes => store.vector(name, n).map(Some),
    }
}

fn norm(store: &WeightStore, name: &str, n: usize, bias: bool) -> Result<Norm, ModelError> {
    let weight = store.vector(&format!("{name}.weight"), n)?;
    let bias = if bias {
        Some(store.vector(&format!("{name}.bias"), n)?)
    } else {
        None
    };
    Ok(Norm { weight, bias })
}

/// Splits a fused bias vector into consecutive parts of the given lengths.
fn split_vec(v: Vec<f32>, lens: [usize; 3]) -> [Vec<f32>; 3] {
    let (a, rest) = v.split_at(lens[0]);
    let (b, c) = rest.split_at(lens[1]);
    [a.to_vec(), b.to_vec(), c.to_vec()]
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

    // Attention projections, fused or separate.
    let fused = opts.qkv == Qkv::FusedOrSeparate && store.has(&n("attn_qkv.weight"));
    let (wq, wk, wv, bq, bk, bv) = if fused {
        let wqkv = store.matrix(&n("attn_qkv.weight"), d, qd + kd + vd)?;
        let bias = want_vector(store, opts.qkv_bias, &n("attn_qkv.bias"), qd + kd + vd)?;
        let (bq, bk, bv) = match bias {
            Some(b) => {
                let [q, k, v] = split_vec(b, [qd, kd, vd]);
                (Some(q), Some(k), Some(v))
            }
            None => (None, None, None),
        };
        (
            wqkv.rows(0, qd)?,
            wqkv.rows(qd, kd)?,
            wqkv.rows(qd + kd, vd)?,
            bq,
            bk,
            bv,
        )
    } else {
        (
            store.matrix(&n("attn_q.weight"), d, qd)?,
            store.matrix(&n("attn_k.weight"), d, kd)?,
            store.matrix(&n("attn_v.weight"), d, vd)?,
            want_vector(store, opts.qkv_bias, &n("attn_q.bias"), qd)?,
            want_vector(store, opts.qkv_bias, &n("attn_k.bias"), kd)?,
            want_vector(store, opts.qkv_bias, &n("attn_v.bias"), vd)?,
        )
    };

    // Feed-forward projections.
    let dense = |w_gate, w_up| -> Result<FfnSpec, ModelError> {
        Ok(FfnSpec::Dense(DenseFfn {
            w_gate,
            w_up,
            b_up: vec_if(opts.ffn_bias, n("ffn_up.bias"), ff)?,
            w_down: store.matrix(&n("ffn_down.weight"), ff, d)?,
            b_down: vec_if(opts.ffn_bias, n("ffn_down.bias"), d)?,
        }))
    };
    let ffn = match opts.ffn {
        Ffn::Plain => dense(None, store.matrix(&n("ffn_up.weight"), d, ff)?)?,
        Ffn::Gated if store.has(&n("ffn_gate.weight")) => dense(
            Some(store.matrix(&n("ffn_gate.weight"), d, ff)?),
            store.matrix(&n("ffn_up.weight"), d, ff)?,
        )?,
        Ffn::Gated => {
            let fused = store.matrix(&n("ffn_up.weight"), d, 2 * ff)?;
            dense(Some(fused.rows(0, ff)?), fused.rows(ff, ff)?)?
        }
        Ffn::Moe(cfg) => FfnSpec::Moe(MoeFfn {
            cfg,
            layer: MoeLayer::bind(store, il, &cfg, d)?,
        }),
    };

    let hv = cfg.n_head * cfg.head_dim_v;
    Ok(LayerSpec {
        attn_norm: if opts.attn_norm {
            Some(norm(store, &n("attn_norm"), d, opts.norm_bias)?)
        } else {
            None
        },
        wq,
        wk,
        wv,
        bq,
        bk,
        bv,
        q_norm: vec_if(opts.qk_norm, n("attn_q_norm.weight"), cfg.head_dim)?,
        k_norm: vec_if(opts.qk_norm, n("attn_k_norm.weight"), cfg.head_dim)?,
        wo: store.matrix(&n("attn_output.weight"), hv, d)?,
        bo: want_vector(store, opts.out_bias, &n("attn_output.bias"), d)?,
        post_attn_norm: vec_if(opts.post_norms, n("post_attention_norm.weight"), d)?,
        ffn_norm: if opts.ffn_norm {
            Some(norm(store, &n("ffn_norm"), d, opts.norm_bias)?)
        } else {
            None
        },
        ffn,
        post_ffn_norm: vec_if(opts.post_norms, n("post_ffw_norm.weight"), d)?,
        sliding_window: None,
        rope_base: cfg.rope_base,
        rope: true,
    })
}

/// The output side of a model: final norm, head (tied to the embedding when
/// `output.weight` is absent) and its optional bias.
pub(crate) struct Head {
    pub tok_embd: Weight,
    pub output_norm: Norm,
    pub output: Weight,
    pub output_bias: Option<Vec<f32>>,
}

pub(crate) fn bind_head(
    store: &WeightStore,
    cfg: &ModelConfig,
    norm_bias: bool,
    output_bias: bool,
) -> Result<Head, ModelError> {
    let tok_embd = store.matrix("token_embd.weight", cfg.n_embd, cfg.vocab_size)?;
    let output_norm = norm(store, "output_norm", cfg.n_embd, norm_bias)?;
    let output = match store.opt_matrix("output.weight", cfg.n_embd, cfg.vocab_size)? {
        Some(w) => w,
        None => tok_embd.clone(),
    };
    let output_bias = if output_bias {
        Some(store.vector("output.bias", cfg.vocab_size)?)
    } else {
        None
    };
    Ok(Head {
        tok_embd,
        output_norm,
        output,
        output_bias,
    })
}

/// Binds every layer with the same block description.
pub(crate) fn bind_layers(
    store: &WeightStore,
    cfg: &ModelConfig,
    opts: &BlockTensors,
) -> Result<Vec<LayerSpec>, ModelError> {
    (0..cfg.n_layer)
        .map(|il| bind_layer(store, cfg, il, opts))
        .collect()
}

/// The spec of a model whose layers all have the block `opts` and whose head has the
/// block's norm kind, with an output bias when `output_bias`. Validates `cfg` first.
pub(crate) fn uniform_spec(
    store: &WeightStore,
    cfg: ModelConfig,
    opts: &BlockTensors,
    output_bias: bool,
) -> Result<ModelSpec, ModelError> {
    cfg.validate()?;
    let layers = bind_layers(store, &cfg, opts)?;
    let head = bind_head(store, &cfg, opts.norm_bias, output_bias)?;
    Ok(spec(cfg, head, layers))
}

/// The configuration of a LayerNorm model with a plain (ungated) GELU feed-forward
/// (GPT-2, phi-2).
pub(crate) fn plain_gelu_config(
    md: &Metadata,
    arch: &str,
    rope_style: RopeStyle,
) -> Result<ModelConfig, ModelError> {
    common_config_with(md, arch, rope_style, Activation::GeluTanh, NormKind::Layer)
}

/// A model spec with the defaults most architectures share (no embedding, residual or
/// logit scale, no learned positions, no RoPE factors).
pub(crate) fn spec(cfg: ModelConfig, head: Head, layers: Vec<LayerSpec>) -> ModelSpec {
    ModelSpec {
        cfg,
        tok_embd: head.tok_embd,
        pos_embd: None,
        output_norm: head.output_norm,
        output: head.output,
        output_bias: head.output_bias,
        layers,
        embed_scale: None,
        rope_freqs: None,
        residual_scale: None,
        logit_scale: None,
    }
}

/// Which layers use sliding-window attention: `{arch}.attention.sliding_window_pattern`
/// as a per-layer bool array, or as a period `p` (layer `i` slides when `i % p < p - 1`),
/// else `default_period`.
pub(crate) fn swa_layers(
    md: &Metadata,
    arch: &str,
    n_layer: usize,
    default_period: usize,
) -> Result<Vec<bool>, ModelError> {
    let key = format!("{arch}.attention.sliding_window_pattern");
    let period = match md.get(&key) {
        Some(kiln_format::Value::Array(kiln_format::Array::Bool(v))) => {
            if v.len() != n_layer {
                return Err(ModelError::InvalidConfig(format!(
                    "{key} lists {} layers, the model has {n_layer}",
                    v.len()
                )));
            }
            return Ok(v.clone());
        }
        Some(_) => md.u64(&key)? as usize,
        None => default_period,
    };
    if period == 0 {
        return Err(ModelError::InvalidConfig(format!("{key} is zero")));
    }
    Ok((0..n_layer).map(|il| il % period < period - 1).collect())
}

/// `{arch}.attention.scale` when present, else `1/sqrt(dim)`.
pub(crate) fn attn_scale(md: &Metadata, arch: &str, dim: usize) -> Result<f32, ModelError> {
    Ok(crate::config::arch_opt_f32(md, arch, "attention.scale")?
        .unwrap_or(1.0 / (dim as f32).sqrt()))
}
