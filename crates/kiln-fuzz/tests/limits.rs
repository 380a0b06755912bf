//! The input limits that had no test of their own in their crate (docs/fuzzing.md lists
//! every limit with the test that covers it). Oversized files are sparse, so nothing here
//! allocates or writes what it tests to be refused.

use kiln_format::{FormatError, SafetensorsSet};
use kiln_sample::{CompileLimits, Grammar, GrammarError};
use kiln_tokenizer::Tokenizer;

fn sparse_file(dir: &tempfile::TempDir, name: &str, len: u64) -> std::path::PathBuf {
    let path = dir.path().join(name);
    let f = std::fs::File::create(&path).expect("create");
    f.set_len(len).expect("set_len");
    path
}

#[test]
fn a_shard_index_over_64_mib_is_refused_by_its_size_before_it_is_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = sparse_file(&dir, "model.safetensors.index.json", (64 << 20) + 1);
    match SafetensorsSet::open_index(&path) {
        Err(FormatError::LimitExceeded {
            what: "file size",
            value,
            limit,
            ..
        }) => {
            assert_eq!((value, limit), ((64 << 20) + 1, 64 << 20));
        }
        other => panic!("expected the file-size limit, got {:?}", other.err()),
    }
}

#[test]
fn a_tokenizer_json_over_512_mib_is_refused_by_its_size_before_it_is_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = sparse_file(&dir, "tokenizer.json", (512 << 20) + 1);
    let Err(err) = Tokenizer::from_tokenizer_json_file(&path) else {
        panic!("a 512 MiB + 1 tokenizer.json loaded");
    };
    let msg = err.to_string();
    assert!(
        msg.contains(&((512u64 << 20) + 1).to_string())
            && msg.contains(&(512u64 << 20).to_string()),
        "{msg}"
    );
}

#[test]
fn a_json_schema_nested_past_the_depth_limit_is_refused_with_the_limit() {
    let nest = |n: usize| {
        let mut s = r#"{"type":"integer"}"#.to_string();
        for _ in 0..n {
            s = format!(r#"{{"type":"array","items":{s}}}"#);
        }
        s
    };
    let limits = CompileLimits::default();
    let deep = nest(limits.max_schema_depth + 1);
    assert_eq!(
        Grammar::from_json_schema(&deep).err(),
        Some(GrammarError::TooLarge {
            what: "schema nesting levels",
            limit: limits.max_schema_depth,
        })
    );
    let tight = CompileLimits {
        max_schema_depth: 3,
        ..CompileLimits::default()
    };
    assert!(Grammar::from_json_schema_with(&nest(3), &tight).is_ok());
    assert!(Grammar::from_json_schema_with(&nest(4), &tight).is_err());
}
