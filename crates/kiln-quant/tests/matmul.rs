//! The matmul drivers: agreement with a naive dequantize-then-f32 product, bit-for-bit
//! independence from batch size, tiling and thread count, shared preparation, shape errors.

mod common;

use common::*;
use kiln_quant::{
    GgmlType, MatmulScratch, QMatrix, QuantError, kernels, matmul, matmul_prepared,
    matmul_prepared_with, vec_dot_type,
};

/// Columns per type: several blocks, model-like for the 32-blocks.
fn cols_for(ty: GgmlType) -> usize {
    match ty.block_elems() {
        256 => 512,
        _ => 96 + 32 * 3, // 192: six 32-blocks; for float types not a multiple of 32·4
    }
}

fn random_matrix(ty: GgmlType, rows: usize, cols: usize, seed: u64) -> Vec<u8> {
    let mut rng = SeedRng::new(seed);
    random_weights(ty, rows * cols / ty.block_elems(), &mut rng)
}

fn random_x(n: usize, seed: u64) -> Vec<f32> {
    random_acts(n, &mut SeedRng::new(seed ^ 0xABCD))
}

/// Asserts that `y` (`n` tokens × the matrix's rows) holds table `k`'s dot of every row with
/// every token of `x` (rows of `w.cols`), bit for bit.
fn assert_dots(k: &kiln_quant::Kernels, w: &QMatrix, x: &[f32], y: &[f32], what: &str) {
    let (ty, rows, cols) = (w.ty(), w.rows(), w.cols());
    let act = vec_dot_type(ty).expect("supported");
    for (t, xt) in x.chunks_exact(cols).enumerate() {
        let a = quantize(k, act, xt);
        for r in 0..rows {
            let d = k.dot(ty, w.row(r), &a).expect("dot");
            assert_eq!(
                y[t * rows + r].to_bits(),
                d.to_bits(),
                "{} {ty} t={t} r={r} {what}",
                k.isa()
            );
        }
    }
}

#[test]
fn matmul_matches_the_naive_dequantized_product() {
    for ty in weight_types() {
        let (rows, cols) = (37, cols_for(ty));
        let data = random_matrix(ty, rows, cols, 1);
        let w = QMatrix::new(ty, rows, cols, &data).expect("matrix");
        let wd = dequant(ty, &data);
        for n in [1usize, 3, 4, 9] {
            let x = random_x(n * cols, n as u64);
            let mut y = vec![0.0f32; n * rows];
            matmul(&w, &x, n, &mut y, &mut MatmulScratch::default());
            for t in 0..n {
                let xt = &x[t * cols..(t + 1) * cols];
                for r in 0..rows {
                    let wr = &wd[r * cols..(r + 1) * cols];
                    let exact: f64 = wr.iter().zip(xt).map(|(a, b)| *a as f64 * *b as f64).sum();
                    let tol = budget_bound(ty, w.row(r), xt);
                    let got = y[t * rows + r] as f64;
                    assert!(
                        (got - exact).abs() <= tol,
                        "{ty} n={n} t={t} r={r}: {got} vs {exact} (budget {tol:e})"
                    );
                }
            }
        }
    }
}

#[test]
fn matmul_outputs_equal_the_dot_kernel_bit_for_bit() {
    for ty in weight_types() {
        let (rows, cols) = (21, cols_for(ty));
        let data = random_matrix(ty, rows, cols, 2);
        let w = QMatrix::new(ty, rows, cols, &data).expect("matrix");
        for k in tables() {
            let n = 70; // several groups of eight, a remainder that is not a multiple of 4
            let x = random_x(n * cols, 3);
            let mut s = MatmulScratch::default();
            s.prepare(&x, n, cols);
            let mut y = vec![0.0f32; n * rows];
            matmul_prepared_with(k, &w, &mut s, &mut y);
            assert_dots(k, &w, &x, &y, "");
        }
    }
}

