//! GGUF files, safetensors headers and shard index files.

use std::path::Path;

use kiln_format::{GgufFile, SafetensorsFile, ShardIndex};

/// A whole GGUF file: parse, then read every metadata value through the typed getters
/// and every tensor view.
pub fn gguf(data: &[u8]) {
    let Ok(file) = GgufFile::from_bytes(data.to_vec()) else {
        return;
    };
    let _ = file.architecture();
    let md = file.metadata();
    for (key, value) in md.iter() {
        let _ = (value.type_name(), value.as_int(), value.as_str());
        if let Some(a) = value.as_array() {
            let _ = (a.len(), a.elem_type(), a.total_elements(), a.int_at(0));
            let _ = a.int_at(a.len().saturating_sub(1));
        }
        let _ = (
            md.u32(key),
            md.u64(key),
            md.i64(key),
            md.f32(key),
            md.bool(key),
        );
        let _ = (
            md.str(key),
            md.str_array(key),
            md.f32_array(key),
            md.i32_array(key),
        );
        let _ = md.u32_array_any(key);
    }
    for info in file.tensors() {
        let _ = (info.n_elements(), info.row_len(), info.n_rows());
        let view = file.tensor(&info.name);
        assert!(
            view.is_ok_and(|v| v.data.len() as u64 == info.n_bytes),
            "tensor '{}' of a parsed file has no view of its {} bytes",
            info.name,
            info.n_bytes
        );
    }
}

/// A whole single-file safetensors checkpoint: parse, then view every tensor.
pub fn safetensors_header(data: &[u8]) {
    let Ok(file) = SafetensorsFile::from_bytes(data.to_vec()) else {
        return;
    };
    let _ = file.metadata();
    for info in file.tensors() {
        let _ = (info.n_elements(), info.ggml_dims(), info.dtype.ggml_type());
        let view = file.tensor(&info.name);
        assert!(
            view.is_ok_and(|v| v.data.len() as u64 == info.n_bytes),
            "tensor '{}' of a parsed file has no view of its {} bytes",
            info.name,
            info.n_bytes
        );
    }
}

/// A `model.safetensors.index.json` text.
pub fn safetensors_index(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(index) = ShardIndex::parse(text, Path::new("model.safetensors.index.json")) {
        let shards = index.shards();
        assert!(
            shards.len() <= index.weight_map.len(),
            "more shards than tensors"
        );
    }
}
