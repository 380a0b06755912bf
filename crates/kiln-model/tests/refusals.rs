//! What Kiln refuses, and that each refusal carries the facts: an unknown architecture
//! lists the supported ones, a missing tensor is named as the file names it, a wrong shape
//! shows expected and found, unsupported types and options list what is supported.

mod common;

use std::sync::Arc;

use common::testdata;
use kiln_format::{GgmlType, GgufFile, GgufWriter, SafetensorsFile, SafetensorsWriter, Value};
use kiln_model::{LoadOptions, Model, ModelError, supported_architectures};

/// The tiny llama checkpoint as GGUF, rewritten: metadata overrides, tensors dropped or
/// replaced.
fn llama_gguf(
    md: &[(&str, Value)],
    drop: &[&str],
    replace: &[(&str, GgmlType, Vec<u64>, Vec<u8>)],
) -> Arc<GgufFile> {
    let src = kiln_model::convert::hf_to_gguf(testdata("hf-tiny/llama")).unwrap();
    let src = GgufFile::from_bytes(src.to_bytes().unwrap()).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in src.metadata().iter() {
        let v = md
            .iter()
            .find(|(key, _)| *key == k)
            .map_or_else(|| v.clone(), |(_, v)| v.clone());
        w.add_metadata(k, v).unwrap();
    }
    for (k, v) in md {
        if src.metadata().get(k).is_none() {
            w.add_metadata(*k, v.clone()).unwrap();
        }
    }
    for t in src.tensors() {
        if drop.contains(&t.name.as_str()) {
            continue;
        }
        match replace.iter().find(|r| r.0 == t.name) {
            Some((name, ty, dims, data)) => w.add_tensor(*name, *ty, dims, data.clone()),
            None => w.add_tensor(t.name.clone(), t.ty, &t.dims, src.tensor_data(t).to_vec()),
        }
        .unwrap();
    }
    Arc::new(GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap())
}

fn load(file: Arc<GgufFile>) -> ModelError {
    match Model::from_gguf(file) {
        Ok(_) => panic!("the model loaded"),
        Err(e) => e,
    }
}

#[test]
fn unknown_architectures_are_refused_with_the_supported_list() {
    for arch in ["mllama", ""] {
        let err = load(llama_gguf(
            &[("general.architecture", Value::from(arch))],
            &[],
            &[],
        ));
        match &err {
            ModelError::UnsupportedArchitecture { arch: a, supported } => {
                assert_eq!(a, arch);
                assert_eq!(supported, &supported_architectures());
            }
            other => panic!("{arch:?}: expected UnsupportedArchitecture, got {other}"),
        }
        let msg = err.to_string();
        for s in supported_architectures() {
            assert!(msg.contains(s), "{msg}");
        }
    }
}

#[test]
fn a_missing_tensor_is_named() {
    let err = load(llama_gguf(&[], &["blk.1.attn_k.weight"], &[]));
    assert!(
        matches!(&err, ModelError::MissingTensor { name } if name == "blk.1.attn_k.weight"),
        "{err}"
    );
}

#[test]
fn a_wrong_shape_reports_expected_and_found() {
    let err = load(llama_gguf(
        &[],
        &[],
        &[(
            "blk.0.ffn_up.weight",
            GgmlType::F32,
            vec![32, 40],
            vec![0; 32 * 40 * 4],
        )],
    ));
    match err {
        ModelError::ShapeMismatch {
            tensor,
            expected,
            found,
        } => {
            assert_eq!(tensor, "blk.0.ffn_up.weight");
            assert_eq!((expected, found), (vec![32, 48], vec![32, 40]));
        }
        other => panic!("expected ShapeMismatch, got {other}"),
    }
}

#[test]
fn a_gguf_tensor_type_the_kernels_lack_is_refused_listing_the_ones_they_have() {
    let err = load(llama_gguf(
        &[],
        &[],
        &[(
            "blk.0.ffn_up.weight",
            GgmlType::I32,
            vec![32, 48],
            vec![0; 32 * 48 * 4],
        )],
    ));
    let kernels: Vec<&str> = kiln_quant::supported_types()
        .into_iter()
        .map(|t| t.name())
        .collect();
    match &err {
        ModelError::UnsupportedTensorType {
            tensor,
            type_name,
            supported,
            ..
        } => {
            assert_eq!(
                (tensor.as_str(), *type_name),
                ("blk.0.ffn_up.weight", "I32")
            );
            assert_eq!(supported, &kernels);
        }
        other => panic!("expected UnsupportedTensorType, got {other}"),
    }
    let msg = err.to_string();
    for t in kernels {
        assert!(msg.contains(t), "{msg}");
    }
}

