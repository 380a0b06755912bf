use super::*;

fn f32_bytes(xs: &[f32]) -> Vec<u8> {
    xs.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A file from a raw header and a data section.
fn raw(header: &str, data: &[u8]) -> Vec<u8> {
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

fn sample() -> Vec<u8> {
    let mut w = SafetensorsWriter::new();
    w.set_metadata("format", "pt");
    w.add_f32("a.weight", &[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
        .unwrap();
    w.add_tensor("b", Dtype::BF16, &[2], vec![0x80, 0x3f, 0x00, 0x40])
        .unwrap();
    w.add_tensor("c", Dtype::F16, &[], vec![0x00, 0x3c])
        .unwrap();
    w.to_bytes().unwrap()
}

#[test]
fn writer_output_reads_back_with_shapes_dtypes_and_metadata() {
    let f = SafetensorsFile::from_bytes(sample()).unwrap();
    assert_eq!(f.tensors().len(), 3);
    assert_eq!(f.metadata(), [("format".to_string(), "pt".to_string())]);
    let a = f.tensor("a.weight").unwrap();
    assert_eq!(a.info.dtype, Dtype::F32);
    assert_eq!(a.info.shape, [2, 3]);
    assert_eq!(a.info.ggml_dims(), [3, 2]);
    assert_eq!(a.data, f32_bytes(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]));
    let b = f.tensor("b").unwrap();
    assert_eq!((b.info.dtype, b.data.len()), (Dtype::BF16, 4));
    let c = f.tensor("c").unwrap();
    assert_eq!((c.info.n_elements(), c.data), (1, &[0x00, 0x3c][..]));
    assert!(f.data_offset().is_multiple_of(8));
    assert!(matches!(
        f.tensor("nope"),
        Err(FormatError::MissingTensor { .. })
    ));
}

#[test]
fn truncated_length_prefix_reports_the_field() {
    let err = SafetensorsFile::from_bytes(vec![1, 2, 3]).unwrap_err();
    assert!(
        matches!(&err, FormatError::Truncated { field, needed: 8, available: 3, .. } if field == "header length"),
        "{err}"
    );
    assert!(SafetensorsFile::from_bytes(Vec::new()).is_err());
}

#[test]
fn header_length_past_the_end_or_over_the_limit_is_refused_before_reading() {
    let mut bytes = 1000u64.to_le_bytes().to_vec();
    bytes.extend_from_slice(b"{}");
    let err = SafetensorsFile::from_bytes(bytes).unwrap_err();
    assert!(
        matches!(
            err,
            FormatError::Truncated {
                needed: 1000,
                available: 2,
                ..
            }
        ),
        "{err}"
    );
    let bytes = u64::MAX.to_le_bytes().to_vec();
    let err = SafetensorsFile::from_bytes(bytes).unwrap_err();
    assert!(
        matches!(
            err,
            FormatError::LimitExceeded {
                value: u64::MAX,
                limit: MAX_HEADER_LEN,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn malformed_headers_name_the_tensor_and_field() {
    let cases: &[(&str, &str)] = &[
        ("not json", "header"),
        ("[1, 2]", "header"),
        (r#"{"t": 5}"#, "tensor 't' entry"),
        (
            r#"{"t": {"dtype": 5, "shape": [], "data_offsets": [0, 4]}}"#,
            "tensor 't' dtype",
        ),
        (
            r#"{"t": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}"#,
            "tensor 't' shape",
        ),
        (
            r#"{"t": {"dtype": "F32", "data_offsets": [0, 4]}}"#,
            "tensor 't' shape",
        ),
        (
            r#"{"t": {"dtype": "F32", "shape": [1], "data_offsets": [0]}}"#,
            "tensor 't' data_offsets",
        ),
        (
            r#"{"t": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4], "x": 1}}"#,
            "tensor 't' x",
        ),
        (r#"{"__metadata__": {"k": 1}}"#, "__metadata__.k"),
    ];
    for (header, want) in cases {
        let err = SafetensorsFile::from_bytes(raw(header, &[0; 4])).unwrap_err();
        match &err {
            FormatError::SafetensorsHeader { field, .. } => assert_eq!(field, want, "{header}"),
            other => panic!("{header}: unexpected {other}"),
        }
    }
}

#[test]
fn unknown_dtype_is_named() {
    let err = SafetensorsFile::from_bytes(raw(
        r#"{"w": {"dtype": "Q4_0", "shape": [1], "data_offsets": [0, 4]}}"#,
        &[0; 4],
    ))
    .unwrap_err();
    assert!(
        matches!(&err, FormatError::UnknownDtype { tensor, dtype } if tensor == "w" && dtype == "Q4_0"),
        "{err}"
    );
}

#[test]
fn offsets_that_disagree_with_the_shape_report_both() {
    let err = SafetensorsFile::from_bytes(raw(
        r#"{"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 12]}}"#,
        &[0; 12],
    ))
    .unwrap_err();
    assert!(
        matches!(
            err,
            FormatError::DataOffsetsMismatch {
                expected: 16,
                begin: 0,
                end: 12,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("[2, 2]"), "{err}");
}

#[test]
fn tensors_past_the_data_or_overlapping_or_leaving_holes_are_refused() {
    let past = raw(
        r#"{"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}"#,
        &[0; 4],
    );
    assert!(matches!(
        SafetensorsFile::from_bytes(past),
        Err(FormatError::TensorOutOfBounds { .. })
    ));
    let reversed = raw(
        r#"{"w": {"dtype": "F32", "shape": [0], "data_offsets": [4, 0]}}"#,
        &[0; 4],
    );
    assert!(matches!(
        SafetensorsFile::from_bytes(reversed),
        Err(FormatError::TensorOutOfBounds { .. })
    ));
    let overlap = raw(
        r#"{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
            "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}"#,
        &[0; 8],
    );
    let err = SafetensorsFile::from_bytes(overlap).unwrap_err();
    assert!(
        matches!(&err, FormatError::DataLayout { tensor, reason, .. } if tensor == "b" && reason.contains("overlap")),
        "{err}"
    );
    let hole = raw(
        r#"{"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}"#,
        &[0; 8],
    );
    assert!(matches!(
        SafetensorsFile::from_bytes(hole),
        Err(FormatError::DataLayout { .. })
    ));
    let trailing = raw(
        r#"{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}"#,
        &[0; 8],
    );
    assert!(matches!(
        SafetensorsFile::from_bytes(trailing),
        Err(FormatError::DataLayout { .. })
    ));
}

#[test]
fn overflowing_shapes_are_bad_shapes_not_panics() {
    let h = format!(
        r#"{{"w": {{"dtype": "F64", "shape": [{}, {}], "data_offsets": [0, 8]}}}}"#,
        u64::MAX / 2,
        4
    );
    assert!(matches!(
        SafetensorsFile::from_bytes(raw(&h, &[0; 8])),
        Err(FormatError::BadShape { .. })
    ));
}

#[test]
fn too_many_tensors_for_the_limits_is_refused() {
    let limits = Limits {
        max_tensors: 2,
        ..Limits::default()
    };
    let err = SafetensorsFile::from_bytes_with_limits(sample(), &limits).unwrap_err();
    assert!(
        matches!(
            err,
            FormatError::LimitExceeded {
                value: 3,
                limit: 2,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn writer_refuses_wrong_sizes_and_duplicates() {
    let mut w = SafetensorsWriter::new();
    assert!(matches!(
        w.add_tensor("x", Dtype::F32, &[3], vec![0; 8]),
        Err(FormatError::TensorSizeMismatch {
            expected: 12,
            actual: 8,
            ..
        })
    ));
    w.add_f32("x", &[1], &[1.0]).unwrap();
    assert!(matches!(
        w.add_f32("x", &[1], &[1.0]),
        Err(FormatError::DuplicateTensor { .. })
    ));
}

#[test]
fn every_truncation_and_byte_flip_of_a_valid_file_is_an_error_or_a_valid_file() {
    let good = sample();
    for len in 0..good.len() {
        assert!(SafetensorsFile::from_bytes(good[..len].to_vec()).is_err());
    }
    for i in 0..good.len() {
        for flip in [0x01u8, 0x20, 0x80, 0xff] {
            let mut b = good.clone();
            b[i] ^= flip;
            if let Ok(f) = SafetensorsFile::from_bytes(b) {
                for t in f.tensors() {
                    assert_eq!(f.tensor_data(t).len() as u64, t.n_bytes);
                }
            }
        }
    }
}

fn write_shard(dir: &Path, file: &str, tensors: &[(&str, f32)]) {
    let mut w = SafetensorsWriter::new();
    for (name, v) in tensors {
        w.add_f32(*name, &[1], &[*v]).unwrap();
    }
    w.write(dir.join(file)).unwrap();
}

fn write_index(dir: &Path, map: &[(&str, &str)]) {
    let m: serde_json::Map<String, serde_json::Value> = map
        .iter()
        .map(|(t, f)| (t.to_string(), serde_json::Value::String(f.to_string())))
        .collect();
    let j = serde_json::json!({"metadata": {"total_size": 8}, "weight_map": m});
    std::fs::write(dir.join(INDEX_FILE), j.to_string()).unwrap();
}

#[test]
fn sharded_directory_finds_each_tensor_in_its_shard() {
    let dir = tempfile::tempdir().unwrap();
    write_shard(dir.path(), "s-1.safetensors", &[("a", 1.0), ("b", 2.0)]);
    write_shard(dir.path(), "s-2.safetensors", &[("c", 3.0)]);
    write_index(
        dir.path(),
        &[
            ("a", "s-1.safetensors"),
            ("b", "s-1.safetensors"),
            ("c", "s-2.safetensors"),
        ],
    );
    let set = SafetensorsSet::open_dir(dir.path()).unwrap();
    assert_eq!((set.len(), set.shards().len()), (3, 2));
    assert_eq!(set.tensor("c").unwrap().data, f32_bytes(&[3.0]));
    assert_eq!(set.locate("b").unwrap().0, 0);
    assert_eq!(set.data_bytes(), 12);
}

#[test]
fn index_that_disagrees_with_its_shards_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    write_shard(dir.path(), "s-1.safetensors", &[("a", 1.0)]);
    write_shard(dir.path(), "s-2.safetensors", &[("b", 2.0)]);
    // Listed in the wrong shard.
    write_index(
        dir.path(),
        &[("a", "s-2.safetensors"), ("b", "s-2.safetensors")],
    );
    let err = SafetensorsSet::open_dir(dir.path()).unwrap_err();
    assert!(matches!(err, FormatError::BadShardIndex { .. }), "{err}");
    // A shard holds a tensor the index does not list.
    write_shard(dir.path(), "s-1.safetensors", &[("a", 1.0), ("z", 0.0)]);
    write_index(dir.path(), &[("a", "s-1.safetensors")]);
    let err = SafetensorsSet::open_dir(dir.path()).unwrap_err();
    assert!(err.to_string().contains("does not list"), "{err}");
    // The same tensor in two shards.
    write_shard(dir.path(), "s-2.safetensors", &[("a", 2.0)]);
    write_index(
        dir.path(),
        &[("a", "s-1.safetensors"), ("x", "s-2.safetensors")],
    );
    let err = SafetensorsSet::open_dir(dir.path()).unwrap_err();
    assert!(matches!(err, FormatError::DuplicateTensor { .. }), "{err}");
}

#[test]
fn index_naming_files_outside_its_directory_is_refused() {
    for bad in [
        "../x.safetensors",
        "/etc/passwd",
        "a/b.safetensors",
        "..",
        "",
    ] {
        let text = serde_json::json!({"weight_map": {"t": bad}}).to_string();
        let err = ShardIndex::parse(&text, Path::new("idx.json")).unwrap_err();
        assert!(
            matches!(err, FormatError::BadShardIndex { .. }),
            "{bad}: {err}"
        );
    }
    let err = ShardIndex::parse(r#"{"weight_map": {"t": 3}}"#, Path::new("i")).unwrap_err();
    assert!(err.to_string().contains("not a string"), "{err}");
}

#[test]
fn directory_without_safetensors_says_so() {
    let dir = tempfile::tempdir().unwrap();
    assert!(matches!(
        SafetensorsSet::open_dir(dir.path()),
        Err(FormatError::NoSafetensors { .. })
    ));
}

#[test]
fn sets_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<SafetensorsSet>();
    check::<SafetensorsFile>();
}
