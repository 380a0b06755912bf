//! The `config.json` translation of each architecture, through its descriptor.

use std::path::Path;

use super::translate_hf;
use crate::ModelError;
use crate::hf::{HfModel, Transform, parse_config};

fn translate(json: &str) -> Result<HfModel, ModelError> {
    translate_hf(&parse_config(json, Path::new("config.json"))?)
}

fn md_u64(m: &HfModel, key: &str) -> u64 {
    m.metadata.u64(key).unwrap()
}

#[test]
fn llama_config_becomes_llama_metadata() {
    let m = translate(
        r#"{"model_type": "llama", "hidden_size": 64, "intermediate_size": 172,
            "num_hidden_layers": 5, "num_attention_heads": 8, "num_key_value_heads": 4,
            "head_dim": 8, "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "rope_scaling": null,
            "tie_word_embeddings": true, "vocab_size": 512, "max_position_embeddings": 512,
            "hidden_act": "silu"}"#,
    )
    .unwrap();
    assert_eq!(m.metadata.str("general.architecture").unwrap(), "llama");
    assert_eq!(md_u64(&m, "llama.embedding_length"), 64);
    assert_eq!(md_u64(&m, "llama.attention.head_count_kv"), 4);
    assert_eq!(md_u64(&m, "llama.attention.key_length"), 8);
    assert_eq!(md_u64(&m, "llama.feed_forward_length"), 172);
    assert_eq!(m.metadata.f32("llama.rope.freq_base").unwrap(), 10000.0);
    assert_eq!(
        m.metadata
            .f32("llama.attention.layer_norm_rms_epsilon")
            .unwrap(),
        1e-5
    );
    assert!(m.names.tied);
}

#[test]
fn unknown_model_type_lists_the_supported_ones() {
    match translate(r#"{"model_type": "mllama"}"#) {
        Err(ModelError::UnsupportedArchitecture { arch, supported }) => {
            assert_eq!(arch, "mllama");
            assert!(supported.contains(&"gemma3_text") && supported.contains(&"gpt2"));
        }
        other => panic!("expected UnsupportedArchitecture, got {:?}", other.err()),
    }
}

#[test]
fn missing_and_malformed_values_name_the_field() {
    let err = translate(r#"{"model_type": "qwen2", "hidden_size": 8}"#)
        .err()
        .unwrap();
    assert!(
        err.to_string().contains("num_attention_heads: missing"),
        "{err}"
    );
    let err = translate(r#"{"model_type": "qwen2", "hidden_size": "8"}"#)
        .err()
        .unwrap();
    assert!(err.to_string().contains("hidden_size"), "{err}");
    assert!(translate("[]").is_err());
}

#[test]
fn an_activation_the_architecture_does_not_compute_is_refused() {
    let err = translate(
        r#"{"model_type": "gpt2", "n_embd": 8, "n_head": 2, "n_layer": 1, "vocab_size": 4,
            "activation_function": "relu"}"#,
    )
    .err()
    .unwrap();
    assert!(err.to_string().contains("'relu'"), "{err}");
}

#[test]
fn transformers5_rope_parameters_and_gemma3_layer_types_are_read() {
    let m = translate(
        r#"{"model_type": "gemma3_text", "hidden_size": 640, "intermediate_size": 2048,
            "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 1,
            "head_dim": 256, "vocab_size": 16, "query_pre_attn_scalar": 256,
            "hidden_activation": "gelu_pytorch_tanh", "sliding_window": 512,
            "layer_types": ["sliding_attention", "sliding_attention", "full_attention"],
            "rope_parameters": {"full_attention": {"rope_theta": 1000000.0, "rope_type": "default"},
                                "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"}}}"#,
    )
    .unwrap();
    let md = &m.metadata;
    assert_eq!(md.f32("gemma3.rope.freq_base").unwrap(), 1e6);
    assert_eq!(md.f32("gemma3.rope.freq_base_swa").unwrap(), 1e4);
    assert_eq!(md.f32("gemma3.attention.scale").unwrap(), 1.0 / 16.0);
    assert_eq!(md.u64("gemma3.attention.sliding_window").unwrap(), 512);
    assert!(matches!(
        md.get("gemma3.attention.sliding_window_pattern"),
        Some(kiln_format::Value::Array(kiln_format::Array::Bool(v))) if v == &[true, true, false]
    ));
    assert_eq!(md.str("general.architecture").unwrap(), "gemma3");
    assert_eq!(
        m.names.lookup("output_norm.weight").unwrap().transform,
        Transform::AddOne
    );
}

