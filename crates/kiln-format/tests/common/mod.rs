//! Fixtures shared by the integration tests: a valid sample file built with the writer, and
//! a raw byte builder for files the writer would refuse to produce.

#![allow(dead_code)] // each test binary uses a different subset

use kiln_format::{Array, GgmlType, GgufWriter, Value};

pub fn f32_bytes(xs: &[f32]) -> Vec<u8> {
    xs.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// One metadata value of every type, including arrays of every element type and arrays of
/// arrays.
pub fn every_value() -> Vec<(&'static str, Value)> {
    vec![
        ("t.u8", Value::U8(200)),
        ("t.i8", Value::I8(-100)),
        ("t.u16", Value::U16(60000)),
        ("t.i16", Value::I16(-30000)),
        ("t.u32", Value::U32(4_000_000_000)),
        ("t.i32", Value::I32(-2_000_000_000)),
        ("t.f32", Value::F32(-1.5e-7)),
        ("t.bool", Value::Bool(true)),
        ("t.string", Value::String("héllo ✓ \n\"quoted\"".into())),
        ("t.u64", Value::U64(u64::MAX)),
        ("t.i64", Value::I64(i64::MIN)),
        ("t.f64", Value::F64(std::f64::consts::PI)),
        ("t.empty_string", Value::String(String::new())),
        ("a.u8", Array::U8(vec![0, 1, 255]).into()),
        ("a.i8", Array::I8(vec![-128, 0, 127]).into()),
        ("a.u16", Array::U16(vec![1, 65535]).into()),
        ("a.i16", Array::I16(vec![-32768, 32767]).into()),
        ("a.u32", Array::U32(vec![7, u32::MAX]).into()),
        ("a.i32", Array::I32(vec![-1, 0, 1]).into()),
        (
            "a.f32",
            Array::F32(vec![0.0, -0.0, 1.25, f32::INFINITY]).into(),
        ),
        ("a.bool", Array::Bool(vec![true, false, true]).into()),
        (
            "a.string",
            Array::String(vec!["a".into(), String::new(), "<|im_end|>".into()]).into(),
        ),
        ("a.u64", Array::U64(vec![0, u64::MAX]).into()),
        ("a.i64", Array::I64(vec![i64::MIN, i64::MAX]).into()),
        ("a.f64", Array::F64(vec![1e300, -2.5]).into()),
        ("a.empty", Array::U32(vec![]).into()),
        (
            "a.nested",
            Array::Array(vec![
                Array::U8(vec![1, 2]),
                Array::String(vec!["x".into()]),
                Array::Array(vec![Array::Bool(vec![false]), Array::F64(vec![])]),
                Array::Array(vec![]),
            ])
            .into(),
        ),
    ]
}

/// A small valid file: a few metadata keys (including a nested array) and four tensors
/// of different types and ranks.
pub fn sample_writer() -> GgufWriter {
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", "llama").unwrap();
    w.add_metadata("llama.block_count", 2u32).unwrap();
    w.add_metadata("tokenizer.ggml.tokens", vec!["<s>", "a", "b"])
        .unwrap();
    w.add_metadata("tokenizer.ggml.scores", vec![0.0f32, -1.0, -2.0])
        .unwrap();
    w.add_metadata(
        "t.nested",
        Array::Array(vec![Array::I32(vec![1]), Array::Bool(vec![true])]),
    )
    .unwrap();
    w.add_tensor(
        "token_embd.weight",
        GgmlType::F32,
        &[4, 3],
        f32_bytes(&[0.5; 12]),
    )
    .unwrap();
    w.add_tensor("blk.0.attn_q.weight", GgmlType::Q8_0, &[32, 2], vec![7; 68])
        .unwrap();
    w.add_tensor(
        "blk.0.attn_norm.weight",
        GgmlType::F16,
        &[3],
        vec![1, 2, 3, 4, 5, 6],
    )
    .unwrap();
    w.add_tensor(
        "blk.0.ffn.weight",
        GgmlType::Q4_K,
        &[256, 1, 1, 2],
        vec![9; 288],
    )
    .unwrap();
    w
}

pub fn sample_bytes() -> Vec<u8> {
    sample_writer().to_bytes().unwrap()
}

/// Little-endian byte builder for hand-made (usually hostile) files.
#[derive(Default)]
pub struct Raw(pub Vec<u8>);

impl Raw {
    /// Magic, version, tensor count, metadata count.
    pub fn header(version: u32, n_tensors: u64, n_kv: u64) -> Raw {
        Raw::default()
            .bytes(b"GGUF")
            .u32(version)
            .u64(n_tensors)
            .u64(n_kv)
    }
    pub fn bytes(mut self, b: &[u8]) -> Raw {
        self.0.extend_from_slice(b);
        self
    }
    pub fn u32(self, v: u32) -> Raw {
        self.bytes(&v.to_le_bytes())
    }
    pub fn u64(self, v: u64) -> Raw {
        self.bytes(&v.to_le_bytes())
    }
    pub fn str(self, s: &str) -> Raw {
        self.u64(s.len() as u64).bytes(s.as_bytes())
    }
    /// A `u32` metadata pair.
    pub fn kv_u32(self, key: &str, v: u32) -> Raw {
        self.str(key).u32(4).u32(v)
    }
    /// A tensor info with a raw type id.
    pub fn tensor(self, name: &str, dims: &[u64], type_id: u32, offset: u64) -> Raw {
        let mut r = self.str(name).u32(dims.len() as u32);
        for &d in dims {
            r = r.u64(d);
        }
        r.u32(type_id).u64(offset)
    }
    pub fn pad_to(mut self, alignment: usize) -> Raw {
        while !self.0.len().is_multiple_of(alignment) {
            self.0.push(0);
        }
        self
    }
    pub fn zeros(mut self, n: usize) -> Raw {
        self.0.resize(self.0.len() + n, 0);
        self
    }
}
