use std::collections::HashSet;
use std::path::Path;

use super::*;

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
    for name in ["mllama", "qwen2_moe", "gemma3", "phi2"] {
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
