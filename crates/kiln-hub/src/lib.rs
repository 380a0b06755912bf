//! # kiln-hub
//!
//! The model registry: resolves a model reference (a path, or a known name such as
//! `smollm2-135m`) to a local GGUF file, downloading, verifying and assembling it into the
//! user cache on first use.
//!
//! **Owns:** the list of known models, the cache layout, downloads and digest checks.
//!
//! **Must never:** parse model contents or run inference; leave a partial file under a
//! final name.

use std::path::{Path, PathBuf};

/// Errors while resolving or fetching a model.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    /// The reference is neither an existing path nor a known model name.
    #[error("unknown model '{reference}': not a file, and not one of the known names: {known}")]
    UnknownModel { reference: String, known: String },
    /// The model is known but not in the cache, and downloading is not possible.
    #[error("model '{name}' is not cached at {path}")]
    NotCached { name: String, path: PathBuf },
}

/// Names of the models Kiln knows how to fetch.
pub const KNOWN_MODELS: &[&str] = &["smollm2-135m", "gemma3-270m", "qwen2.5-coder-0.5b"];

/// The default model name.
pub const DEFAULT_MODEL: &str = "smollm2-135m";

/// `$XDG_CACHE_HOME/kiln`, else `~/.cache/kiln`.
pub fn cache_dir() -> PathBuf {
    if let Some(x) = std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(x).join("kiln");
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."));
    home.join(".cache").join("kiln")
}

/// Where a known model lives once cached.
pub fn cached_path(name: &str) -> PathBuf {
    cache_dir().join("models").join(format!("{name}.gguf"))
}

/// Resolves a reference to a local file: an existing path is returned as is; a known name
/// is looked up in the cache.
pub fn resolve(reference: &str) -> Result<PathBuf, HubError> {
    let p = Path::new(reference);
    if p.exists() {
        return Ok(p.to_path_buf());
    }
    if !KNOWN_MODELS.contains(&reference) {
        return Err(HubError::UnknownModel {
            reference: reference.to_string(),
            known: KNOWN_MODELS.join(", "),
        });
    }
    let path = cached_path(reference);
    if path.exists() {
        Ok(path)
    } else {
        Err(HubError::NotCached { name: reference.to_string(), path })
    }
}
