//! The Python package index's JSON API: from `package==version` to the wheel's URL, size
//! and sha256 as the index publishes them.

use std::collections::HashMap;
use std::io::Read;

use serde::Deserialize;

use crate::HubError;
use crate::transport::Transport;

/// Base of the JSON API.
pub(crate) const PYPI: &str = "https://pypi.org/pypi";

/// Index answers larger than this are refused (they are a few KiB for our packages).
const MAX_INDEX_JSON: u64 = 16 << 20;

/// A wheel as the index describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WheelFile {
    pub filename: String,
    pub url: String,
    /// Lower-case hex sha256 published by the index.
    pub sha256: String,
    /// Size in bytes published by the index, when it gives one.
    pub size: Option<u64>,
}

#[derive(Deserialize)]
struct ProjectJson {
    info: Info,
    #[serde(default)]
    urls: Vec<FileEntry>,
    #[serde(default)]
    releases: HashMap<String, Vec<FileEntry>>,
}

#[derive(Deserialize)]
struct Info {
    version: String,
}

#[derive(Deserialize)]
struct FileEntry {
    packagetype: String,
    filename: String,
    url: String,
    digests: Digests,
    size: Option<u64>,
}

#[derive(Deserialize)]
struct Digests {
    sha256: String,
}

/// Finds the wheel of `package==version`.
///
/// Asks the release endpoint `<base>/<package>/<version>/json` first, as documented; when
/// that answers 404 (some mirrors and proxies serve only the project endpoint), asks
/// `<base>/<package>/json` and takes the release from it.
pub(crate) fn locate_wheel(
    transport: &dyn Transport,
    base: &str,
    package: &str,
    version: &str,
) -> Result<WheelFile, HubError> {
    let release_url = format!("{base}/{package}/{version}/json");
    let (url, doc) = match get_json(transport, &release_url) {
        Err(HubError::HttpStatus { status: 404, .. }) => {
            let project_url = format!("{base}/{package}/json");
            let doc = get_json(transport, &project_url)?;
            (project_url, doc)
        }
        other => (release_url, other?),
    };
    let files = if doc.info.version == version {
        doc.urls
    } else {
        doc.releases
            .into_iter()
            .find(|(v, _)| v == version)
            .map(|(_, files)| files)
            .unwrap_or_default()
    };
    let mut wheels: Vec<FileEntry> = files
        .into_iter()
        .filter(|f| f.packagetype == "bdist_wheel")
        .collect();
    if wheels.is_empty() {
        return Err(HubError::NoWheel {
            package: package.to_string(),
            version: version.to_string(),
            url,
        });
    }
    // A pure-Python wheel if there is one; else whichever the index lists first.
    let pick = wheels
        .iter()
        .position(|f| f.filename.ends_with("-none-any.whl"))
        .unwrap_or(0);
    let f = wheels.swap_remove(pick);
    Ok(WheelFile {
        filename: f.filename,
        url: f.url,
        sha256: f.digests.sha256.to_ascii_lowercase(),
        size: f.size,
    })
}

fn get_json(transport: &dyn Transport, url: &str) -> Result<ProjectJson, HubError> {
    let body = transport.get(url)?;
    let mut text = Vec::new();
    body.reader
        .take(MAX_INDEX_JSON)
        .read_to_end(&mut text)
        .map_err(|e| HubError::Network {
            url: url.to_string(),
            source: Box::new(e),
        })?;
    serde_json::from_slice(&text).map_err(|source| HubError::IndexJson {
        url: url.to_string(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::FakeIndex;

    fn entry(kind: &str, name: &str, sha: &str) -> serde_json::Value {
        serde_json::json!({
            "packagetype": kind, "filename": name, "url": format!("https://files.test/{name}"),
            "digests": {"md5": "00", "sha256": sha}, "size": 123
        })
    }

    #[test]
    fn release_endpoint_wheel_is_chosen_over_sdist() -> Result<(), HubError> {
        let mut fake = FakeIndex::default();
        let doc = serde_json::json!({
            "info": {"version": "1.0"},
            "urls": [entry("sdist", "p-1.0.tar.gz", "aa"), entry("bdist_wheel", "p-1.0-py3-none-any.whl", "BB")]
        });
        fake.add("https://idx/p/1.0/json", doc.to_string().into_bytes());
        let w = locate_wheel(&fake, "https://idx", "p", "1.0")?;
        assert_eq!(w.filename, "p-1.0-py3-none-any.whl");
        assert_eq!(w.url, "https://files.test/p-1.0-py3-none-any.whl");
        assert_eq!(w.sha256, "bb", "digests are compared in lower case");
        assert_eq!(w.size, Some(123));
        Ok(())
    }

    #[test]
    fn project_endpoint_is_used_when_release_endpoint_is_missing() -> Result<(), HubError> {
        let mut fake = FakeIndex::default();
        let doc = serde_json::json!({
            "info": {"version": "2.0"},
            "urls": [entry("bdist_wheel", "p-2.0-py3-none-any.whl", "22")],
            "releases": {
                "1.0": [entry("bdist_wheel", "p-1.0-py3-none-any.whl", "11")],
                "2.0": [entry("bdist_wheel", "p-2.0-py3-none-any.whl", "22")]
            }
        });
        fake.add("https://idx/p/json", doc.to_string().into_bytes());
        assert_eq!(locate_wheel(&fake, "https://idx", "p", "1.0")?.sha256, "11");
        assert_eq!(locate_wheel(&fake, "https://idx", "p", "2.0")?.sha256, "22");
        Ok(())
    }

    #[test]
    fn release_without_wheel_is_reported_with_package_and_version() {
        let mut fake = FakeIndex::default();
        let doc = serde_json::json!({"info": {"version": "1.0"}, "urls": [entry("sdist", "p-1.0.tar.gz", "aa")]});
        fake.add("https://idx/p/1.0/json", doc.to_string().into_bytes());
        match locate_wheel(&fake, "https://idx", "p", "1.0") {
            Err(HubError::NoWheel {
                package, version, ..
            }) => assert_eq!((package.as_str(), version.as_str()), ("p", "1.0")),
            other => panic!("expected NoWheel, got {other:?}"),
        }
        match locate_wheel(&fake, "https://idx", "p", "9.9") {
            Err(HubError::HttpStatus { status: 404, url }) => assert_eq!(url, "https://idx/p/json"),
            other => panic!("expected 404 on the project endpoint, got {other:?}"),
        }
    }

    #[test]
    fn malformed_index_answer_names_the_url() {
        let mut fake = FakeIndex::default();
        fake.add("https://idx/p/1.0/json", b"<html>not json</html>".to_vec());
        match locate_wheel(&fake, "https://idx", "p", "1.0") {
            Err(HubError::IndexJson { url, .. }) => assert_eq!(url, "https://idx/p/1.0/json"),
            other => panic!("expected IndexJson, got {other:?}"),
        }
    }
}
