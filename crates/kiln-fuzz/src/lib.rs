//! # kiln-fuzz
//!
//! The bodies of Kiln's fuzz targets, as plain functions of a byte slice. The cargo-fuzz
//! crate in `fuzz/` (nightly, libFuzzer, outside the workspace) calls them from its
//! `fuzz_targets/*.rs`; this crate's `tests/corpus.rs` replays every committed corpus file
//! and every crash regression (`fuzz/corpus/<target>/*`, `fuzz/regressions/<target>/*`)
//! through the same functions on stable Rust, so CI checks them without cargo-fuzz.
//!
//! **Owns:** the fuzz-target bodies and the fixtures they load ([`TARGETS`] names them).
//!
//! **Must never:** be a dependency of a library crate, or catch a panic: a body returns
//! normally for every input, and a panic is exactly what the fuzzer reports. Errors from
//! the code under test are the expected outcome for most inputs and are discarded.

mod format;
mod grammar;
mod model;
mod server;
mod tokenizer;

pub use format::{gguf, safetensors_header, safetensors_index};
pub use grammar::grammar;
pub use model::model_config;
pub use server::server_request;
pub use tokenizer::{chat_template, encode_decode, tokenizer_json};

use std::path::PathBuf;

/// A target's body: returns for every input; a panic is a finding.
pub type Body = fn(&[u8]);

/// Every fuzz target: its name (the file `fuzz/fuzz_targets/<name>.rs`, the corpus
/// directory `fuzz/corpus/<name>/`) and its body.
pub const TARGETS: &[(&str, Body)] = &[
    ("gguf", gguf),
    ("safetensors_header", safetensors_header),
    ("safetensors_index", safetensors_index),
    ("model_config", model_config),
    ("tokenizer_json", tokenizer_json),
    ("encode_decode", encode_decode),
    ("chat_template", chat_template),
    ("grammar", grammar),
    ("server_request", server_request),
];

/// The body of the named target.
pub fn target(name: &str) -> Option<Body> {
    TARGETS.iter().find(|(n, _)| *n == name).map(|(_, f)| *f)
}

/// `testdata/<rel>` of the repository (fixtures the bodies load once).
pub(crate) fn testdata(rel: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata")).join(rel)
}

/// A file under `crates/<rel>` of the repository.
pub(crate) fn crate_file(rel: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/..")).join(rel)
}

/// Reads a fixture the bodies depend on. A missing fixture is a broken checkout, not an
/// input the fuzzer found, so it stops the run with the path.
pub(crate) fn read_fixture(path: &std::path::Path) -> Vec<u8> {
    match std::fs::read(path) {
        Ok(b) => b,
        Err(e) => panic!("kiln-fuzz fixture {} is unreadable: {e}", path.display()),
    }
}

/// Splits off the first byte (a mode selector); `(0, &[])` for an empty input.
pub(crate) fn split_mode(data: &[u8]) -> (u8, &[u8]) {
    match data.split_first() {
        Some((m, rest)) => (*m, rest),
        None => (0, &[]),
    }
}
