//! Shared by the model-level tests: load a real model's tokenizer and build the
//! [`Vocab`] the way `kiln generate` does.

#![allow(dead_code)]

use std::sync::Arc;

use kiln_format::GgufFile;
use kiln_sample::Vocab;
use kiln_tokenizer::Tokenizer;

pub fn open(name: &str) -> Arc<GgufFile> {
    let path = kiln_hub::resolve(name)
        .unwrap_or_else(|e| panic!("model {name} is missing (run `cargo xtask models`): {e}"));
    Arc::new(GgufFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
}

pub fn tokenizer(file: &GgufFile) -> Tokenizer {
    Tokenizer::from_gguf(file.metadata()).expect("tokenizer")
}

/// Token bytes as the tokenizer renders them; control tokens get none (never produced
/// under a grammar): the engine's own adapter.
pub fn vocab(tok: &Tokenizer) -> Arc<Vocab> {
    kiln_testkit::vocab(tok)
}