#[test]
fn phi_partial_rotary_becomes_the_rope_dimension_count() {
    let m = translate(
        r#"{"model_type": "phi", "hidden_size": 80, "intermediate_size": 64,
            "num_hidden_layers": 1, "num_attention_heads": 2, "vocab_size": 16,
            "hidden_act": "gelu_new", "layer_norm_eps": 1e-5,
            "rope_parameters": {"rope_theta": 10000.0, "partial_rotary_factor": 0.4, "rope_type": "default"}}"#,
    )
    .unwrap();
    assert_eq!(md_u64(&m, "phi2.rope.dimension_count"), 16);
    assert_eq!(
        m.metadata.f32("phi2.attention.layer_norm_epsilon").unwrap(),
        1e-5
    );
    assert!(!m.names.tied);
}

#[test]
fn llama3_rope_scaling_becomes_rope_freqs_and_yarn_is_passed_on_to_be_refused() {
    let base = r#""model_type": "llama", "hidden_size": 64, "intermediate_size": 8,
        "num_hidden_layers": 1, "num_attention_heads": 2, "vocab_size": 16, "rope_theta": 500000.0"#;
    let m = translate(&format!(
        r#"{{{base}, "rope_scaling": {{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}}}"#
    ))
    .unwrap();
    let f = &m.extra["rope_freqs.weight"];
    assert_eq!(f.len(), 16);
    assert_eq!(f[0], 1.0);
    let m = translate(&format!(
        r#"{{{base}, "rope_scaling": {{"type": "yarn", "factor": 4.0}}}}"#
    ))
    .unwrap();
    assert_eq!(m.metadata.str("llama.rope.scaling.type").unwrap(), "yarn");
    let m = translate(&format!(
        r#"{{{base}, "rope_scaling": {{"rope_type": "linear", "factor": 2.0}}}}"#
    ))
    .unwrap();
    assert_eq!(m.metadata.f32("llama.rope.scaling.factor").unwrap(), 2.0);
}

#[test]
fn moe_configs_become_llamacpp_expert_keys() {
    let base = r#""hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
        "num_attention_heads": 4, "vocab_size": 512, "num_experts_per_tok": 2"#;
    let m = translate(&format!(
        r#"{{"model_type": "qwen2_moe", {base}, "num_experts": 4, "moe_intermediate_size": 16,
            "shared_expert_intermediate_size": 24, "norm_topk_prob": false,
            "decoder_sparse_step": 1, "mlp_only_layers": []}}"#
    ))
    .unwrap();
    assert_eq!(md_u64(&m, "qwen2moe.expert_count"), 4);
    assert_eq!(md_u64(&m, "qwen2moe.expert_used_count"), 2);
    assert_eq!(md_u64(&m, "qwen2moe.expert_feed_forward_length"), 16);
    assert_eq!(md_u64(&m, "qwen2moe.expert_shared_feed_forward_length"), 24);
    assert_eq!(
        m.metadata.opt_bool("qwen2moe.expert_weights_norm").unwrap(),
        Some(false)
    );

    let m = translate(&format!(
        r#"{{"model_type": "mixtral", {base}, "num_local_experts": 8}}"#
    ))
    .unwrap();
    assert_eq!(m.metadata.str("general.architecture").unwrap(), "llama");
    assert_eq!(md_u64(&m, "llama.expert_count"), 8);
    assert_eq!(md_u64(&m, "llama.feed_forward_length"), 48);

    // A dense Llama has no expert keys.
    let m = translate(&format!(r#"{{"model_type": "llama", {base}}}"#)).unwrap();
    assert!(m.metadata.opt_u64("llama.expert_count").unwrap().is_none());
}

#[test]
fn dense_layers_among_moe_layers_are_refused_naming_the_field() {
    let base = r#""model_type": "qwen3_moe", "hidden_size": 32, "intermediate_size": 48,
        "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 512,
        "num_experts": 8, "num_experts_per_tok": 2"#;
    let err = translate(&format!(r#"{{{base}, "mlp_only_layers": [1]}}"#))
        .err()
        .unwrap();
    assert!(err.to_string().contains("mlp_only_layers"), "{err}");
    let err = translate(&format!(r#"{{{base}, "decoder_sparse_step": 2}}"#))
        .err()
        .unwrap();
    assert!(err.to_string().contains("decoder_sparse_step: 2"), "{err}");
}