#[test]
fn an_unimplemented_rope_scaling_is_refused_with_the_supported_list() {
    let err = load(llama_gguf(
        &[("llama.rope.scaling.type", Value::from("yarn"))],
        &[],
        &[],
    ));
    assert!(
        matches!(&err, ModelError::UnsupportedRopeScaling { kind, supported }
            if kind == "yarn" && supported.contains(&"linear")),
        "{err}"
    );
}

/// A copy of a tiny checkpoint directory whose safetensors file went through `edit`.
fn edited_checkpoint(
    name: &str,
    edit: impl Fn(&str, &kiln_format::SafetensorsTensorView, &mut SafetensorsWriter),
) -> tempfile::TempDir {
    let src = testdata(&format!("hf-tiny/{name}"));
    let tmp = tempfile::tempdir().unwrap();
    std::fs::copy(src.join("config.json"), tmp.path().join("config.json")).unwrap();
    let f = SafetensorsFile::open(src.join("model.safetensors")).unwrap();
    let mut w = SafetensorsWriter::new();
    for t in f.tensors() {
        edit(&t.name, &f.tensor(&t.name).unwrap(), &mut w);
    }
    w.write(tmp.path().join("model.safetensors")).unwrap();
    tmp
}

#[test]
fn a_checkpoint_missing_a_tensor_names_it_as_the_checkpoint_does() {
    let tmp = edited_checkpoint("llama", |name, t, w| {
        if name != "model.layers.1.self_attn.k_proj.weight" {
            w.add_tensor(name, t.info.dtype, &t.info.shape, t.data.to_vec())
                .unwrap();
        }
    });
    let err = Model::open(tmp.path()).err().expect("refused");
    assert!(
        matches!(&err, ModelError::MissingTensor { name } if name == "model.layers.1.self_attn.k_proj.weight"),
        "{err}"
    );
}

#[test]
fn an_untied_checkpoint_without_lm_head_is_refused() {
    let tmp = edited_checkpoint("llama", |name, t, w| {
        if name != "lm_head.weight" {
            w.add_tensor(name, t.info.dtype, &t.info.shape, t.data.to_vec())
                .unwrap();
        }
    });
    let err = Model::open(tmp.path()).err().expect("refused");
    assert!(
        matches!(&err, ModelError::MissingTensor { name } if name == "lm_head.weight"),
        "{err}"
    );
}

#[test]
fn a_tensor_in_a_type_kiln_cannot_compute_with_is_named_with_its_dtype() {
    let tmp = edited_checkpoint("llama", |name, t, w| {
        if name == "model.layers.0.mlp.up_proj.weight" {
            let n = t.info.n_elements() as usize;
            w.add_tensor(name, kiln_format::Dtype::I32, &t.info.shape, vec![0; 4 * n])
                .unwrap();
        } else {
            w.add_tensor(name, t.info.dtype, &t.info.shape, t.data.to_vec())
                .unwrap();
        }
    });
    let err = Model::open(tmp.path()).err().expect("refused");
    assert!(
        matches!(&err, ModelError::UnsupportedTensorType { tensor, type_name, supported, .. }
            if tensor == "model.layers.0.mlp.up_proj.weight" && *type_name == "I32"
                && supported == &["F32", "F16", "BF16"]),
        "{err}"
    );
}

#[test]
fn an_unknown_model_type_lists_the_supported_model_types() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(
        tmp.path().join("config.json"),
        r#"{"model_type": "mllama", "hidden_size": 8}"#,
    )
    .unwrap();
    let err = Model::open(tmp.path()).err().expect("refused");
    let msg = err.to_string();
    assert!(
        matches!(err, ModelError::UnsupportedArchitecture { .. }),
        "{msg}"
    );
    for t in kiln_model::supported_hf_model_types() {
        assert!(msg.contains(t), "{msg}");
    }
}

#[test]
fn a_directory_without_config_is_not_a_model() {
    let tmp = tempfile::tempdir().unwrap();
    let err = Model::open(tmp.path()).err().expect("refused");
    assert!(matches!(err, ModelError::NotAModel { .. }), "{err}");
}

#[test]
fn quantizing_to_an_unsupported_type_lists_the_supported_ones() {
    let opts = LoadOptions {
        quantize: Some(GgmlType::Q8_1),
    };
    let err = Model::open_with(testdata("hf-tiny/llama"), &opts)
        .err()
        .expect("refused");
    assert!(
        matches!(&err, ModelError::UnsupportedQuantization { requested, supported }
            if requested == "Q8_1"
                && ["Q8_0", "Q4_0", "Q4_K", "Q6_K", "IQ4_XS"].iter().all(|t| supported.contains(t))),
        "{err}"
    );
}
