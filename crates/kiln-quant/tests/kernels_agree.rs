//! One runner feeds every kernel table (scalar, AVX2, …) the same inputs across lengths and
//! random data; the scalar table is the oracle.
//!
//! * activation quantizers: bytes identical to scalar;
//! * dequantizers: values identical to scalar (bit for bit);
//! * dot: equal to scalar bit for bit (one canonical summation order, see `scalar::util`);
//! * dot4 / dot8 / dot8r2 / dot8r4 (GEMM) and dotr4 (GEMV): equal to the same table's dot bit
//!   for bit.

mod common;

use common::*;
use kiln_quant::{GgmlType, Kernels, vec_dot_type};
use proptest::prelude::*;

/// Block counts per row: single blocks, odd counts, the model widths (576/32 = 18,
/// 640/32 = 20, 896/32 = 28, 2048/256 = 8) and a long row.
const BLOCK_COUNTS: &[usize] = &[1, 2, 3, 5, 8, 18, 20, 28, 67];

/// One input for a weight type: a row of weights and a row of activations of matching length.
struct Case {
    ty: GgmlType,
    seed: u64,
    w: Vec<u8>,
    x: Vec<f32>,
}

/// Every (type, length, seed) combination the runner feeds the tables.
fn cases(ty: GgmlType, seeds: u64) -> impl Iterator<Item = Case> {
    BLOCK_COUNTS.iter().flat_map(move |&nb| {
        // Float "blocks" are single elements: scale them up to comparable lengths (and tails
        // that are not multiples of the 32-wide SIMD steps).
        let nb = if ty.block_elems() == 1 {
            nb * 32 + nb % 7
        } else {
            nb
        };
        (0..seeds).map(move |seed| {
            let mut rng = SeedRng::new(seed * 1000 + nb as u64 + ty.id() as u64 * 77);
            let w = random_weights(ty, nb, &mut rng);
            let x = random_acts(elems(ty, nb), &mut rng);
            Case { ty, seed, w, x }
        })
    })
}

fn check_quantize_matches_scalar(k: &Kernels, act: GgmlType, x: &[f32], what: &str) {
    let want = quantize(scalar(), act, x);
    let got = quantize(k, act, x);
    assert!(
        got == want,
        "{} quantize {act} differs from scalar ({what})",
        k.isa()
    );
}

#[test]
fn every_isa_quantizes_activations_to_the_same_bytes_as_scalar() {
    for act in act_types() {
        let be = act.block_elems().max(32);
        for &nb in BLOCK_COUNTS {
            let n = if act == GgmlType::Q8_K {
                256 * nb.div_ceil(8)
            } else {
                be * nb
            };
            for seed in 0..12 {
                let x = random_acts(n, &mut SeedRng::new(seed + 31 * nb as u64));
                for k in tables() {
                    check_quantize_matches_scalar(k, act, &x, &format!("n={n} seed={seed}"));
                }
            }
        }
    }
}

#[test]
fn activation_quantizers_agree_on_non_finite_and_extreme_values() {
    let specials = [
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::MAX,
        -f32::MAX,
        f32::MIN_POSITIVE,
        1e-40,
        -0.0,
        65504.0,
        65520.0,
    ];
    for (i, &s) in specials.iter().enumerate() {
        let mut x = random_acts(512, &mut SeedRng::new(i as u64));
        x[3] = s;
        x[300] = s;
        for act in act_types() {
            if act == GgmlType::Q8_K && s.is_nan() {
                continue; // NaN in a Q8_K block: ggml's reference output is garbage, ours too
            }
            for k in tables() {
                check_quantize_matches_scalar(k, act, &x, &format!("special {s}"));
            }
        }
    }
}

#[test]
fn q8_k_quantizers_agree_on_blocks_of_tiny_values() {
    // amax subnormal: -127 / max overflows to infinity and ggml's nearest_int trick yields
    // out-of-range values that the int8 store truncates; every ISA must do the same.
    let mut rng = SeedRng::new(77);
    let mut x: Vec<f32> = (0..512).map(|_| rng.normal() * 1e-39).collect();
    x[300] = 1e-41;
    for k in tables() {
        check_quantize_matches_scalar(k, GgmlType::Q8_K, &x, "subnormal block");
    }
}

