//! Write → parse → the same metadata and tensors.

mod common;

use common::{every_value, f32_bytes, sample_bytes, sample_writer};
use kiln_format::{FormatError, GgmlType, GgufFile, GgufWriter, Value};

/// Equality that treats floats by bit pattern (so -0.0 ≠ 0.0 and NaN == NaN).
fn same_bits(a: &Value, b: &Value) -> bool {
    format!("{a:?}") == format!("{b:?}")
}

#[test]
fn every_value_type_round_trips_including_nested_arrays() {
    for version in [2, 3] {
        let mut w = GgufWriter::new();
        w.set_version(version).unwrap();
        for (k, v) in every_value() {
            w.add_metadata(k, v).unwrap();
        }
        let file = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
        assert_eq!(file.version(), version);
        let read: Vec<_> = file.metadata().iter().collect();
        let expected = every_value();
        assert_eq!(read.len(), expected.len());
        for ((k, v), (ek, ev)) in read.iter().zip(&expected) {
            assert_eq!(k, ek, "keys keep file order");
            assert!(same_bits(v, ev), "{k}: read {v:?}, wrote {ev:?}");
        }
        assert_eq!(file.tensors().len(), 0);
    }
}

#[test]
fn tensors_round_trip_with_their_bytes_at_aligned_offsets() {
    let w = sample_writer();
    let bytes = w.to_bytes().unwrap();
    let file = GgufFile::from_bytes(bytes.clone()).unwrap();
    assert_eq!(file.alignment(), 32);
    assert_eq!(file.data_offset() % 32, 0);
    assert_eq!(file.file_size(), bytes.len() as u64);
    let names: Vec<_> = file.tensors().iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "token_embd.weight",
            "blk.0.attn_q.weight",
            "blk.0.attn_norm.weight",
            "blk.0.ffn.weight"
        ]
    );
    let embd = file.tensor("token_embd.weight").unwrap();
    assert_eq!(embd.info.dims, [4, 3]);
    assert_eq!(embd.info.ty, GgmlType::F32);
    assert_eq!(
        (
            embd.info.row_len(),
            embd.info.n_rows(),
            embd.info.n_elements()
        ),
        (4, 3, 12)
    );
    assert_eq!(embd.data, f32_bytes(&[0.5; 12]).as_slice());
    let q = file.tensor("blk.0.attn_q.weight").unwrap();
    assert_eq!(
        (q.info.ty, q.info.n_bytes, q.data),
        (GgmlType::Q8_0, 68, &[7u8; 68][..])
    );
    let ffn = file.tensor("blk.0.ffn.weight").unwrap();
    assert_eq!(
        (ffn.info.dims.as_slice(), ffn.info.n_bytes),
        (&[256, 1, 1, 2][..], 288)
    );
    for t in file.tensors() {
        assert_eq!(t.offset % 32, 0, "{}", t.name);
        assert_eq!(file.tensor_data(t).len() as u64, t.n_bytes);
        // The in-memory copy is page-aligned, so data is aligned like the file offset.
        assert_eq!(file.tensor_data(t).as_ptr() as usize % 32, 0, "{}", t.name);
    }
    assert_eq!(file.architecture().unwrap(), "llama");
    assert_eq!(file.metadata().u32("llama.block_count").unwrap(), 2);
    assert_eq!(
        file.metadata().str_array("tokenizer.ggml.tokens").unwrap(),
        ["<s>", "a", "b"]
    );
}

#[test]
fn custom_alignment_is_written_and_honoured() {
    let mut w = sample_writer();
    w.set_alignment(256).unwrap();
    let file = GgufFile::from_bytes(w.to_bytes().unwrap()).unwrap();
    assert_eq!(file.alignment(), 256);
    assert_eq!(file.data_offset() % 256, 0);
    assert!(file.tensors().iter().all(|t| t.offset % 256 == 0));
    assert_eq!(file.metadata().u32("general.alignment").unwrap(), 256);
    assert!(matches!(
        w.set_alignment(48),
        Err(FormatError::BadAlignment { alignment: 48 })
    ));
}

