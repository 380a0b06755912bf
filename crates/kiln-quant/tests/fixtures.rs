//! Dequantization checked against an independent decoder: the `gguf` Python package
//! (`gguf.quants.dequantize`) run on blocks taken from the real models, and on seeded random
//! blocks of the types no model uses (`tests/fixtures/make_fixtures.py` wrote them).
//!
//! Dequantization is deterministic and both sides use the same unfused float operations
//! (`d * q`, `d * q + m`, `(d * sc) * q - dmin * m`, exact f16/bf16 widening), so the
//! expected values must match bit for bit: no ulp tolerance is needed, and none is given.

mod common;

use kiln_quant::GgmlType;

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");

struct Fixture {
    name: String,
    ty: GgmlType,
    blocks: Vec<u8>,
    expected: Vec<f32>,
}

fn fixtures() -> Vec<Fixture> {
    let manifest = std::fs::read_to_string(format!("{DIR}/manifest.json"))
        .expect("tests/fixtures/manifest.json (run make_fixtures.py)");
    let entries: serde_json::Value = serde_json::from_str(&manifest).expect("manifest is JSON");
    let entries = entries.as_array().expect("manifest is a list");
    entries
        .iter()
        .map(|e| {
            let name = e["name"].as_str().expect("name").to_string();
            let ty_name = e["type"].as_str().expect("type");
            let ty = GgmlType::from_name(ty_name).expect("known type");
            let blocks = std::fs::read(format!("{DIR}/{name}.bin")).expect("fixture .bin");
            let raw = std::fs::read(format!("{DIR}/{name}.f32")).expect("fixture .f32");
            let expected = raw
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect::<Vec<_>>();
            assert_eq!(e["bytes"].as_u64(), Some(blocks.len() as u64), "{name}");
            assert_eq!(e["elems"].as_u64(), Some(expected.len() as u64), "{name}");
            Fixture {
                name,
                ty,
                blocks,
                expected,
            }
        })
        .collect()
}

#[test]
fn fixtures_cover_every_quantized_weight_type_and_every_model() {
    let f = fixtures();
    for ty in [
        "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q8_0", "Q4_K", "Q6_K", "Q5_1", "Q2_K", "Q3_K",
        "Q5_K", "IQ4_NL", "IQ4_XS",
    ] {
        assert!(f.iter().any(|x| x.ty.name() == ty), "no fixture for {ty}");
    }
    for model in ["smollm2", "gemma3", "qwen25"] {
        assert!(
            f.iter().any(|x| x.name.ends_with(model)),
            "no fixture from {model}"
        );
    }
}

#[test]
fn dequantization_matches_the_gguf_python_decoder_bit_for_bit() {
    for fx in fixtures() {
        for k in common::tables() {
            let mut got = vec![0.0f32; fx.expected.len()];
            k.dequantize(fx.ty, &fx.blocks, &mut got)
                .unwrap_or_else(|e| panic!("{}: {e}", fx.name));
            for (i, (g, e)) in got.iter().zip(&fx.expected).enumerate() {
                assert_eq!(
                    g.to_bits(),
                    e.to_bits(),
                    "{} ({}) element {i}: {g} vs gguf {e}",
                    fx.name,
                    k.isa()
                );
            }
        }
    }
}

#[test]
fn qmatrix_rows_dequantize_like_the_whole_buffer() {
    // The fixtures are runs of whole blocks; view each as a matrix of one-block rows.
    for fx in fixtures() {
        let (be, bb) = (fx.ty.block_elems(), fx.ty.block_bytes());
        let (cols, rows) = if be == 1 {
            (64, fx.expected.len() / 64)
        } else {
            (be, fx.blocks.len() / bb)
        };
        let m = kiln_quant::QMatrix::new(fx.ty, rows, cols, &fx.blocks[..rows * cols / be * bb])
            .expect("qmatrix");
        let mut row = vec![0.0f32; cols];
        for r in 0..rows {
            m.dequantize_row(r, &mut row);
            let want = &fx.expected[r * cols..(r + 1) * cols];
            assert!(
                row.iter()
                    .zip(want)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{} row {r}",
                fx.name
            );
        }
    }
}