#[test]
fn every_isa_dequantizes_to_the_same_values_as_scalar() {
    for ty in weight_types() {
        for case in cases(ty, 6) {
            let want = dequant(ty, &case.w);
            for k in tables() {
                let mut got = vec![0.0f32; want.len()];
                k.dequantize(ty, &case.w, &mut got).expect("dequantize");
                let same = got
                    .iter()
                    .zip(&want)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(
                    same,
                    "{} dequantize {ty} differs (seed {})",
                    k.isa(),
                    case.seed
                );
            }
        }
    }
}

/// Fast dot vs scalar dot on the same quantized activations: the same bits.
fn check_dot(k: &Kernels, case: &Case) {
    let ty = case.ty;
    let act = vec_dot_type(ty).expect("supported");
    let a = quantize(scalar(), act, &case.x);
    let want = scalar().dot(ty, &case.w, &a).expect("dot");
    let got = k.dot(ty, &case.w, &a).expect("dot");
    assert_eq!(
        got.to_bits(),
        want.to_bits(),
        "{} dot {ty}: {got} vs scalar {want} (n {}, seed {})",
        k.isa(),
        case.x.len(),
        case.seed
    );
}

#[test]
fn every_isa_dot_equals_scalar_bit_for_bit() {
    for ty in weight_types() {
        for case in cases(ty, 8) {
            for k in tables() {
                check_dot(k, &case);
            }
        }
    }
}

#[test]
fn dot4_equals_four_single_dots_bit_for_bit() {
    for ty in weight_types() {
        let act = vec_dot_type(ty).expect("supported");
        for case in cases(ty, 3) {
            let n = case.x.len();
            let mut rng = SeedRng::new(case.seed ^ 0xD07);
            let rows: Vec<Vec<u8>> = (0..4)
                .map(|_| quantize(scalar(), act, &random_acts(n, &mut rng)))
                .collect();
            let a4 = rows.concat();
            for k in tables() {
                let got = k.dot4(ty, &case.w, &a4).expect("dot4");
                for t in 0..4 {
                    let one = k.dot(ty, &case.w, &rows[t]).expect("dot");
                    assert_eq!(
                        got[t].to_bits(),
                        one.to_bits(),
                        "{} dot4 {ty} token {t}: {} vs dot {one}",
                        k.isa(),
                        got[t]
                    );
                }
            }
        }
    }
}

/// The two- and three-token kernels of `k` for `ty` against its single dots; whether it has
/// them.
fn check_dot23<const N: usize>(k: &Kernels, ty: GgmlType, w: &[u8], rows: &[Vec<u8>]) -> bool {
    let a = rows[..N].concat();
    let Some(got) = k.dot23::<N>(ty, w, &a).expect("dot23") else {
        return false;
    };
    for t in 0..N {
        let one = k.dot(ty, w, &rows[t]).expect("dot");
        assert_eq!(
            got[t].to_bits(),
            one.to_bits(),
            "{} dot{N} {ty} token {t}: {} vs dot {one}",
            k.isa(),
            got[t]
        );
    }
    true
}

#[test]
fn dot2_and_dot3_equal_single_dots_bit_for_bit() {
    let mut covered = Vec::new();
    for ty in weight_types() {
        let act = vec_dot_type(ty).expect("supported");
        for case in cases(ty, 3) {
            let n = case.x.len();
            let mut rng = SeedRng::new(case.seed ^ 0xD23);
            let rows: Vec<Vec<u8>> = (0..3)
                .map(|_| quantize(scalar(), act, &random_acts(n, &mut rng)))
                .collect();
            for k in tables() {
                let two = check_dot23::<2>(k, ty, &case.w, &rows);
                let three = check_dot23::<3>(k, ty, &case.w, &rows);
                assert_eq!(two, three, "{} {ty}: dot2 and dot3 come together", k.isa());
                if two {
                    covered.push((k.isa(), ty));
                }
            }
        }
    }
    // Any other token count is refused, naming what was wrong.
    let w = random_weights(GgmlType::Q8_0, 2, &mut SeedRng::new(7));
    let a = quantize(scalar(), GgmlType::Q8_0, &vec![0.5; 4 * 64]);
    let err = scalar()
        .dot23::<4>(GgmlType::Q8_0, &w, &a)
        .expect_err("four tokens");
    assert!(err.to_string().contains("two- or three-token"), "{err}");
    // The AVX2 table has them for the types of the shipped models and the 16-bit floats.
    if let Some(k) = kiln_quant::kernels_for(kiln_quant::Isa::Avx2) {
        for ty in [
            GgmlType::Q4_0,
            GgmlType::Q4_1,
            GgmlType::Q5_0,
            GgmlType::Q8_0,
            GgmlType::Q4_K,
            GgmlType::Q6_K,
            GgmlType::F16,
            GgmlType::BF16,
        ] {
            assert!(
                covered.contains(&(k.isa(), ty)),
                "AVX2 dot2/dot3 of {ty} not checked"
            );
        }
    }
}

