//! Replays every committed fuzz corpus file and every crash regression
//! (`fuzz/corpus/<target>/*`, `fuzz/regressions/<target>/*`) through the same bodies the
//! libFuzzer targets run, on stable Rust: a regression that comes back fails here, in
//! `cargo test`, without cargo-fuzz or nightly.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = entries
        .map(|e| e.expect("a readable directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    v.sort();
    v
}

/// Runs `body` on every file; returns the files that panicked with their messages.
fn replay(body: fn(&[u8]), files: &[PathBuf]) -> Vec<String> {
    let mut failures = Vec::new();
    for path in files {
        let data = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        if let Err(p) = catch_unwind(AssertUnwindSafe(|| body(&data))) {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            failures.push(format!("{}: {msg}", path.display()));
        }
    }
    failures
}

#[test]
fn every_target_has_a_seed_corpus_that_replays_without_a_panic() {
    let mut failures = Vec::new();
    for (name, body) in kiln_fuzz::TARGETS {
        let corpus = files(&fuzz_dir().join("corpus").join(name));
        assert!(
            !corpus.is_empty(),
            "fuzz/corpus/{name}/ is missing or empty: every target needs its seeds"
        );
        failures.extend(replay(*body, &corpus));
    }
    assert!(
        failures.is_empty(),
        "corpus inputs panicked:\n{}",
        failures.join("\n")
    );
}

#[test]
fn every_kept_crash_input_now_gets_an_error_instead_of_a_panic() {
    let mut failures = Vec::new();
    let mut seen = 0;
    for (name, body) in kiln_fuzz::TARGETS {
        let kept = files(&fuzz_dir().join("regressions").join(name));
        seen += kept.len();
        failures.extend(replay(*body, &kept));
    }
    assert!(
        failures.is_empty(),
        "crash regressions panic again:\n{}",
        failures.join("\n")
    );
    eprintln!("{seen} crash regressions replayed");
}

#[test]
fn regression_and_corpus_directories_name_only_known_targets() {
    for kind in ["corpus", "regressions"] {
        let Ok(entries) = std::fs::read_dir(fuzz_dir().join(kind)) else {
            continue;
        };
        for e in entries {
            let e = e.expect("a readable directory entry");
            if !e.path().is_dir() {
                continue;
            }
            let name = e.file_name();
            let name = name.to_string_lossy();
            assert!(
                kiln_fuzz::target(&name).is_some(),
                "fuzz/{kind}/{name} names no target of kiln_fuzz::TARGETS"
            );
        }
    }
}
