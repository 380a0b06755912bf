//! Matmul on real weights: for every 2-D tensor type in the three cached models, a slice of
//! rows multiplied by seeded activations must (a) equal the scalar result bit for bit on every
//! ISA, and (b) stay within the type's error budget of the f64 product of the
//! dequantized weights with the original activations. Fails loudly if a model is missing.

mod common;

use common::*;
use kiln_format::GgufFile;
use kiln_quant::{GgmlType, MatmulScratch, QMatrix, matmul_prepared_with, vec_dot_type};

const MODELS: &[&str] = &["smollm2-135m", "gemma3-270m", "qwen2.5-coder-0.5b"];
/// Rows taken from each tensor (from its start and from its middle).
const ROWS: usize = 24;

fn check_tensor(name: &str, ty: GgmlType, cols: usize, rows: usize, data: &[u8]) {
    let rb = data.len() / rows;
    let mid = rows / 2;
    for (label, start) in [("start", 0usize), ("middle", mid)] {
        let n_rows = ROWS.min(rows - start);
        let slice = &data[start * rb..(start + n_rows) * rb];
        let w = QMatrix::new(ty, n_rows, cols, slice).expect("matrix");
        let wd = dequant(ty, slice);
        for n in [1usize, 5] {
            let x = random_acts(n * cols, &mut SeedRng::new(cols as u64 * 31 + n as u64));
            let act = vec_dot_type(ty).expect("supported");
            let mut results = Vec::new();
            for k in tables() {
                let mut s = MatmulScratch::default();
                s.prepare(&x, n, cols);
                let mut y = vec![0.0f32; n * n_rows];
                matmul_prepared_with(k, &w, &mut s, &mut y);
                results.push((k.isa(), y));
            }
            let scalar_y = &results[0].1;
            for t in 0..n {
                let xt = &x[t * cols..(t + 1) * cols];
                let _ad = decode_act(act, &quantize(scalar(), act, xt));
                for r in 0..n_rows {
                    let wr = &wd[r * cols..(r + 1) * cols];
                    let exact: f64 = wr.iter().zip(xt).map(|(a, b)| *a as f64 * *b as f64).sum();
                    let budget = budget_bound(ty, w.row(r), xt);
                    for (isa, y) in &results {
                        let got = y[t * n_rows + r];
                        assert!(
                            (got as f64 - exact).abs() <= budget,
                            "{name} ({ty}, {label} row {r}, token {t}, {isa}): {got} vs exact {exact}, budget {budget:e}"
                        );
                        let s = scalar_y[t * n_rows + r];
                        assert_eq!(
                            got.to_bits(),
                            s.to_bits(),
                            "{name} ({ty}, {label} row {r}, token {t}): {isa} {got} vs scalar {s}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn real_weights_of_every_model_multiply_within_budget_on_every_isa() {
    let mut seen = std::collections::BTreeSet::new();
    for model in MODELS {
        let path = kiln_hub::resolve(model)
            .unwrap_or_else(|e| panic!("model {model} is required for this test: {e}"));
        let file = GgufFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        // Up to two tensors per type per model, in file order.
        let mut per_type = std::collections::BTreeMap::<u32, usize>::new();
        for info in file.tensors() {
            if info.dims.len() != 2 || !kiln_quant::is_supported(info.ty) {
                continue;
            }
            let count = per_type.entry(info.ty.id()).or_default();
            if *count >= 2 {
                continue;
            }
            *count += 1;
            let (cols, rows) = (info.dims[0] as usize, info.dims[1] as usize);
            check_tensor(&info.name, info.ty, cols, rows, file.tensor_data(info));
            seen.insert(info.ty.name());
        }
    }
    for ty in ["Q4_1", "Q5_0", "Q8_0", "Q4_K", "Q6_K"] {
        assert!(seen.contains(ty), "no {ty} tensor exercised: {seen:?}");
    }
}