#[test]
fn file_written_to_disk_opens_through_mmap() {
    let dir = std::env::temp_dir().join(format!("kiln-format-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("sample.gguf");
    let n = sample_writer().write_file(&path).unwrap();
    let file = GgufFile::open(&path).unwrap();
    assert_eq!(file.file_size(), n);
    assert_eq!(file.as_bytes(), sample_bytes().as_slice());
    assert_eq!(file.tensors().len(), 4);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn missing_file_reports_the_path() {
    let err = GgufFile::open("/nonexistent/kiln/model.gguf").unwrap_err();
    assert!(matches!(err, FormatError::Io { .. }), "{err:?}");
    assert!(
        err.to_string().contains("/nonexistent/kiln/model.gguf"),
        "{err}"
    );
}

#[test]
fn missing_tensor_and_key_are_named() {
    let file = GgufFile::from_bytes(sample_bytes()).unwrap();
    let err = file.tensor("output.weight").unwrap_err();
    assert_eq!(err.to_string(), "tensor 'output.weight' is missing");
    let err = file.metadata().u32("llama.context_length").unwrap_err();
    assert_eq!(
        err.to_string(),
        "metadata key 'llama.context_length' is missing"
    );
    let err = file
        .metadata()
        .f32_array("tokenizer.ggml.tokens")
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "metadata key 'tokenizer.ggml.tokens' has type array[string], expected array[f32]"
    );
}

#[test]
fn writer_refuses_inconsistent_tensors() {
    let mut w = GgufWriter::new();
    let err = w
        .add_tensor("a", GgmlType::F32, &[4], vec![0; 15])
        .unwrap_err();
    assert!(
        matches!(
            err,
            FormatError::TensorSizeMismatch {
                expected: 16,
                actual: 15,
                ..
            }
        ),
        "{err}"
    );
    let err = w
        .add_tensor("b", GgmlType::Q4_0, &[33], vec![])
        .unwrap_err();
    assert!(
        matches!(
            err,
            FormatError::PartialBlock {
                row_len: 33,
                block_elems: 32,
                ..
            }
        ),
        "{err}"
    );
    w.add_tensor("c", GgmlType::I8, &[1], vec![0]).unwrap();
    let err = w.add_tensor("c", GgmlType::I8, &[1], vec![0]).unwrap_err();
    assert!(matches!(err, FormatError::DuplicateTensor { .. }), "{err}");
    assert!(matches!(
        w.add_metadata("k", 1u8).and(w.add_metadata("k", 2u8)),
        Err(FormatError::DuplicateKey { .. })
    ));
    assert!(matches!(
        w.set_version(1),
        Err(FormatError::UnsupportedVersion { version: 1 })
    ));
}

#[test]
fn streamed_tensors_write_the_same_file_as_tensors_held_in_memory() {
    let a: Vec<u8> = f32_bytes(&[1.0, 2.0, 3.0]);
    let b: Vec<u8> = (0..34u8).collect();
    let mut held = GgufWriter::new();
    held.add_metadata("general.architecture", "llama").unwrap();
    held.add_tensor("a", GgmlType::F32, &[3], a.clone())
        .unwrap();
    held.add_tensor("b", GgmlType::Q8_0, &[32], b.clone())
        .unwrap();

    let mut streamed = GgufWriter::new();
    streamed
        .add_metadata("general.architecture", "llama")
        .unwrap();
    assert_eq!(
        streamed
            .add_tensor_streamed("a", GgmlType::F32, &[3])
            .unwrap(),
        12
    );
    streamed.add_tensor("b", GgmlType::Q8_0, &[32], b).unwrap();
    let mut asked = Vec::new();
    let mut bytes = Vec::new();
    streamed
        .write_streaming(&mut bytes, &mut |name, out| {
            asked.push(name.to_string());
            out.write_all(&a[..5])?;
            out.write_all(&a[5..])
        })
        .unwrap();
    assert_eq!(asked, ["a"], "only the streamed tensor is asked for");
    assert_eq!(bytes, held.to_bytes().unwrap());
}

#[test]
fn a_streamed_tensor_of_the_wrong_size_is_refused_with_its_name() {
    let mut w = GgufWriter::new();
    w.add_tensor_streamed("short", GgmlType::F32, &[4]).unwrap();
    let err = w
        .write_streaming(&mut Vec::new(), &mut |_, out| out.write_all(&[0; 12]))
        .unwrap_err();
    assert!(
        matches!(&err, FormatError::TensorSizeMismatch { tensor, expected: 16, actual: 12 } if tensor == "short"),
        "{err:?}"
    );
    // Without a fill (write_to / to_bytes) it has no bytes at all.
    let err = w.to_bytes().unwrap_err();
    assert!(
        matches!(&err, FormatError::TensorSizeMismatch { actual: 0, .. }),
        "{err:?}"
    );
}
