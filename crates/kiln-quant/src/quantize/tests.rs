//! Quantizer tests: byte-exact blocks against llama-quantize and gguf-py, round-trip error
//! budgets, zeros, refusals.

use super::*;
use crate::dequantize_row;

fn quantize(ty: GgmlType, x: &[f32]) -> Vec<u8> {
    let mut q = vec![0u8; x.len() / ty.block_elems() * ty.block_bytes()];
    quantize_row(ty, x, &mut q).unwrap();
    q
}

fn roundtrip(ty: GgmlType, x: &[f32]) -> Vec<f32> {
    let q = quantize(ty, x);
    let mut y = vec![0.0; x.len()];
    dequantize_row(ty, &q, &mut y).unwrap();
    y
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn type_named(name: &str) -> GgmlType {
    quantize_types()
        .into_iter()
        .find(|t| t.name() == name)
        .unwrap_or_else(|| panic!("no quantizer for {name}"))
}

/// The fixture: f32 inputs and the blocks llama.cpp's `llama-quantize` wrote for them
/// (provenance in its `source` field).
fn llama_quantize_fixture() -> serde_json::Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/quant/llama_quantize_blocks.json"
    );
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap()
}

fn fixture_inputs(fx: &serde_json::Value) -> Vec<(String, Vec<f32>)> {
    fx["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            let bytes = hex(i["f32_le_hex"].as_str().unwrap());
            let x = bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            (i["what"].as_str().unwrap().to_string(), x)
        })
        .collect()
}

#[test]
fn every_quantizer_writes_the_blocks_llama_quantize_writes() {
    let fx = llama_quantize_fixture();
    let inputs = fixture_inputs(&fx);
    assert_eq!(inputs.len(), 8);
    let expected = fx["expected"].as_object().unwrap();
    // Every type kiln-quant writes is covered by the fixture.
    for ty in quantize_types() {
        assert!(expected.contains_key(ty.name()), "no fixture for {ty}");
    }
    for (name, blocks) in expected {
        let ty = type_named(name);
        let blocks = blocks.as_array().unwrap();
        assert_eq!(blocks.len(), inputs.len());
        for ((what, x), want) in inputs.iter().zip(blocks) {
            let got = quantize(ty, x);
            let want = hex(want.as_str().unwrap());
            let bb = ty.block_bytes();
            for (b, (g, w)) in got.chunks(bb).zip(want.chunks(bb)).enumerate() {
                assert_eq!(g, w, "{name}, input '{what}', block {b}");
            }
            assert_eq!(got.len(), want.len(), "{name}, input '{what}'");
        }
    }
}

#[test]
fn q8_0_and_q4_0_match_the_gguf_python_reference_quantizers() {
    // Blocks written by gguf-py 0.19 (`gguf.quants.quantize`, ggml's reference
    // algorithms) for x[i] = sin(0.618 i)·1.7 + cos(0.1 i)·0.3 in f64, rounded to f32.
    let x: Vec<f32> = (0..64)
        .map(|i| ((i as f64 * 0.618).sin() * 1.7 + (i as f64 * 0.1).cos() * 0.3) as f32)
        .collect();
    assert_eq!(
        quantize(GgmlType::Q8_0, &x),
        hex(
            "fe2313527a7b5516d5aaa3c4ff3e6a704f12cf9d90aae2225260450cc9948196cc\
             0eca23465c4a15d29a8192c60b48675d2eedb2949ece135378744a0acba6a9d213547d"
        )
    );
    assert_eq!(
        quantize(GgmlType::Q4_0, &x),
        hex("ee33592d1f3f6da9d5e3c294581c0f1f5d99ba331c2e5d99d5f2f0d194592d3e5e9bd7f3")
    );
}

