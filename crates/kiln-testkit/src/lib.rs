//! # kiln-testkit
//!
//! What Kiln's tests (and `cargo xtask`'s suites) share, in one place instead of copies or
//! `#[path]` includes across crates:
//!
//! - [`model_path`]: a cached real model's path, failing the test loudly when it is missing;
//! - [`server`] (feature `server`): a model loaded for serving and an in-process server on a
//!   free loopback port; [`vocab`]: the tokenizer as the sampler sees it;
//! - [`soak`]: the soak load generator (`cargo xtask bench soak` and the server's soak test);
//! - [`cluster`]: `kiln serve` replicas behind the real vllm-router and a shared-prefix
//!   workload (`cargo xtask bench cluster` and kiln-cli's cluster test);
//! - [`hf_model`], [`hf_tokenizer`]: Hugging Face checkpoints and tokenizer files made from
//!   a GGUF model, so the cross-format tests need no Python and no committed fixtures.
//!
//! A dev-dependency only (`publish = false`); no library crate depends on it.

pub mod cluster;
pub mod hf_model;
pub mod hf_tokenizer;
#[cfg(feature = "server")]
pub mod server;
pub mod soak;

use std::path::PathBuf;

/// The path of a cached real model (`cargo xtask models` fetches them into kiln's cache),
/// fetching it on first use where the network allows. Panics — failing the test — with the
/// model's name and what to run when it cannot be had: a test never passes without its
/// model.
pub fn model_path(name: &str) -> PathBuf {
    kiln_hub::resolve(name).unwrap_or_else(|e| {
        panic!(
            "model {name} is required by this test and is not available \
             (run `cargo xtask models`): {e}"
        )
    })
}

#[cfg(feature = "server")]
pub use kiln_engine::sampler_vocab as vocab;