#[test]
fn every_pass_size_from_two_to_seventeen_gives_each_token_its_single_token_bits() {
    // Speculative verification scores a handful of tokens per pass: every ragged tail
    // (padded to a four- or eight-token kernel) must give each token the bits of its
    // one-token GEMV. One scratch serves every size, larger passes first, so padding rows
    // left over from a larger pass must not leak into a smaller one.
    for ty in weight_types() {
        let (rows, cols) = (13, cols_for(ty));
        let data = random_matrix(ty, rows, cols, 6);
        let w = QMatrix::new(ty, rows, cols, &data).expect("matrix");
        let x = random_x(17 * cols, 7);
        for k in tables() {
            let mut s = MatmulScratch::default();
            let mut one = vec![vec![0.0f32; rows]; 17];
            for (t, o) in one.iter_mut().enumerate() {
                s.prepare(&x[t * cols..(t + 1) * cols], 1, cols);
                matmul_prepared_with(k, &w, &mut s, o);
            }
            for n in (2..=17).rev() {
                s.prepare(&x[..n * cols], n, cols);
                let mut batch = vec![0.0f32; n * rows];
                matmul_prepared_with(k, &w, &mut s, &mut batch);
                for t in 0..n {
                    for r in 0..rows {
                        assert_eq!(
                            batch[t * rows + r].to_bits(),
                            one[t][r].to_bits(),
                            "{} {ty} pass of {n}: token {t} row {r}",
                            k.isa()
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn a_token_row_gives_the_same_bits_alone_and_in_a_batch_of_seven() {
    for ty in weight_types() {
        let (rows, cols) = (67, cols_for(ty));
        let data = random_matrix(ty, rows, cols, 4);
        let w = QMatrix::new(ty, rows, cols, &data).expect("matrix");
        let x = random_x(7 * cols, 5);
        for k in tables() {
            let mut s = MatmulScratch::default();
            s.prepare(&x, 7, cols);
            let mut batch = vec![0.0f32; 7 * rows];
            matmul_prepared_with(k, &w, &mut s, &mut batch);
            for t in 0..7 {
                s.prepare(&x[t * cols..(t + 1) * cols], 1, cols);
                let mut one = vec![0.0f32; rows];
                matmul_prepared_with(k, &w, &mut s, &mut one);
                for r in 0..rows {
                    assert_eq!(
                        batch[t * rows + r].to_bits(),
                        one[r].to_bits(),
                        "{} {ty} token {t} row {r}",
                        k.isa()
                    );
                }
            }
        }
    }
}

#[test]
fn results_do_not_depend_on_the_number_of_threads() {
    for &ty in &[
        GgmlType::Q4_1,
        GgmlType::Q8_0,
        GgmlType::Q4_K,
        GgmlType::Q6_K,
        GgmlType::Q5_0,
    ] {
        let (rows, cols) = (300, if ty.block_elems() == 256 { 768 } else { 576 });
        let data = random_matrix(ty, rows, cols, 6);
        let w = QMatrix::new(ty, rows, cols, &data).expect("matrix");
        for n in [1usize, 13, 64] {
            let x = random_x(n * cols, 7 + n as u64);
            let run = |threads: usize| {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .expect("pool");
                let mut y = vec![0.0f32; n * rows];
                pool.install(|| matmul(&w, &x, n, &mut y, &mut MatmulScratch::default()));
                y
            };
            let base = run(1);
            for threads in [2, 3, 5] {
                let y = run(threads);
                assert!(
                    y.iter().zip(&base).all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{ty} n={n}: {threads} threads differ from 1"
                );
            }
        }
    }
}

#[test]
fn a_matrix_of_several_row_blocks_equals_the_dot_kernel_bit_for_bit_on_every_isa() {
    // More than 192 KiB of weights (unpacked, for the types unpacked per row block): several
    // row blocks per task and a last partial one; 21 tokens: two groups of eight, one of four
    // and a single token; one thread (one task) and three (tasks over row chunks).
    for &ty in &[
        GgmlType::Q4_K,
        GgmlType::Q6_K,
        GgmlType::Q4_0,
        GgmlType::Q8_0,
    ] {
        let (rows, cols, n) = (1501, 512, 21);
        let data = random_matrix(ty, rows, cols, 8);
        let w = QMatrix::new(ty, rows, cols, &data).expect("matrix");
        let act = vec_dot_type(ty).expect("supported");
        let x = random_x(n * cols, 9);
        for k in tables() {
            let want: Vec<f32> = (0..n)
                .flat_map(|t| {
                    let a = quantize(k, act, &x[t * cols..(t + 1) * cols]);
                    (0..rows)
                        .map(|r| k.dot(ty, w.row(r), &a).expect("dot"))
                        .collect::<Vec<_>>()
                })
                .collect();
            for threads in [1, 3] {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .expect("pool");
                let mut s = MatmulScratch::default();
                s.prepare(&x, n, cols);
                let mut y = vec![0.0f32; n * rows];
                pool.install(|| matmul_prepared_with(k, &w, &mut s, &mut y));
                for (i, (g, d)) in y.iter().zip(&want).enumerate() {
                    assert_eq!(
                        g.to_bits(),
                        d.to_bits(),
                        "{} {ty} {threads} threads: token {} row {}",
                        k.isa(),
                        i / rows,
                        i % rows
                    );
                }
            }
        }
    }
}

#[test]
fn gemm_tiles_equal_the_dot_kernel_for_every_token_count_and_odd_row_counts() {
    // Token counts 1..=21 (groups of eight, of four and single tokens in every mix), row
    // counts that are not a multiple of the two-row tile (nor of four), one and three threads,
    // every table on this machine.
    for &ty in &[
        GgmlType::Q4_K,
        GgmlType::Q6_K,
        GgmlType::Q8_0,
        GgmlType::Q4_0,
        GgmlType::Q5_0,
        GgmlType::Q4_1,
    ] {
        let cols = cols_for(ty);
        let act = vec_dot_type(ty).expect("supported");
        for rows in [1usize, 3, 37] {
            let data = random_matrix(ty, rows, cols, 10 + rows as u64);
            let w = QMatrix::new(ty, rows, cols, &data).expect("matrix");
            let x = random_x(21 * cols, 11);
            for k in tables() {
                let want: Vec<Vec<f32>> = (0..21)
                    .map(|t| {
                        let a = quantize(k, act, &x[t * cols..(t + 1) * cols]);
                        (0..rows)
                            .map(|r| k.dot(ty, w.row(r), &a).expect("dot"))
                            .collect()
                    })
                    .collect();
                for threads in [1, 3] {
                    let pool = rayon::ThreadPoolBuilder::new()
                        .num_threads(threads)
                        .build()
                        .expect("pool");
                    for n in 1..=21 {
                        let mut s = MatmulScratch::default();
                        s.prepare(&x[..n * cols], n, cols);
                        let mut y = vec![0.0f32; n * rows];
                        pool.install(|| matmul_prepared_with(k, &w, &mut s, &mut y));
                        for (i, g) in y.iter().enumerate() {
                            let (t, r) = (i / rows, i % rows);
                            assert_eq!(
                                g.to_bits(),
                                want[t][r].to_bits(),
                                "{} {ty} rows={rows} n={n} {threads} threads: token {t} row {r}",
                                k.isa()
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn one_preparation_serves_every_table_in_turn() {
    // The tables differ in what they lay out beside the quantized rows (the AVX-512 tiles
    // read the activations once more, per group of eight); a scratch prepared once and used
    // by each table in turn, in both orders, must still give every table its dot's bits.
    for ty in [
        GgmlType::Q4_K,
        GgmlType::Q5_0,
        GgmlType::Q8_0,
        GgmlType::Q4_1,
    ] {
        let (rows, cols) = (13, cols_for(ty));
        let data = random_matrix(ty, rows, cols, 5);
        let w = QMatrix::new(ty, rows, cols, &data).expect("matrix");
        let n = 19;
        let x = random_x(n * cols, 6);
        let ks = tables();
        for reversed in [false, true] {
            let mut s = MatmulScratch::default();
            s.prepare(&x, n, cols);
            let seq: Vec<_> = if reversed {
                ks.iter().rev().collect()
            } else {
                ks.iter().collect()
            };
            for k in seq {
                let mut y = vec![0.0f32; n * rows];
                matmul_prepared_with(k, &w, &mut s, &mut y);
                assert_dots(k, &w, &x, &y, &format!("(tables reversed: {reversed})"));
            }
        }
    }
}

#[test]
fn one_preparation_serves_several_matrices_and_types() {
    let cols = 512;
    let x = random_x(3 * cols, 8);
    let mats: Vec<(GgmlType, usize, Vec<u8>)> = [
        (GgmlType::Q8_0, 40),
        (GgmlType::Q4_K, 24),
        (GgmlType::Q4_1, 8),
        (GgmlType::Q6_K, 16),
    ]
    .into_iter()
    .enumerate()
    .map(|(i, (ty, rows))| (ty, rows, random_matrix(ty, rows, cols, 10 + i as u64)))
    .collect();
    let mut shared = MatmulScratch::default();
    shared.prepare(&x, 3, cols);
    for (ty, rows, data) in &mats {
        let w = QMatrix::new(*ty, *rows, cols, data).expect("matrix");
        let mut a = vec![0.0f32; 3 * rows];
        matmul_prepared(&w, &mut shared, &mut a);
        let mut b = vec![0.0f32; 3 * rows];
        matmul(&w, &x, 3, &mut b, &mut MatmulScratch::default());
        assert!(
            a.iter().zip(&b).all(|(p, q)| p.to_bits() == q.to_bits()),
            "{ty}"
        );
    }
}

#[test]
fn reusing_a_scratch_with_other_sizes_gives_fresh_results() {
    let ty = GgmlType::Q8_0;
    let mut s = MatmulScratch::default();
    for (rows, cols, n) in [(8, 64, 5), (16, 128, 1), (8, 64, 2), (4, 256, 9)] {
        let data = random_matrix(ty, rows, cols, cols as u64);
        let w = QMatrix::new(ty, rows, cols, &data).expect("matrix");
        let x = random_x(n * cols, rows as u64);
        let mut a = vec![0.0f32; n * rows];
        matmul(&w, &x, n, &mut a, &mut s);
        let mut b = vec![0.0f32; n * rows];
        matmul(&w, &x, n, &mut b, &mut MatmulScratch::default());
        assert_eq!(a, b, "rows {rows} cols {cols} n {n}");
    }
}

#[test]
fn qmatrix_rejects_unsupported_types_with_the_type_name_and_id() {
    let e = QMatrix::new(GgmlType::IQ2_XXS, 1, 256, &[0u8; 66]).expect_err("unsupported");
    assert_eq!(
        e,
        QuantError::UnsupportedType {
            type_name: "IQ2_XXS",
            type_id: 16
        }
    );
    assert!(e.to_string().contains("IQ2_XXS") && e.to_string().contains("16"));
    assert!(!kiln_quant::is_supported(GgmlType::IQ3_XXS));
    assert!(kiln_quant::vec_dot_type(GgmlType::IQ2_XS).is_err());
    assert!(kiln_quant::vec_dot_type(GgmlType::TQ1_0).is_err());
}

#[test]
fn qmatrix_rejects_partial_blocks_and_wrong_lengths() {
    let e = QMatrix::new(GgmlType::Q4_K, 2, 300, &[0u8; 288]).expect_err("partial");
    assert!(
        matches!(
            e,
            QuantError::PartialBlock {
                elems: 300,
                block_elems: 256,
                ..
            }
        ),
        "{e}"
    );
    let e = QMatrix::new(GgmlType::Q8_0, 2, 64, &[0u8; 135]).expect_err("length");
    assert!(
        matches!(
            e,
            QuantError::BadShape {
                expected: 136,
                actual: 135,
                ..
            }
        ),
        "{e}"
    );
    let e = QMatrix::new(GgmlType::Q8_0, usize::MAX / 2, 64, &[]).expect_err("overflow");
    assert!(matches!(e, QuantError::BadShape { .. }), "{e}");
}

#[test]
fn vec_dot_types_follow_ggml() {
    use GgmlType::*;
    for (w, a) in [
        (F32, F32),
        (F16, F16),
        (BF16, BF16),
        (Q4_0, Q8_0),
        (Q4_1, Q8_1),
        (Q5_0, Q8_0),
        (Q8_0, Q8_0),
        (Q4_K, Q8_K),
        (Q6_K, Q8_K),
    ] {
        assert_eq!(vec_dot_type(w), Ok(a), "{w}");
    }
}

#[test]
fn kernel_entry_points_report_bad_lengths() {
    let k = kernels();
    let e = k
        .dot(GgmlType::Q8_0, &[0u8; 34], &[0u8; 33])
        .expect_err("short act");
    assert!(
        matches!(
            e,
            QuantError::BadShape {
                expected: 34,
                actual: 33,
                ..
            }
        ),
        "{e}"
    );
    let e = k
        .dequantize(GgmlType::Q4_0, &[0u8; 17], &mut [0.0; 32])
        .expect_err("partial");
    assert!(matches!(e, QuantError::BadShape { .. }), "{e}");
    let e = k
        .quantize_activations(GgmlType::Q4_0, &[0.0; 32], &mut [0u8; 18])
        .expect_err("not an activation type");
    assert!(
        matches!(e, QuantError::NotAnActivationType { type_name: "Q4_0" }),
        "{e}"
    );
    let e = k
        .quantize_activations(GgmlType::Q8_K, &[0.0; 32], &mut [0u8; 292])
        .expect_err("partial block");
    assert!(
        matches!(e, QuantError::PartialBlock { elems: 32, .. }),
        "{e}"
    );
}

#[test]
fn an_empty_batch_is_a_no_op() {
    let data = random_matrix(GgmlType::Q8_0, 4, 64, 1);
    let w = QMatrix::new(GgmlType::Q8_0, 4, 64, &data).expect("matrix");
    let mut y: Vec<f32> = vec![];
    matmul(&w, &[], 0, &mut y, &mut MatmulScratch::default());
}

#[test]
fn dequantize_row_reads_only_the_blocks_it_needs() {
    let data = random_matrix(GgmlType::Q8_0, 3, 64, 9);
    let whole = dequant(GgmlType::Q8_0, &data);
    let mut first = vec![0.0f32; 64];
    kiln_quant::dequantize_row(GgmlType::Q8_0, &data, &mut first).expect("prefix");
    assert_eq!(first, whole[..64]);
    let e = kiln_quant::dequantize_row(GgmlType::Q8_0, &data[..30], &mut first).expect_err("short");
    assert!(
        matches!(
            e,
            QuantError::BadShape {
                expected: 68,
                actual: 30,
                ..
            }
        ),
        "{e}"
    );
    let e =
        kiln_quant::dequantize_row(GgmlType::Q8_0, &data, &mut first[..40]).expect_err("partial");
    assert!(
        matches!(e, QuantError::PartialBlock { elems: 40, .. }),
        "{e}"
    );
    let e =
        kiln_quant::dequantize_row(GgmlType::IQ3_XXS, &data, &mut first).expect_err("unsupported");
    assert!(
        matches!(e, QuantError::UnsupportedType { type_id: 18, .. }),
        "{e}"
    );
}