/// Round-trip budgets per type on the fixture's noisy weights (256 values): the largest
/// error relative to the row's largest magnitude, and the RMS error relative to the row's
/// RMS. Each is about 1.25× what the quantizer achieves (measured: Q8_0 0.0039 / 0.0052,
/// Q4_0 0.088 / 0.080, Q4_1 0.059 / 0.076, Q5_0 0.034 / 0.044, Q5_1 0.030 / 0.039,
/// Q2_K 0.280 / 0.318, Q3_K 0.128 / 0.149, Q4_K 0.057 / 0.072, Q5_K 0.031 / 0.037,
/// Q6_K 0.015 / 0.018, IQ4_NL 0.069 / 0.072, IQ4_XS 0.069 / 0.073).
const ROUNDTRIP_BUDGETS: &[(GgmlType, f32, f32)] = &[
    (GgmlType::Q8_0, 0.005, 0.0065),
    (GgmlType::Q4_0, 0.11, 0.10),
    (GgmlType::Q4_1, 0.075, 0.095),
    (GgmlType::Q5_0, 0.043, 0.055),
    (GgmlType::Q5_1, 0.038, 0.049),
    (GgmlType::Q2_K, 0.35, 0.40),
    (GgmlType::Q3_K, 0.16, 0.19),
    (GgmlType::Q4_K, 0.072, 0.09),
    (GgmlType::Q5_K, 0.039, 0.046),
    (GgmlType::Q6_K, 0.019, 0.023),
    (GgmlType::IQ4_NL, 0.086, 0.09),
    (GgmlType::IQ4_XS, 0.086, 0.092),
];

fn max_and_rms_error(x: &[f32], y: &[f32]) -> (f32, f32) {
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let rms = (x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32).sqrt();
    let worst = x
        .iter()
        .zip(y)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max);
    let err_rms =
        (x.iter().zip(y).map(|(a, b)| (a - b) * (a - b)).sum::<f32>() / x.len() as f32).sqrt();
    (worst / amax, err_rms / rms)
}

#[test]
fn quantized_rows_dequantize_within_each_types_error_budget() {
    let fx = llama_quantize_fixture();
    let (_, x) = &fixture_inputs(&fx)[0];
    for &(ty, max_budget, rms_budget) in ROUNDTRIP_BUDGETS {
        let (max_err, rms_err) = max_and_rms_error(x, &roundtrip(ty, x));
        assert!(
            max_err <= max_budget && rms_err <= rms_budget,
            "{ty}: max error {max_err} (budget {max_budget}), rms error {rms_err} (budget {rms_budget})"
        );
    }
    // Every type that can be both written and read has a budget.
    for ty in quantize_types()
        .into_iter()
        .filter(|t| crate::is_supported(*t))
    {
        assert!(
            ROUNDTRIP_BUDGETS.iter().any(|(t, _, _)| *t == ty),
            "no round-trip budget for {ty}"
        );
    }
}

#[test]
fn more_bits_give_smaller_round_trip_errors() {
    let fx = llama_quantize_fixture();
    let (_, x) = &fixture_inputs(&fx)[0];
    let rms = |ty| max_and_rms_error(x, &roundtrip(ty, x)).1;
    let ladder = [
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::Q8_0,
    ];
    let readable: Vec<GgmlType> = ladder
        .into_iter()
        .filter(|t| crate::is_supported(*t))
        .collect();
    assert!(readable.len() >= 3, "{readable:?}");
    for w in readable.windows(2) {
        assert!(rms(w[1]) < rms(w[0]), "{} vs {}", w[1], w[0]);
    }
}

#[test]
fn zero_rows_stay_zero() {
    for ty in quantize_types()
        .into_iter()
        .filter(|t| crate::is_supported(*t))
    {
        assert!(roundtrip(ty, &[0.0; 256]).iter().all(|&v| v == 0.0), "{ty}");
    }
}

#[test]
fn types_without_a_quantizer_are_refused_with_the_list() {
    let err = quantize_row(GgmlType::Q8_1, &[0.0; 32], &mut [0u8; 36]).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("Q8_1") && msg.contains("Q4_K"), "{msg}");
}

#[test]
fn partial_blocks_and_wrong_output_sizes_are_refused() {
    assert!(matches!(
        quantize_row(GgmlType::Q4_K, &[0.0; 32], &mut [0u8; 144]),
        Err(QuantError::PartialBlock { .. })
    ));
    assert!(matches!(
        quantize_row(GgmlType::Q8_0, &[0.0; 32], &mut [0u8; 35]),
        Err(QuantError::BadShape { .. })
    ));
}
