//! Truncated and hostile files: each gets its named error, never a panic, and never an
//! allocation sized by a count the file made up.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use common::{Raw, sample_bytes};
use kiln_format::{FormatError, GgufFile, Limits};

/// Records the largest single allocation made by the current thread, so a test can show
/// that a hostile count never turned into a huge allocation.
struct PeakAlloc;

thread_local! {
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: every call is forwarded unchanged to the system allocator; the bookkeeping only
// touches a const-initialised thread-local `Cell` (no allocation, no re-entrancy).
unsafe impl GlobalAlloc for PeakAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = LARGEST.try_with(|m| m.set(m.get().max(layout.size())));
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = LARGEST.try_with(|m| m.set(m.get().max(new_size)));
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: PeakAlloc = PeakAlloc;

/// Parses `bytes` and returns the error, asserting that no single allocation during the
/// parse exceeded 64 KiB.
fn parse_err(bytes: Vec<u8>) -> FormatError {
    parse_err_with(bytes, &Limits::default())
}

fn parse_err_with(bytes: Vec<u8>, limits: &Limits) -> FormatError {
    let len = bytes.len();
    LARGEST.with(|m| m.set(0));
    let result = GgufFile::from_bytes_with_limits(bytes, limits);
    let largest = LARGEST.with(Cell::get);
    assert!(
        largest <= len.max(64 << 10),
        "parse allocated {largest} bytes at once for a {len}-byte file"
    );
    match result {
        Ok(f) => panic!("hostile file parsed: {f:?}"),
        Err(e) => e,
    }
}

#[test]
fn every_truncation_of_a_valid_file_is_an_error() {
    let full = sample_bytes();
    assert!(GgufFile::from_bytes(full.clone()).is_ok());
    for n in 0..full.len() {
        let err = parse_err(full[..n].to_vec());
        assert!(
            matches!(
                err,
                FormatError::Truncated { .. } | FormatError::TensorOutOfBounds { .. }
            ),
            "prefix {n}: {err:?}"
        );
    }
}

#[test]
fn truncated_tensor_info_reports_the_field() {
    let bytes = Raw::header(3, 2, 0)
        .tensor("a", &[4], 0, 0)
        .str("b")
        .u32(1)
        .bytes(&[0; 3])
        .0;
    let err = parse_err(bytes);
    match &err {
        FormatError::Truncated {
            field,
            needed,
            available,
            ..
        } => {
            assert_eq!(field, "tensor_info[1].dims[0] ('b')");
            assert_eq!((*needed, *available), (8, 3));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        err.to_string(),
        "file truncated at tensor_info[1].dims[0] ('b'): needs 8 bytes at offset 70, but only 3 remain"
    );
}

#[test]
fn huge_tensor_count_is_refused_without_allocating() {
    let err = parse_err(Raw::header(3, u64::MAX, 0).0);
    assert!(
        matches!(
            err,
            FormatError::LimitExceeded {
                what: "tensor count",
                value: u64::MAX,
                ..
            }
        ),
        "{err}"
    );
    // Under the limit but far more than the file can hold.
    let limits = Limits {
        max_tensors: u64::MAX,
        ..Limits::default()
    };
    let err = parse_err_with(Raw::header(3, u64::MAX / 2, 0).0, &limits);
    assert!(matches!(err, FormatError::Truncated { .. }), "{err}");
    let err = parse_err(Raw::header(3, 1000, 0).zeros(100).0);
    assert!(
        matches!(
            err,
            FormatError::Truncated {
                needed: 24000,
                available: 100,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn huge_metadata_count_is_refused_without_allocating() {
    let err = parse_err(Raw::header(3, 0, u64::MAX).0);
    assert!(
        matches!(
            err,
            FormatError::LimitExceeded {
                what: "metadata entry count",
                ..
            }
        ),
        "{err}"
    );
    let err = parse_err(Raw::header(3, 0, 60_000).zeros(64).0);
    assert!(matches!(err, FormatError::Truncated { .. }), "{err}");
}

#[test]
fn huge_string_length_is_refused_without_allocating() {
    let err = parse_err(Raw::header(3, 0, 1).u64(u64::MAX).bytes(b"key").zeros(13).0);
    match err {
        FormatError::LimitExceeded {
            what: "string length",
            key,
            value: u64::MAX,
            ..
        } => {
            assert_eq!(key, "metadata[0].key")
        }
        other => panic!("{other:?}"),
    }
    let limits = Limits {
        max_string_len: u64::MAX,
        ..Limits::default()
    };
    let err = parse_err_with(
        Raw::header(3, 0, 1).u64(u64::MAX).bytes(b"key").zeros(13).0,
        &limits,
    );
    assert!(
        matches!(
            err,
            FormatError::Truncated {
                needed: u64::MAX,
                available: 16,
                ..
            }
        ),
        "{err}"
    );
    // A string value whose length runs past the end.
    let err = parse_err(
        Raw::header(3, 0, 1)
            .str("k")
            .u32(8)
            .u64(1 << 20)
            .bytes(b"abc")
            .0,
    );
    match err {
        FormatError::Truncated { field, needed, .. } => {
            assert_eq!((field.as_str(), needed), ("metadata 'k' value", 1 << 20))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn huge_array_length_is_refused_without_allocating() {
    // An array of u64 claiming 2^60 elements.
    let bytes = Raw::header(3, 0, 1)
        .str("k")
        .u32(9)
        .u32(10)
        .u64(1 << 60)
        .zeros(64)
        .0;
    let err = parse_err(bytes.clone());
    assert!(
        matches!(&err, FormatError::LimitExceeded { what: "metadata array length", key, .. } if key == "metadata 'k' value"),
        "{err}"
    );
    let limits = Limits {
        max_array_len: u64::MAX,
        ..Limits::default()
    };
    let err = parse_err_with(bytes, &limits);
    assert!(matches!(err, FormatError::Truncated { .. }), "{err}");
    // Strings: 10 million claimed, each needs at least 8 bytes.
    let err = parse_err(
        Raw::header(3, 0, 1)
            .str("k")
            .u32(9)
            .u32(8)
            .u64(10_000_000)
            .zeros(64)
            .0,
    );
    assert!(
        matches!(
            err,
            FormatError::Truncated {
                needed: 80_000_000,
                available: 64,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn nested_arrays_count_toward_the_array_limit() {
    // Outer array of 3 arrays of 3 u8: 3 + 9 = 12 elements.
    let mut raw = Raw::header(3, 0, 1).str("k").u32(9).u32(9).u64(3);
    for _ in 0..3 {
        raw = raw.u32(0).u64(3).bytes(&[1, 2, 3]);
    }
    let bytes = raw.0;
    let ok = GgufFile::from_bytes_with_limits(
        bytes.clone(),
        &Limits {
            max_array_len: 12,
            ..Limits::default()
        },
    );
    assert!(ok.is_ok(), "{ok:?}");
    let err = parse_err_with(
        bytes,
        &Limits {
            max_array_len: 11,
            ..Limits::default()
        },
    );
    match err {
        FormatError::LimitExceeded {
            what: "metadata array length",
            key,
            value: 12,
            limit: 11,
        } => {
            assert_eq!(key, "metadata 'k' value[2]")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn deep_array_nesting_is_refused() {
    let depth = 10_000;
    let mut raw = Raw::header(3, 0, 1).str("k").u32(9);
    for _ in 0..depth {
        raw = raw.u32(9).u64(1);
    }
    let err = parse_err(raw.u32(0).u64(0).0);
    assert!(
        matches!(
            err,
            FormatError::LimitExceeded {
                what: "metadata array nesting depth",
                value: 9,
                limit: 8,
                ..
            }
        ),
        "{err}"
    );
    // Even a limit above the hard cap does not let the parser recurse without bound.
    let limits = Limits {
        max_array_depth: u32::MAX,
        ..Limits::default()
    };
    let mut raw = Raw::header(3, 0, 1).str("k").u32(9);
    for _ in 0..depth {
        raw = raw.u32(9).u64(1);
    }
    let err = parse_err_with(raw.u32(0).u64(0).0, &limits);
    assert!(
        matches!(err, FormatError::LimitExceeded { limit: 64, .. }),
        "{err}"
    );
}

#[test]
fn too_many_dims_is_refused_before_reading_them() {
    let err = parse_err(Raw::header(3, 1, 0).str("t").u32(100).zeros(32).0);
    assert!(
        matches!(&err, FormatError::TooManyDims { tensor, n_dims: 100, max: 4 } if tensor == "t"),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "tensor 't' has 100 dimensions; at most 4 are allowed"
    );
}

#[test]
fn overflowing_dims_are_refused() {
    let err = parse_err(
        Raw::header(3, 1, 0)
            .tensor("t", &[1 << 40, 1 << 40], 0, 0)
            .pad_to(32)
            .0,
    );
    assert!(
        matches!(
            err,
            FormatError::BadShape {
                reason: "the element count overflows a 64-bit signed integer",
                ..
            }
        ),
        "{err}"
    );
    let err = parse_err(
        Raw::header(3, 1, 0)
            .tensor("t", &[u64::MAX], 0, 0)
            .pad_to(32)
            .0,
    );
    assert!(matches!(err, FormatError::BadShape { .. }), "{err}");
    let err = parse_err(Raw::header(3, 1, 0).tensor("t", &[4, 0], 0, 0).pad_to(32).0);
    assert!(
        matches!(
            err,
            FormatError::BadShape {
                reason: "a dimension is zero",
                ..
            }
        ),
        "{err}"
    );
    let err = parse_err(Raw::header(3, 1, 0).tensor("t", &[], 0, 0).pad_to(32).0);
    assert!(matches!(err, FormatError::BadShape { .. }), "{err}");
}

#[test]
fn partial_block_rows_are_refused() {
    // Q4_K (id 12) rows must be a multiple of 256.
    let err = parse_err(
        Raw::header(3, 1, 0)
            .tensor("w", &[100, 2], 12, 0)
            .pad_to(32)
            .zeros(4096)
            .0,
    );
    assert!(
        matches!(
            err,
            FormatError::PartialBlock {
                row_len: 100,
                block_elems: 256,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn tensor_offset_past_eof_is_refused() {
    let err = parse_err(
        Raw::header(3, 1, 0)
            .tensor("t", &[4], 0, 1 << 40)
            .pad_to(32)
            .zeros(16)
            .0,
    );
    match err {
        FormatError::TensorOutOfBounds {
            tensor,
            offset,
            size,
            data_len,
        } => {
            assert_eq!(
                (tensor.as_str(), offset, size, data_len),
                ("t", 1 << 40, 16, 16)
            )
        }
        other => panic!("{other:?}"),
    }
    // Offset + size overflows u64.
    let err = parse_err(
        Raw::header(3, 1, 0)
            .tensor("t", &[4], 0, u64::MAX - 31)
            .pad_to(32)
            .0,
    );
    assert!(
        matches!(err, FormatError::TensorOutOfBounds { .. }),
        "{err}"
    );
    // Data one byte short.
    let err = parse_err(
        Raw::header(3, 1, 0)
            .tensor("t", &[4], 0, 0)
            .pad_to(32)
            .zeros(15)
            .0,
    );
    assert!(
        matches!(
            err,
            FormatError::TensorOutOfBounds {
                size: 16,
                data_len: 15,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn misaligned_tensor_offset_is_refused() {
    let err = parse_err(
        Raw::header(3, 1, 0)
            .tensor("t", &[4], 0, 4)
            .pad_to(32)
            .zeros(64)
            .0,
    );
    assert!(
        matches!(
            err,
            FormatError::MisalignedTensor {
                offset: 4,
                alignment: 32,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn bad_alignment_values_are_refused() {
    for a in [0u32, 3, 48] {
        let err = parse_err(Raw::header(3, 0, 1).kv_u32("general.alignment", a).0);
        assert!(
            matches!(err, FormatError::BadAlignment { alignment } if alignment == u64::from(a)),
            "{err}"
        );
    }
    let err = parse_err(
        Raw::header(3, 0, 1)
            .str("general.alignment")
            .u32(8)
            .str("32")
            .0,
    );
    assert!(
        matches!(
            err,
            FormatError::WrongType {
                expected: "u64",
                found: "string",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn big_endian_and_old_versions_are_refused() {
    let big = Raw::default().bytes(b"GGUF").bytes(&3u32.to_be_bytes()).0;
    assert!(matches!(parse_err(big), FormatError::BigEndian));
    for version in [0, 1, 4, 77] {
        let err = parse_err(Raw::header(version, 0, 0).0);
        assert!(
            matches!(err, FormatError::UnsupportedVersion { version: v } if v == version),
            "{err}"
        );
    }
    let err = parse_err(b"GGML\x03\0\0\0".to_vec());
    assert_eq!(
        err.to_string(),
        "not a GGUF file: it starts with \"GGML\" instead of \"GGUF\""
    );
}

#[test]
fn unknown_type_ids_are_named() {
    let err = parse_err(Raw::header(3, 0, 1).str("k").u32(13).u32(0).0);
    assert!(
        matches!(&err, FormatError::UnknownValueType { key, type_id: 13 } if key == "k"),
        "{err}"
    );
    let err = parse_err(Raw::header(3, 0, 1).str("k").u32(9).u32(99).u64(0).0);
    assert!(
        matches!(err, FormatError::UnknownValueType { type_id: 99, .. }),
        "{err}"
    );
    let err = parse_err(
        Raw::header(3, 1, 0)
            .tensor("blk.0.attn_q.weight", &[32], 42, 0)
            .pad_to(32)
            .zeros(256)
            .0,
    );
    assert_eq!(
        err.to_string(),
        "tensor 'blk.0.attn_q.weight' has unknown ggml type id 42"
    );
}

#[test]
fn duplicate_keys_and_tensor_names_are_refused() {
    let err = parse_err(Raw::header(3, 0, 2).kv_u32("k", 1).kv_u32("k", 2).0);
    assert!(
        matches!(&err, FormatError::DuplicateKey { key } if key == "k"),
        "{err}"
    );
    let err = parse_err(
        Raw::header(3, 2, 0)
            .tensor("t", &[4], 0, 0)
            .tensor("t", &[4], 0, 32)
            .pad_to(32)
            .zeros(64)
            .0,
    );
    assert!(
        matches!(&err, FormatError::DuplicateTensor { name } if name == "t"),
        "{err}"
    );
}

#[test]
fn invalid_utf8_names_its_field() {
    let err = parse_err(
        Raw::header(3, 0, 1)
            .u64(2)
            .bytes(&[0xff, 0xfe])
            .u32(0)
            .bytes(&[0])
            .0,
    );
    assert!(
        matches!(&err, FormatError::InvalidUtf8 { field } if field == "metadata[0].key"),
        "{err}"
    );
    let err = parse_err(
        Raw::header(3, 0, 1)
            .str("tok")
            .u32(9)
            .u32(8)
            .u64(2)
            .str("ok")
            .u64(1)
            .bytes(&[0xc0])
            .0,
    );
    assert!(
        matches!(&err, FormatError::InvalidUtf8 { field } if field == "metadata 'tok' value[1]"),
        "{err}"
    );
    let err = parse_err(
        Raw::header(3, 1, 0)
            .u64(1)
            .bytes(&[0x80])
            .u32(1)
            .u64(4)
            .u32(0)
            .u64(0)
            .0,
    );
    assert!(
        matches!(&err, FormatError::InvalidUtf8 { field } if field == "tensor_info[0].name"),
        "{err}"
    );
}

#[test]
fn bool_bytes_other_than_zero_or_one_are_refused() {
    let err = parse_err(Raw::header(3, 0, 1).str("b").u32(7).bytes(&[2]).0);
    assert!(
        matches!(err, FormatError::InvalidBool { byte: 2, .. }),
        "{err}"
    );
}

#[test]
fn file_without_tensors_may_end_before_the_padding() {
    let f = GgufFile::from_bytes(Raw::header(3, 0, 1).kv_u32("a", 1).0).unwrap();
    assert_eq!(f.data_offset(), 64);
    assert!(f.file_size() < 64);
    // …but with tensors the padding must be there.
    let err = parse_err(Raw::header(3, 1, 0).tensor("t", &[1], 24, 0).0);
    assert!(
        matches!(&err, FormatError::Truncated { field, .. } if field == "padding before the data section"),
        "{err}"
    );
}
