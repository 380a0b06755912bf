//! Random damage to a valid file never panics the parser; whatever parses is consistent.

mod common;

use common::sample_bytes;
use kiln_format::{GgufFile, Limits};
use proptest::prelude::*;

fn check(bytes: Vec<u8>, limits: &Limits) {
    if let Ok(file) = GgufFile::from_bytes_with_limits(bytes, limits) {
        for t in file.tensors() {
            assert_eq!(file.tensor_data(t).len() as u64, t.n_bytes, "{}", t.name);
            assert_eq!(t.offset % file.alignment(), 0);
            assert!(file.data_offset() + t.offset + t.n_bytes <= file.file_size());
            assert!(file.tensor(&t.name).is_ok());
        }
        for (key, _) in file.metadata().iter() {
            assert!(file.metadata().get(key).is_some());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_byte_mutations_never_panic(
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
    ) {
        let mut bytes = sample_bytes();
        for (at, byte) in edits {
            let i = at.index(bytes.len());
            bytes[i] = byte;
        }
        if truncate {
            bytes.truncate(cut.index(bytes.len()));
        }
        check(bytes.clone(), &Limits::default());
        let tight = Limits { max_tensors: 3, max_metadata_entries: 4, max_string_len: 16, max_array_len: 4, max_array_depth: 1 };
        check(bytes, &tight);
    }

    #[test]
    fn mutated_length_fields_never_panic(
        at in any::<prop::sample::Index>(),
        value in prop_oneof![Just(u64::MAX), Just(u64::MAX / 2), Just(1u64 << 32), 0u64..4096],
    ) {
        // Overwrite an 8-byte window at a random 4-byte-aligned position with a length-like
        // value: hits counts, string lengths, array lengths, dims and offsets.
        let mut bytes = sample_bytes();
        let at = at.index(bytes.len() - 8) / 4 * 4;
        bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
        check(bytes, &Limits::default());
    }
}
