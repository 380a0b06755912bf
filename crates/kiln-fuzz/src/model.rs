//! GGUF metadata → model configuration → bound model → one forward pass.
//!
//! Two input forms, told apart by the first bytes:
//! - a whole GGUF file (starts with `GGUF`): `Model::from_gguf` on it;
//! - otherwise structured edits of a real tiny checkpoint: byte 0 picks the architecture
//!   (`testdata/hf-tiny/<arch>`, converted to GGUF once), then each 10-byte record
//!   `[key, kind, payload × 8]` replaces or removes one of its metadata values, so the
//!   fuzzer explores every configuration key of every architecture with typed values.
//!
//! A model that loads runs one two-token forward pass in an 8-position session.

use std::sync::{Arc, OnceLock};

use kiln_format::{Array, GgufFile, GgufWriter, Metadata, Value};
use kiln_model::{Logits, Model, Session};

/// The tiny checkpoints the structured form edits (`testdata/hf-tiny/<name>`).
const ARCHS: &[&str] = &[
    "llama", "qwen2", "qwen3", "gemma2", "gemma3", "phi2", "phi3", "gpt2", "mistral",
];

/// One converted checkpoint: its file and its metadata keys (sorted, so a key byte means
/// the same key on every run).
struct Base {
    file: GgufFile,
    keys: Vec<String>,
}

fn base(i: usize) -> &'static Base {
    static BASES: [OnceLock<Base>; 9] = [const { OnceLock::new() }; 9];
    BASES[i].get_or_init(|| {
        let dir = crate::testdata(&format!("hf-tiny/{}", ARCHS[i]));
        let converted = kiln_model::convert::hf_to_gguf(&dir)
            .and_then(|w| Ok(w.to_bytes()?))
            .and_then(|b| Ok(GgufFile::from_bytes(b)?));
        let file = match converted {
            Ok(f) => f,
            Err(e) => panic!("kiln-fuzz fixture {} does not convert: {e}", dir.display()),
        };
        let mut keys: Vec<String> = file.metadata().iter().map(|(k, _)| k.to_owned()).collect();
        keys.sort();
        Base { file, keys }
    })
}

/// A value of the kind the record asks for, made from its payload.
fn value(kind: u8, p: [u8; 8]) -> Option<Value> {
    let u64v = u64::from_le_bytes(p);
    let u32v = u32::from_le_bytes([p[0], p[1], p[2], p[3]]);
    Some(match kind % 12 {
        0 => return None,
        1 => Value::U32(u32v),
        2 => Value::I32(u32v as i32),
        3 => Value::U64(u64v),
        4 => Value::F32(f32::from_bits(u32v)),
        5 => Value::Bool(p[0] & 1 == 1),
        6 => Value::String(String::from_utf8_lossy(&p).into_owned()),
        // Small integers and the values near real ones are the interesting ones.
        7 => Value::U32(u32::from(p[0])),
        8 => Value::F32(f32::from(p[0]) / 16.0),
        9 => Value::Array(Array::F32(
            (0..p[0] % 8)
                .map(|i| f32::from(p[1 + i as usize % 7]))
                .collect(),
        )),
        10 => Value::Array(Array::U32(
            (0..p[0] % 8)
                .map(|i| u32::from(p[1 + i as usize % 7]))
                .collect(),
        )),
        _ => Value::I32(i32::from(p[0] as i8)),
    })
}

/// The edited checkpoint as GGUF bytes.
fn edited(data: &[u8]) -> Option<Vec<u8>> {
    let (arch, records) = crate::split_mode(data);
    let base = base(arch as usize % ARCHS.len());
    let src = base.file.metadata();
    let mut md = Metadata::new();
    for (k, v) in src.iter() {
        md.set(k, v.clone());
    }
    let mut removed = Vec::new();
    for r in records.chunks_exact(10) {
        let key = &base.keys[r[0] as usize % base.keys.len()];
        let mut p = [0u8; 8];
        p.copy_from_slice(&r[2..]);
        match value(r[1], p) {
            Some(v) => md.set(key.as_str(), v),
            None => removed.push(key.as_str()),
        }
    }
    let mut w = GgufWriter::new();
    for (k, v) in md.iter() {
        if !removed.contains(&k) {
            w.add_metadata(k, v.clone()).ok()?;
        }
    }
    for t in base.file.tensors() {
        let data = base.file.tensor_data(t).to_vec();
        w.add_tensor(t.name.clone(), t.ty, &t.dims, data).ok()?;
    }
    w.to_bytes().ok()
}

pub fn model_config(data: &[u8]) {
    let bytes = if data.starts_with(b"GGUF") {
        data.to_vec()
    } else {
        match edited(data) {
            Some(b) => b,
            None => return,
        }
    };
    let Ok(file) = GgufFile::from_bytes(bytes) else {
        return;
    };
    let Ok(model) = Model::from_gguf(Arc::new(file)) else {
        return;
    };
    let vocab = model.config().vocab_size as u32;
    let mut session = Session::new(Arc::new(model), 8, 4);
    let _ = session.forward(&[0, 1 % vocab.max(1)], Logits::Last);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The structured form is only useful if the unedited checkpoints reach the forward
    /// pass: every architecture's base loads and evaluates.
    #[test]
    fn every_unedited_tiny_checkpoint_loads_and_runs_a_forward_pass() {
        for (i, arch) in ARCHS.iter().enumerate() {
            let bytes = edited(&[i as u8]).expect("the base re-serializes");
            let file = GgufFile::from_bytes(bytes).expect("the base parses");
            let model = Model::from_gguf(Arc::new(file))
                .unwrap_or_else(|e| panic!("{arch} does not load: {e}"));
            let mut s = Session::new(Arc::new(model), 8, 4);
            let logits = s.forward(&[0, 1], Logits::Last).expect("forward");
            assert!(logits.iter().all(|x| x.is_finite()), "{arch}");
        }
    }
}