#[test]
fn dot8_equals_eight_single_dots_bit_for_bit() {
    for ty in weight_types() {
        let act = vec_dot_type(ty).expect("supported");
        for case in cases(ty, 3) {
            let n = case.x.len();
            let mut rng = SeedRng::new(case.seed ^ 0xD08);
            let rows: Vec<Vec<u8>> = (0..8)
                .map(|_| quantize(scalar(), act, &random_acts(n, &mut rng)))
                .collect();
            let a8 = rows.concat();
            for k in tables() {
                let packed = k.dot8(ty, &case.w, &a8).expect("dot8");
                let unpacked = k.dot8_unpacked(ty, &case.w, &a8).expect("dot8 unpacked");
                for (name, got) in [
                    ("dot8", Some(packed)),
                    ("dot8 over unpacked rows", unpacked),
                ] {
                    let Some(got) = got else { continue };
                    for t in 0..8 {
                        let one = k.dot(ty, &case.w, &rows[t]).expect("dot");
                        assert_eq!(
                            got[t].to_bits(),
                            one.to_bits(),
                            "{} {name} {ty} token {t}: {} vs dot {one}",
                            k.isa(),
                            got[t]
                        );
                    }
                }
            }
        }
    }
}

/// A multi-row GEMM tile (`tile`: `R` weight rows laid end to end, eight activation rows)
/// against the same table's single dots of every row and token, bit for bit.
fn check_tile<const R: usize>(
    name: &str,
    seeds: u64,
    tile: impl Fn(&Kernels, GgmlType, &[u8], &[u8]) -> [[f32; 8]; R],
) {
    for ty in weight_types() {
        let act = vec_dot_type(ty).expect("supported");
        for case in cases(ty, seeds) {
            let n = case.x.len();
            let mut rng = SeedRng::new(case.seed ^ (0xD080 + R as u64));
            let nb = case.w.len() / ty.block_bytes();
            let w: Vec<u8> = std::iter::once(case.w.clone())
                .chain((1..R).map(|_| random_weights(ty, nb, &mut rng)))
                .collect::<Vec<_>>()
                .concat();
            let rows: Vec<Vec<u8>> = (0..8)
                .map(|_| quantize(scalar(), act, &random_acts(n, &mut rng)))
                .collect();
            let a8 = rows.concat();
            let rb = case.w.len();
            for k in tables() {
                let got = tile(k, ty, &w, &a8);
                for (r, got) in got.iter().enumerate() {
                    for (t, g) in got.iter().enumerate() {
                        let one = k.dot(ty, &w[r * rb..(r + 1) * rb], &rows[t]).expect("dot");
                        assert_eq!(
                            g.to_bits(),
                            one.to_bits(),
                            "{} {name} {ty} row {r} token {t}: {g} vs dot {one}",
                            k.isa()
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn dot8r2_equals_sixteen_single_dots_bit_for_bit() {
    check_tile::<2>("dot8r2", 3, |k, ty, w, a| {
        k.dot8r2(ty, w, a).expect("dot8r2")
    });
}

#[test]
fn dot8r4_equals_thirty_two_single_dots_bit_for_bit() {
    check_tile::<4>("dot8r4", 2, |k, ty, w, a| {
        k.dot8r4(ty, w, a).expect("dot8r4")
    });
}

#[test]
fn dot8r4_over_laid_out_rows_equals_thirty_two_single_dots_bit_for_bit() {
    // Types with both four-row tiles (AVX-512 Q8_0) run this one for many tokens; for the
    // others it is the tile `dot8r4` answers with, or four `dot8` calls.
    check_tile::<4>("dot8r4 laid out", 2, |k, ty, w, a| {
        match k.dot8r4_laid_out(ty, w, a).expect("dot8r4_laid_out") {
            Some(out) => out,
            None => k.dot8r4(ty, w, a).expect("dot8r4"),
        }
    });
}

#[test]
fn dotr4_equals_four_single_dots_bit_for_bit() {
    for ty in weight_types() {
        let act = vec_dot_type(ty).expect("supported");
        for case in cases(ty, 3) {
            let mut rng = SeedRng::new(case.seed ^ 0x4242);
            let rows: Vec<Vec<u8>> = (0..4)
                .map(|_| random_weights(ty, case.w.len() / ty.block_bytes(), &mut rng))
                .collect();
            let w4 = rows.concat();
            let a = quantize(scalar(), act, &case.x);
            for k in tables() {
                let got = k.dotr4(ty, &w4, &a).expect("dotr4");
                for r in 0..4 {
                    let one = k.dot(ty, &rows[r], &a).expect("dot");
                    assert_eq!(
                        got[r].to_bits(),
                        one.to_bits(),
                        "{} dotr4 {ty} row {r}",
                        k.isa()
                    );
                }
            }
        }
    }
}

#[test]
fn q4_1_dot_uses_the_precomputed_block_sum() {
    // With q = 0 everywhere, x = m, so the dot is sum(m * s) over blocks: the Q8_1 `s`.
    let mut w = random_weights(GgmlType::Q4_1, 2, &mut SeedRng::new(5));
    for b in w.chunks_exact_mut(20) {
        b[4..].fill(0);
    }
    let x: Vec<f32> = (0..64).map(|i| i as f32 / 8.0).collect();
    for k in tables() {
        let a = quantize(k, GgmlType::Q8_1, &x);
        let ad = decode_act(GgmlType::Q8_1, &a);
        let m = weight_offsets(GgmlType::Q4_1, &w);
        let want: f64 = dequant(GgmlType::Q4_1, &w)
            .iter()
            .zip(&ad)
            .map(|(w, a)| *w as f64 * *a as f64)
            .sum();
        let got = k.dot(GgmlType::Q4_1, &w, &a).expect("dot") as f64;
        let tol = 1e-3
            * m.iter()
                .zip(&ad)
                .map(|(m, a)| (m * a).abs() as f64)
                .sum::<f64>();
        assert!((got - want).abs() <= tol, "{}: {got} vs {want}", k.isa());
    }
}

fn type_strategy() -> impl Strategy<Value = GgmlType> {
    prop::sample::select(weight_types())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn fast_dot_equals_scalar_dot(ty in type_strategy(), nb in 1usize..24, seed in any::<u64>(),
                                  scale in -6i32..6) {
        let nb = if ty.block_elems() == 1 { nb * 7 } else if ty.block_elems() == 256 { nb.div_ceil(4) } else { nb };
        let mut rng = SeedRng::new(seed);
        let w = random_weights(ty, nb, &mut rng);
        let s = 2f32.powi(scale);
        let x: Vec<f32> = random_acts(elems(ty, nb), &mut rng).iter().map(|v| v * s).collect();
        let case = Case { ty, seed, w, x };
        for k in tables() {
            check_dot(k, &case);
        }
    }

    #[test]
    fn fast_quantizers_equal_scalar(act in prop::sample::select(act_types()),
                                    x in prop::collection::vec(prop_oneof![
                                        4 => -3.0f32..3.0,
                                        1 => (-127i32..=127).prop_map(|v| v as f32 + 0.5),
                                        1 => Just(0.0f32),
                                        1 => -1.0e4f32..1.0e4,
                                    ], 512)) {
        for k in tables() {
            check_quantize_matches_scalar(k, act, &x, "proptest");
        }
    }

    #[test]
    fn fast_dequantizers_equal_scalar(ty in type_strategy(), nb in 1usize..10, seed in any::<u64>()) {
        let w = random_weights(ty, nb, &mut SeedRng::new(seed));
        let want = dequant(ty, &w);
        for k in tables() {
            let mut got = vec![0.0f32; want.len()];
            k.dequantize(ty, &w, &mut got).expect("dequantize");
            prop_assert!(got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()),
                "{} {ty}", k.isa());
        }
    }
}

/// An activation row of `act` made of arbitrary quant bytes (so `-128`, which quantization
/// almost never produces, is frequent, and Q8_K's `bsums` need not match its `qs`) with sane
/// scales.
fn arbitrary_act_row(act: GgmlType, n_blocks: usize, rng: &mut SeedRng) -> Vec<u8> {
    let bb = act.block_bytes();
    let mut v = rng.bytes(n_blocks * bb);
    for b in v.chunks_exact_mut(bb) {
        for q in b.iter_mut() {
            if rng.below(4) == 0 {
                *q = 0x80; // -128
            }
        }
        let scale = 0.001 + rng.unit() * 0.05;
        let h = |x: f32| half::f16::from_f32(x).to_bits().to_le_bytes();
        match act {
            GgmlType::Q8_0 => b[0..2].copy_from_slice(&h(scale)),
            GgmlType::Q8_1 => {
                b[0..2].copy_from_slice(&h(scale));
                b[2..4].copy_from_slice(&h(scale * (rng.unit() - 0.5) * 64.0));
            }
            GgmlType::Q8_K => b[0..4].copy_from_slice(&scale.to_le_bytes()),
            other => panic!("not a quantized activation type: {other}"),
        }
    }
    v
}

#[test]
fn every_isa_dot_equals_scalar_on_arbitrary_activation_bytes() {
    // Quantized activations hold -128 only for non-finite inputs; the sign trick of ggml's
    // AVX2 code treats it specially, and every ISA must reproduce that (dot, dotr4, dot4, dot8,
    // dot8r4 over rows as stored and laid out).
    for ty in weight_types().into_iter().filter(|t| t.block_elems() > 1) {
        let act = vec_dot_type(ty).expect("supported");
        for (seed, nb) in [(1u64, 1usize), (2, 3), (3, 8)] {
            let mut rng = SeedRng::new(seed * 7919 + ty.id() as u64);
            let wrows: Vec<Vec<u8>> = (0..4).map(|_| random_weights(ty, nb, &mut rng)).collect();
            let a_blocks = nb * ty.block_elems() / act.block_elems();
            let arows: Vec<Vec<u8>> = (0..8)
                .map(|_| arbitrary_act_row(act, a_blocks, &mut rng))
                .collect();
            let want: Vec<f32> = (0..8)
                .map(|t| scalar().dot(ty, &wrows[0], &arows[t]).expect("dot"))
                .collect();
            let want_rows: Vec<f32> = (0..4)
                .map(|r| scalar().dot(ty, &wrows[r], &arows[0]).expect("dot"))
                .collect();
            for k in tables() {
                let isa = k.isa();
                for t in 0..4 {
                    let got = k.dot(ty, &wrows[0], &arows[t]).expect("dot");
                    assert_eq!(got.to_bits(), want[t].to_bits(), "{isa} dot {ty} (nb {nb})");
                }
                let got4 = k.dot4(ty, &wrows[0], &arows[..4].concat()).expect("dot4");
                let got8 = k.dot8(ty, &wrows[0], &arows.concat()).expect("dot8");
                for (t, g) in got8.iter().enumerate() {
                    assert_eq!(g.to_bits(), want[t].to_bits(), "{isa} dot8 {ty}");
                }
                let got8r4 = k
                    .dot8r4(ty, &wrows.concat(), &arows.concat())
                    .expect("dot8r4");
                let laid_out = k
                    .dot8r4_laid_out(ty, &wrows.concat(), &arows.concat())
                    .expect("dot8r4_laid_out");
                for (r, got) in got8r4.iter().enumerate() {
                    for (t, g) in got.iter().enumerate() {
                        let one = scalar().dot(ty, &wrows[r], &arows[t]).expect("dot");
                        assert_eq!(g.to_bits(), one.to_bits(), "{isa} dot8r4 {ty} r{r} t{t}");
                        if let Some(l) = laid_out {
                            assert_eq!(
                                l[r][t].to_bits(),
                                one.to_bits(),
                                "{isa} dot8r4 laid out {ty} r{r} t{t}"
                            );
                        }
                    }
                }
                let gotr4 = k.dotr4(ty, &wrows.concat(), &arows[0]).expect("dotr4");
                for i in 0..4 {
                    assert_eq!(got4[i].to_bits(), want[i].to_bits(), "{isa} dot4 {ty}");
                    assert_eq!(
                        gotr4[i].to_bits(),
                        want_rows[i].to_bits(),
                        "{isa} dotr4 {ty}"
                    );
                }
            }
        }
    }
}
