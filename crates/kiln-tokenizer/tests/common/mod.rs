//! Shared helpers: the cached real models, loaded once per test binary.

#![allow(dead_code)]

use std::sync::OnceLock;

use kiln_tokenizer::Tokenizer;

/// The three cached models, by the name their reference file uses.
pub const MODELS: &[(&str, &str)] = &[
    ("smollm2", "smollm2-135m"),
    ("gemma3", "gemma3-270m"),
    ("qwen2.5", "qwen2.5-coder-0.5b"),
];

/// Loads a cached model's tokenizer; panics (fails the test) when the model is missing.
pub fn tokenizer(hub_name: &str) -> &'static Tokenizer {
    static CACHE: OnceLock<Vec<(String, Tokenizer)>> = OnceLock::new();
    let all = CACHE.get_or_init(|| {
        MODELS
            .iter()
            .map(|&(_, name)| {
                let path = kiln_hub::resolve(name)
                    .unwrap_or_else(|e| panic!("model {name} is required for this test: {e}"));
                let file = kiln_format::GgufFile::open(&path)
                    .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
                let tok = Tokenizer::from_gguf(file.metadata())
                    .unwrap_or_else(|e| panic!("cannot build the tokenizer of {name}: {e}"));
                (name.to_owned(), tok)
            })
            .collect()
    });
    all.iter()
        .find(|(n, _)| n == hub_name)
        .map(|(_, t)| t)
        .unwrap_or_else(|| panic!("unknown test model {hub_name}"))
}

/// The reference file of a model (`testdata/ref/<name>.json`).
pub fn reference(ref_name: &str) -> serde_json::Value {
    let path = format!(
        "{}/../../testdata/ref/{ref_name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path} is not JSON: {e}"))
}

pub fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .expect("an array of ids")
        .iter()
        .map(|x| u32::try_from(x.as_u64().expect("an id")).expect("an id fits u32"))
        .collect()
}

/// A cached model's GGUF file (its metadata), opened once per test binary; panics (fails
/// the test) when the model is missing.
pub fn gguf(hub_name: &str) -> &'static kiln_format::GgufFile {
    static CACHE: OnceLock<Vec<(String, kiln_format::GgufFile)>> = OnceLock::new();
    let all = CACHE.get_or_init(|| {
        MODELS
            .iter()
            .map(|&(_, name)| {
                let path = kiln_hub::resolve(name)
                    .unwrap_or_else(|e| panic!("model {name} is required for this test: {e}"));
                let file = kiln_format::GgufFile::open(&path)
                    .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
                (name.to_owned(), file)
            })
            .collect()
    });
    all.iter()
        .find(|(n, _)| n == hub_name)
        .map(|(_, f)| f)
        .unwrap_or_else(|| panic!("unknown test model {hub_name}"))
}
