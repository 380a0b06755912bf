use std::collections::HashSet;
use std::path::Path;

use super::*;
use crate::moe::config::MOE_ARCHITECTURES;

fn translate(json: &str) -> Result<HfModel, ModelError> {
    translate_hf(&crate::hf::parse_config(json, Path::new("config.json"))?)
}

#[test]
fn every_gguf_name_and_hf_model_type_belongs_to_one_architecture() {
    let mut gguf = HashSet::new();
    let mut hf = HashSet::new();
    for a in ARCHITECTURES {
        assert!(gguf.insert(a.gguf_name), "{} listed twice", a.gguf_name);
        assert!(
            !a.hf_model_types.is_empty(),
            "{} has no Hugging Face model_type",
            a.gguf_name
        );
        for t in a.hf_model_types {
            assert!(hf.insert(*t), "model_type {t} claimed twice");
        }
    }
}

#[test]
fn every_name_in_the_list_finds_its_own_descriptor() {
    for &a in ARCHITECTURES {
        let found = ArchDescriptor::by_gguf_name(a.gguf_name).unwrap();
        assert!(std::ptr::eq(found, a), "{}", a.gguf_name);
        for t in a.hf_model_types {
            let found = ArchDescriptor::by_hf_model_type(t).unwrap();
            assert!(std::ptr::eq(found, a), "{t} → {}", found.gguf_name);
        }
    }
    assert_eq!(supported_architectures().len(), ARCHITECTURES.len());
}

#[test]
fn every_hf_model_type_translates_to_its_architectures_metadata() {
    for &a in ARCHITECTURES {
        for t in a.hf_model_types {
            let json = format!(
                r#"{{"model_type": "{t}", "hidden_size": 8, "intermediate_size": 16,
                    "num_hidden_layers": 1, "num_attention_heads": 2, "vocab_size": 4}}"#
            );
            let m = translate(&json).unwrap();
            assert_eq!(m.metadata.str("general.architecture").unwrap(), a.gguf_name);
            let prefix = format!("{}.", a.gguf_name);
            assert!(
                m.metadata
                    .iter()
                    .all(|(k, _)| k.starts_with("general.") || k.starts_with(&prefix)),
                "{t}: a key outside {prefix}"
            );
        }
    }
}

#[test]
fn an_unknown_gguf_architecture_is_refused_listing_the_supported_ones() {
    for name in ["mllama", "", "mistral", "gemma3_text"] {
        match ArchDescriptor::by_gguf_name(name) {
            Err(ModelError::UnsupportedArchitecture { arch, supported }) => {
                assert_eq!(arch, name);
                assert_eq!(supported, supported_architectures());
                let msg = ArchDescriptor::by_gguf_name(name).unwrap_err().to_string();
                assert!(msg.contains("llama, qwen2, qwen3, gemma2"), "{msg}");
            }
            other => panic!("{name:?}: expected UnsupportedArchitecture, got {other:?}"),
        }
    }
}

#[test]
fn an_unknown_hf_model_type_is_refused_listing_the_supported_ones() {
    for name in ["mllama", "falcon", "gemma3", "phi2"] {
        let json = format!(r#"{{"model_type": "{name}", "hidden_size": 8}}"#);
        match translate(&json) {
            Err(ModelError::UnsupportedArchitecture { arch, supported }) => {
                assert_eq!(arch, name);
                assert_eq!(supported, supported_hf_model_types());
                assert!(supported.contains(&"gemma3_text") && supported.contains(&"phi"));
            }
            Err(e) => panic!("{name}: expected UnsupportedArchitecture, got {e}"),
            Ok(_) => panic!("{name}: translated"),
        }
    }
}

#[test]
fn an_unsupported_moe_architecture_is_refused_by_name_with_the_supported_moe_list() {
    for name in ["deepseek2", "gpt-oss", "qwen3next", "dbrx"] {
        match ArchDescriptor::by_gguf_name(name) {
            Err(ModelError::UnsupportedMoeArchitecture {
                arch,
                moe_supported,
                supported,
            }) => {
                assert_eq!(arch, name);
                assert_eq!(moe_supported, MOE_ARCHITECTURES);
                assert_eq!(supported, supported_architectures());
                let msg = ArchDescriptor::by_gguf_name(name).unwrap_err().to_string();
                assert!(
                    msg.contains(&format!("mixture-of-experts architecture '{name}'"))
                        && msg.contains("llama, olmoe, qwen2moe, qwen3moe"),
                    "{msg}"
                );
            }
            other => panic!("{name}: expected UnsupportedMoeArchitecture, got {other:?}"),
        }
    }
    for name in ["deepseek_v3", "gpt_oss"] {
        let json = format!(r#"{{"model_type": "{name}", "hidden_size": 8}}"#);
        match translate(&json) {
            Err(ModelError::UnsupportedMoeArchitecture {
                arch,
                moe_supported,
                ..
            }) => {
                assert_eq!(arch, name);
                assert_eq!(moe_supported, MOE_HF_MODEL_TYPES);
            }
            Err(e) => panic!("{name}: expected UnsupportedMoeArchitecture, got {e}"),
            Ok(_) => panic!("{name}: translated"),
        }
    }
}

#[test]
fn every_moe_architecture_in_the_lists_is_implemented_and_none_is_also_refused() {
    for name in MOE_ARCHITECTURES {
        assert!(ArchDescriptor::by_gguf_name(name).is_ok(), "{name}");
        assert!(!UNSUPPORTED_MOE_GGUF.contains(name), "{name}");
    }
    for t in MOE_HF_MODEL_TYPES {
        assert!(ArchDescriptor::by_hf_model_type(t).is_ok(), "{t}");
        assert!(!UNSUPPORTED_MOE_HF.contains(t), "{t}");
    }
    for name in UNSUPPORTED_MOE_GGUF {
        assert!(!supported_architectures().contains(name), "{name}");
    }
    for t in UNSUPPORTED_MOE_HF {
        assert!(!supported_hf_model_types().contains(t), "{t}");
    }
}
