//! Quantizer tests: error budgets, zeros, byte-exact blocks against gguf-py.

use super::*;
use crate::dequantize_row;

fn roundtrip(ty: GgmlType, x: &[f32]) -> Vec<f32> {
    let row_bytes = x.len() / ty.block_elems() * ty.block_bytes();
    let mut q = vec![0u8; row_bytes];
    quantize_row(ty, x, &mut q).unwrap();
    let mut y = vec![0.0; x.len()];
    dequantize_row(ty, &q, &mut y).unwrap();
    y
}

fn sample(n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| (i as f32 * 0.618).sin() * 1.7 + (i as f32 * 0.1).cos() * 0.3)
        .collect()
}

#[test]
fn quantized_rows_dequantize_within_each_types_step() {
    let x = sample(512);
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    for (ty, budget) in [
        (GgmlType::Q8_0, amax / 127.0),
        (GgmlType::Q4_0, amax / 8.0),
        (GgmlType::Q4_K, amax / 7.0),
    ] {
        let y = roundtrip(ty, &x);
        let worst = x
            .iter()
            .zip(&y)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max);
        assert!(worst <= budget, "{ty}: worst error {worst} > {budget}");
    }
}

#[test]
fn zero_rows_stay_zero() {
    for ty in quantize_types() {
        assert!(roundtrip(ty, &[0.0; 256]).iter().all(|&v| v == 0.0));
    }
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn q8_0_and_q4_0_match_the_gguf_python_reference_quantizers() {
    // Blocks written by gguf-py 0.19 (`gguf.quants.quantize`, ggml's reference
    // algorithms) for x[i] = sin(0.618 i)·1.7 + cos(0.1 i)·0.3 in f64, rounded to f32.
    let x: Vec<f32> = (0..64)
        .map(|i| ((i as f64 * 0.618).sin() * 1.7 + (i as f64 * 0.1).cos() * 0.3) as f32)
        .collect();
    let mut q8 = [0u8; 68];
    quantize_row(GgmlType::Q8_0, &x, &mut q8).unwrap();
    assert_eq!(
        q8.to_vec(),
        hex(
            "fe2313527a7b5516d5aaa3c4ff3e6a704f12cf9d90aae2225260450cc9948196cc\
             0eca23465c4a15d29a8192c60b48675d2eedb2949ece135378744a0acba6a9d213547d"
        )
    );
    let mut q4 = [0u8; 36];
    quantize_row(GgmlType::Q4_0, &x, &mut q4).unwrap();
    assert_eq!(
        q4.to_vec(),
        hex("ee33592d1f3f6da9d5e3c294581c0f1f5d99ba331c2e5d99d5f2f0d194592d3e5e9bd7f3")
    );
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
