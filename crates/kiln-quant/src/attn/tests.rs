//! One runner feeds every ISA's attention kernels the same inputs (dimensions, page sizes,
//! page orders, key ranges, tails) and demands the scalar oracle's bits.

use half::f16;
use proptest::prelude::*;

use super::{AttnKernels, SCALAR, attn_kernels_for, store_row};
use crate::isa::Isa;
use crate::kernels_for;

/// Every table this machine can run besides the oracle.
fn fast_tables() -> Vec<&'static AttnKernels> {
    Isa::ALL
        .into_iter()
        .filter(|&i| i != Isa::Scalar)
        .filter_map(attn_kernels_for)
        .collect()
}

/// A deterministic pseudo-random stream (xorshift) of values of roughly unit size, with
/// occasional large, tiny and zero values.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        let u = (self.0 >> 40) as f32 / (1u64 << 24) as f32;
        match self.0 % 29 {
            0 => 0.0,
            1 => (u - 0.5) * 300.0,
            2 => (u - 0.5) * 1e-6,
            _ => (u - 0.5) * 4.0,
        }
    }

    fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.next()).collect()
    }
}

/// Shuffled page offsets: `n_pages` pages of `page` elements scattered in an arena with one
/// spare page, so a kernel that ignores the table reads the wrong data.
fn page_table(n_pages: usize, page: usize, seed: u64) -> (Vec<usize>, usize) {
    let mut order: Vec<usize> = (0..=n_pages).collect();
    let mut s = seed | 1;
    for i in (1..order.len()).rev() {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        order.swap(i, (s >> 33) as usize % (i + 1));
    }
    (
        order[..n_pages].iter().map(|&o| o * page).collect(),
        (n_pages + 1) * page,
    )
}

fn check_case(hd: usize, dv: usize, bs: usize, n_pages: usize, seed: u64) {
    let mut g = Gen(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut q = g.vec(hd);
    let (pages, arena) = page_table(n_pages, hd * bs, seed);
    let k32 = g.vec(arena);
    let k16: Vec<f16> = k32.iter().map(|&x| f16::from_f32(x)).collect();
    let (vpages, varena) = page_table(n_pages, dv * bs, seed ^ 0xABCD);
    let v32 = g.vec(varena);
    let v16: Vec<f16> = v32.iter().map(|&x| f16::from_f32(x)).collect();
    let scale = 0.125 + (seed % 7) as f32 * 0.01;

    let mut q16 = vec![0.0; hd];
    SCALAR.round_f16(&q, &mut q16);
    let mut want16 = vec![0.0; n_pages * bs];
    SCALAR.scores_f16(&q16, &k16, &pages, bs, scale, &mut want16);
    let mut want32 = vec![0.0; n_pages * bs];
    SCALAR.scores_f32(&q, &k32, &pages, bs, scale, &mut want32);
    // An f32 query against f16 keys (the arithmetic Kiln's attention uses).
    let mut want16q = vec![0.0; n_pages * bs];
    SCALAR.scores_f16(&q, &k16, &pages, bs, scale, &mut want16q);

    // Weights as the softmax would produce them: a few rescales among ordinary steps.
    let n_keys = n_pages * bs;
    let first = (seed as usize) % (n_keys / 2 + 1);
    let n = n_keys - first - (seed as usize / 3) % (n_keys - first + 1);
    let ms: Vec<f32> = (0..n)
        .map(|i| {
            if i % 5 == 0 {
                0.5 + g.next().abs() * 0.1
            } else {
                1.0
            }
        })
        .collect();
    let vs: Vec<f32> = (0..n).map(|_| g.next().abs().min(1.0)).collect();
    let acc0: Vec<f32> = g.vec(dv);
    let mut want_a16: Vec<f16> = acc0.iter().map(|&x| f16::from_f32(x)).collect();
    SCALAR.accum_f16(&mut want_a16, &v16, &vpages, bs, first, &ms, &vs);
    let mut want_a32 = acc0.clone();
    SCALAR.accum_f32(&mut want_a32, &v32, &vpages, bs, first, &ms, &vs);
    let mut want_a16_32 = acc0.clone();
    SCALAR.accum_f16_f32(&mut want_a16_32, &v16, &vpages, bs, first, &ms, &vs);

    for k in fast_tables() {
        let mut r = vec![0.0; hd];
        k.round_f16(&q, &mut r);
        assert_eq!(bits(&r), bits(&q16), "{} round_f16 hd {hd}", k.isa());
        let mut got = vec![0.0; n_pages * bs];
        k.scores_f16(&q16, &k16, &pages, bs, scale, &mut got);
        assert_eq!(
            bits(&got),
            bits(&want16),
            "{} scores_f16 hd {hd} bs {bs}",
            k.isa()
        );
        k.scores_f16(&q, &k16, &pages, bs, scale, &mut got);
        assert_eq!(
            bits(&got),
            bits(&want16q),
            "{} scores_f16 (f32 query) hd {hd} bs {bs}",
            k.isa()
        );
        k.scores_f32(&q, &k32, &pages, bs, scale, &mut got);
        assert_eq!(
            bits(&got),
            bits(&want32),
            "{} scores_f32 hd {hd} bs {bs}",
            k.isa()
        );
        let mut a16: Vec<f16> = acc0.iter().map(|&x| f16::from_f32(x)).collect();
        k.accum_f16(&mut a16, &v16, &vpages, bs, first, &ms, &vs);
        assert_eq!(
            a16.iter().map(|h| h.to_bits()).collect::<Vec<_>>(),
            want_a16.iter().map(|h| h.to_bits()).collect::<Vec<_>>(),
            "{} accum_f16 dv {dv} bs {bs} keys {first}+{n}",
            k.isa()
        );
        let mut a32 = acc0.clone();
        k.accum_f32(&mut a32, &v32, &vpages, bs, first, &ms, &vs);
        assert_eq!(bits(&a32), bits(&want_a32), "{} accum_f32 dv {dv}", k.isa());
        let mut a32 = acc0.clone();
        k.accum_f16_f32(&mut a32, &v16, &vpages, bs, first, &ms, &vs);
        assert_eq!(
            bits(&a32),
            bits(&want_a16_32),
            "{} accum_f16_f32 dv {dv} bs {bs} keys {first}+{n}",
            k.isa()
        );
    }
    q.clear();
}

fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

#[test]
fn simd_kernels_equal_the_scalar_oracle_across_shapes() {
    let mut seed = 1;
    for hd in [1, 7, 8, 31, 32, 64, 80, 128, 256] {
        for bs in [1, 3, 8, 15, 16, 24, 32] {
            for n_pages in [1, 2, 5] {
                check_case(hd, hd, bs, n_pages, seed);
                check_case(hd, (hd * 3).div_ceil(2), bs, n_pages, seed + 1);
                seed += 2;
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn simd_kernels_equal_the_scalar_oracle_on_random_shapes(
        hd in 1usize..140, dv in 1usize..140, bs in 1usize..40, n_pages in 1usize..6, seed in any::<u64>()
    ) {
        check_case(hd, dv, bs, n_pages, seed);
    }
}

/// The many-row kernels against the oracle: `rows` queries (or accumulators) over the same
/// pages, each row's result the one-row oracle's bits.
fn check_rows_case(rows: usize, hd: usize, dv: usize, bs: usize, n_pages: usize, seed: u64) {
    let mut g = Gen(seed.wrapping_mul(0x2545_F491_4F6C_DD1D) | 1);
    let q = g.vec(rows * hd);
    let (pages, arena) = page_table(n_pages, hd * bs, seed);
    let k32 = g.vec(arena);
    let k16: Vec<f16> = k32.iter().map(|&x| f16::from_f32(x)).collect();
    let (vpages, varena) = page_table(n_pages, dv * bs, seed ^ 0x5A5A);
    let v32 = g.vec(varena);
    let v16: Vec<f16> = v32.iter().map(|&x| f16::from_f32(x)).collect();
    let scale = 0.09 + (seed % 5) as f32 * 0.01;
    let n_keys = n_pages * bs;

    let mut one16 = vec![0.0; rows * n_keys];
    let mut one32 = vec![0.0; rows * n_keys];
    for r in 0..rows {
        let qr = &q[r * hd..(r + 1) * hd];
        let o = r * n_keys..(r + 1) * n_keys;
        SCALAR.scores_f16(qr, &k16, &pages, bs, scale, &mut one16[o.clone()]);
        SCALAR.scores_f32(qr, &k32, &pages, bs, scale, &mut one32[o]);
    }
    // The one-row arithmetic's scores: f16-rounded queries, ggml's `vec_dot_f16` order.
    let mut q16 = vec![0.0; rows * hd];
    SCALAR.round_f16(&q, &mut q16);
    let mut split = vec![0.0; rows * n_keys];
    SCALAR.scores_rows_f16_split(&q16, hd, &k16, &pages, bs, scale, &mut split);

    // Keys `first..first + n` with a row stride longer than `n`; each row its own weights.
    let first = (seed as usize) % (n_keys / 2 + 1);
    let n = n_keys - first - (seed as usize / 5) % (n_keys - first + 1);
    let stride = n + 3;
    let ms: Vec<f32> = (0..rows * stride)
        .map(|i| {
            if i % 7 == (seed as usize) % 7 {
                0.25 + g.next().abs() * 0.1
            } else {
                1.0
            }
        })
        .collect();
    let vs: Vec<f32> = (0..rows * stride)
        .map(|_| g.next().abs().min(1.0))
        .collect();
    let acc0 = g.vec(rows * dv);
    let mut want16: Vec<f16> = acc0.iter().map(|&x| f16::from_f32(x)).collect();
    let mut want32 = acc0.clone();
    let mut want16_32 = acc0.clone();
    for r in 0..rows {
        let (a, w) = (r * dv..(r + 1) * dv, r * stride..r * stride + n);
        SCALAR.accum_f16(
            &mut want16[a.clone()],
            &v16,
            &vpages,
            bs,
            first,
            &ms[w.clone()],
            &vs[w.clone()],
        );
        SCALAR.accum_f32(
            &mut want32[a.clone()],
            &v32,
            &vpages,
            bs,
            first,
            &ms[w.clone()],
            &vs[w.clone()],
        );
        SCALAR.accum_f16_f32(
            &mut want16_32[a],
            &v16,
            &vpages,
            bs,
            first,
            &ms[w.clone()],
            &vs[w],
        );
    }

    let what = format!("rows {rows} hd {hd} dv {dv} bs {bs} pages {n_pages} keys {first}+{n}");
    for k in std::iter::once(&SCALAR).chain(fast_tables()) {
        let isa = k.isa();
        let mut got = vec![0.0; rows * n_keys];
        k.scores_rows_f16(&q, hd, &k16, &pages, bs, scale, &mut got);
        assert_eq!(bits(&got), bits(&one16), "{isa} scores_rows_f16 {what}");
        k.scores_rows_f16_split(&q16, hd, &k16, &pages, bs, scale, &mut got);
        assert_eq!(
            bits(&got),
            bits(&split),
            "{isa} scores_rows_f16_split {what}"
        );
        k.scores_rows_f32(&q, hd, &k32, &pages, bs, scale, &mut got);
        assert_eq!(bits(&got), bits(&one32), "{isa} scores_rows_f32 {what}");
        let mut a16: Vec<f16> = acc0.iter().map(|&x| f16::from_f32(x)).collect();
        k.accum_rows_f16(&mut a16, dv, &v16, &vpages, bs, first, n, &ms, &vs, stride);
        assert_eq!(
            a16.iter().map(|h| h.to_bits()).collect::<Vec<_>>(),
            want16.iter().map(|h| h.to_bits()).collect::<Vec<_>>(),
            "{isa} accum_rows_f16 {what}"
        );
        let mut a32 = acc0.clone();
        k.accum_rows_f32(&mut a32, dv, &v32, &vpages, bs, first, n, &ms, &vs, stride);
        assert_eq!(bits(&a32), bits(&want32), "{isa} accum_rows_f32 {what}");
        let mut a32 = acc0.clone();
        k.accum_rows_f16_f32(&mut a32, dv, &v16, &vpages, bs, first, n, &ms, &vs, stride);
        assert_eq!(
            bits(&a32),
            bits(&want16_32),
            "{isa} accum_rows_f16_f32 {what}"
        );
    }
}

#[test]
fn many_row_kernels_equal_the_one_row_oracle_row_by_row() {
    let mut seed = 3;
    // Rows: one, partial blocks, whole blocks, whole blocks and a remainder (GQA groups of
    // 1 to 8 query heads, times tokens), for blocks of four and of eight rows. Dimensions
    // and page sizes: whole 64-, 32- and 16-lane register blocks, their remainders, and
    // shapes no register block covers.
    for rows in [1, 2, 3, 4, 5, 6, 7, 8, 13, 16] {
        let dims = [
            (64, 64),
            (128, 128),
            (256, 256),
            (80, 80),
            (96, 48),
            (40, 24),
            (7, 9),
        ];
        for (hd, dv) in dims {
            for (bs, n_pages) in [(16, 1), (16, 9), (32, 3), (8, 3), (5, 4)] {
                check_rows_case(rows, hd, dv, bs, n_pages, seed);
                seed += 1;
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn many_row_kernels_equal_the_oracle_on_random_shapes(
        rows in 1usize..12, hd in 1usize..140, dv in 1usize..140, bs in 1usize..40,
        n_pages in 1usize..6, seed in any::<u64>()
    ) {
        check_rows_case(rows, hd, dv, bs, n_pages, seed);
    }
}

#[test]
fn scores_are_sequential_sums_of_exact_products() {
    // A case where the order matters: 1 + 2^-24 + 2^-24 … rounds differently from a tree.
    let hd = 8;
    let q = [1.0f32; 8];
    let vals = [1.0f32, 1e-4, 1e-4, 1e-4, 1e-4, 1e-4, 1e-4, -1.0];
    let k: Vec<f16> = vals.iter().map(|&x| f16::from_f32(x)).collect();
    let mut out = [0.0f32];
    SCALAR.scores_f16(&q, &k, &[0], 1, 1.0, &mut out);
    let mut want = -0.0f32;
    for x in &k {
        want += x.to_f32();
    }
    assert_eq!(out[0].to_bits(), want.to_bits());
    assert_eq!(hd, k.len());
}

#[test]
fn every_isa_with_matmul_kernels_has_attention_kernels() {
    for isa in Isa::ALL {
        assert_eq!(
            attn_kernels_for(isa).is_some(),
            kernels_for(isa).is_some(),
            "{isa}"
        );
    }
    #[cfg(target_arch = "x86_64")]
    assert_eq!(
        !fast_tables().is_empty(),
        Isa::Avx2.cpu_has(),
        "the oracle is compared"
    );
    // Each kernel is the table's ISA's own or one of an ISA the table's implies (AVX-512
    // takes AVX2's one-row kernels), never one the CPU might lack.
    for k in fast_tables() {
        let implied = |i: Isa| i == k.isa() || (k.isa() == Isa::Avx512 && i == Isa::Avx2);
        assert!(
            k.implementations()
                .iter()
                .all(|&(_, i)| implied(i) && i.cpu_has()),
            "{}: {:?}",
            k.isa(),
            k.implementations()
        );
    }
}

#[test]
fn stored_rows_round_trip_within_each_types_step() {
    let mut g = Gen(7);
    for ty in super::KV_STORE_TYPES {
        let x = g.vec(256);
        let mut bytes = vec![0u8; 256 / ty.block_elems() * ty.block_bytes()];
        store_row(ty, &x, &mut bytes).expect("store");
        let mut back = vec![0.0f32; 256];
        crate::dequantize_row(ty, &bytes, &mut back).expect("dequantize");
        for (blk, (xs, ys)) in x.chunks(32).zip(back.chunks(32)).enumerate() {
            let amax = xs.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let range = xs.iter().fold(f32::MIN, |m, &v| m.max(v))
                - xs.iter().fold(f32::MAX, |m, &v| m.min(v));
            // Half a quantization step, plus the f16 rounding of the scale (and minimum)
            // times the largest code; Q4_0 / Q5_0 clamp the code of `-max` one step short.
            let f16_scale = amax * 2e-3;
            let bound = match ty.name() {
                "F32" => 0.0,
                "F16" => amax * 2f32.powi(-11),
                "Q8_0" => amax / 127.0 * 0.5 + f16_scale,
                "Q4_0" => amax / 8.0 * 1.5 + f16_scale,
                "Q5_0" => amax / 16.0 * 1.5 + f16_scale,
                "Q4_1" => range / 15.0 * 0.5 + f16_scale,
                other => panic!("no bound for {other}"),
            };
            for (a, b) in xs.iter().zip(ys) {
                assert!(
                    (a - b).abs() <= bound,
                    "{} block {blk}: {a} -> {b} (bound {bound})",
                    ty.name()
                );
            }
        }
    }
}

#[test]
fn storing_an_unsupported_type_is_an_error() {
    let e = store_row(kiln_format::GgmlType::Q6_K, &[0.0; 256], &mut [0u8; 210]);
    assert!(e.is_err());
    let e = store_row(kiln_format::GgmlType::Q8_0, &[0.0; 33], &mut [0u8; 34]);
    assert!(e.is_err());
}

#[test]
fn exp_is_within_two_ulp_of_the_true_exponential() {
    // Every 97th float in the range (plus the ends), against f64's exp rounded to f32.
    let mut worst = 0u32;
    let mut x = super::scalar::EXP_LO;
    while x <= super::scalar::EXP_HI {
        let got = super::exp(x);
        let want = (x as f64).exp() as f32;
        if want.is_normal() {
            worst = worst.max(got.to_bits().abs_diff(want.to_bits()));
        } else {
            assert!((got - want).abs() <= f32::MIN_POSITIVE, "exp({x})");
        }
        x = f32::from_bits(if x < 0.0 {
            x.to_bits().saturating_sub(97).max(0x8000_0000)
        } else {
            x.to_bits() + 97
        });
        if x == -0.0 {
            x = 0.0;
        }
    }
    assert!(worst <= 2, "worst error {worst} ulp");
    assert_eq!(super::exp(0.0), 1.0);
    assert_eq!(super::exp(-1000.0), 0.0);
    assert_eq!(super::exp(f32::NEG_INFINITY), 0.0);
    assert_eq!(super::exp(100.0), f32::INFINITY);
    assert!(super::exp(f32::NAN).is_nan());
}

#[test]
fn softmax_weights_equal_the_oracle_on_every_isa() {
    let mut g = Gen(11);
    for n in [
        0usize, 1, 5, 8, 15, 16, 17, 24, 31, 32, 33, 64, 127, 128, 200,
    ] {
        for m0 in [f32::NEG_INFINITY, -3.0, 0.0, 40.0] {
            let s: Vec<f32> = (0..n).map(|_| g.next() * 8.0).collect();
            let mut want = vec![0.0; n];
            let (wm, wsum) = SCALAR.softmax_weights(&s, m0, &mut want);
            let max = s.iter().fold(m0, |a, &b| a.max(b));
            assert_eq!(wm, max + 0.0, "maximum n {n}");
            let plain: f64 = want.iter().map(|&w| w as f64).sum();
            assert!(
                (wsum as f64 - plain).abs() <= 1e-6 * plain.max(1.0),
                "sum n {n}"
            );
            for k in fast_tables() {
                let mut got = vec![0.0; n];
                let (m, sum) = k.softmax_weights(&s, m0, &mut got);
                let what = format!("{} n {n} m {m0}", k.isa());
                assert_eq!(m.to_bits(), wm.to_bits(), "{what} maximum");
                assert_eq!(sum.to_bits(), wsum.to_bits(), "{what} sum");
                assert_eq!(bits(&got), bits(&want), "{what} weights");
            }
        }
    }
}

#[test]
fn simd_exp_equals_the_scalar_exp_at_the_edges() {
    // Arguments around the cut-offs, rounding ties of `x·log2 e` and special values, through
    // the softmax kernel with a maximum of 0 (so each weight is `exp(s)`).
    let mut s = vec![
        0.0,
        -0.0,
        -1e-30,
        -87.0,
        -87.000_01,
        -86.999_99,
        88.0,
        88.000_01,
        -0.346_573_6,
        -0.346_573_57,
        -100.0,
        f32::NEG_INFINITY,
        -1.0,
        -0.5,
        -20.0,
        -60.0,
    ];
    s.extend((0..40).map(|i| -(i as f32) * std::f32::consts::LN_2 / 2.0));
    let mut want = vec![0.0; s.len()];
    for (w, &x) in want.iter_mut().zip(&s) {
        *w = super::exp(x);
    }
    for k in fast_tables() {
        let mut got = vec![0.0; s.len()];
        // The maximum is 88.00001 here, so feed each element alone with a maximum of 0.
        for (i, &x) in s.iter().enumerate() {
            let (m, _) = k.softmax_weights(&[x], 0.0, &mut got[i..i + 1]);
            if m == 0.0 {
                assert_eq!(got[i].to_bits(), want[i].to_bits(), "{} exp({x})", k.isa());
            }
        }
    }
}

#[test]
fn expf_is_within_one_ulp_of_the_true_exponential() {
    // glibc's algorithm is within 0.502 ulp: every result is one of the two floats around
    // the true value.
    let mut x = -103.0f32;
    while x < 88.7 {
        let got = super::expf(x) as f64;
        let exact = (x as f64).exp();
        let below = exact as f32;
        let (lo, hi) = if (below as f64) <= exact {
            (below, below.next_up())
        } else {
            (below.next_down(), below)
        };
        assert!(
            got == lo as f64 || got == hi as f64,
            "expf({x}) = {got}, true {exact}"
        );
        x += 0.0137;
    }
    assert_eq!(super::expf(f32::NEG_INFINITY), 0.0);
    assert_eq!(super::expf(f32::INFINITY), f32::INFINITY);
    assert!(super::expf(f32::NAN).is_nan());
    assert_eq!(super::expf(0.0), 1.0);
    assert_eq!(super::expf(-110.0), 0.0);
    assert_eq!(super::expf(-103.5).to_bits(), 1);
    assert_eq!(super::expf(89.0), f32::INFINITY);
}

#[test]
fn softmax_online_equals_the_oracle_on_every_isa() {
    let mut g = Gen(23);
    for n in [0usize, 1, 7, 15, 16, 17, 31, 32, 48, 100, 128, 257] {
        for (m0, sum0) in [
            (f32::NEG_INFINITY, 0.0),
            (0.5, 3.0),
            (40.0, 1.0),
            (-200.0, 2.0),
        ] {
            // Scores of unit size with occasional large, tiny and zero ones (new maxima,
            // differences beyond 80), plus some infinities.
            let mut s: Vec<f32> = (0..n).map(|_| g.next() * 3.0).collect();
            for (i, x) in s.iter_mut().enumerate() {
                if i % 37 == 5 {
                    *x = f32::NEG_INFINITY;
                }
            }
            let (mut wms, mut wvs) = (vec![0.0; n], vec![0.0; n]);
            let (wm, wsum) = SCALAR.softmax_online(&s, m0, sum0, &mut wms, &mut wvs);
            for k in fast_tables() {
                let (mut ms, mut vs) = (vec![7.0; n], vec![7.0; n]);
                let (m, sum) = k.softmax_online(&s, m0, sum0, &mut ms, &mut vs);
                let what = format!("{} n {n} m {m0}", k.isa());
                assert_eq!(m.to_bits(), wm.to_bits(), "{what} maximum");
                assert_eq!(sum.to_bits(), wsum.to_bits(), "{what} sum");
                assert_eq!(bits(&ms), bits(&wms), "{what} rescales");
                assert_eq!(bits(&vs), bits(&wvs), "{what} weights");
            }
        }
    }
}

#[test]
fn silu_mul_equals_the_oracle_on_every_isa() {
    let mut g = Gen(29);
    for n in [0usize, 1, 7, 8, 9, 16, 63, 100, 4864] {
        // Gates of a few units with occasional arguments beyond ±80, infinities and NaN
        // (the oracle's special cases), and ups of unit size.
        let mut gate: Vec<f32> = (0..n).map(|_| g.next() * 12.0).collect();
        let specials = [
            90.0,
            -95.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            -0.0,
        ];
        for (i, x) in gate.iter_mut().enumerate() {
            if i % 29 == 3 {
                *x = specials[i / 29 % specials.len()];
            }
        }
        let up: Vec<f32> = (0..n).map(|_| g.next()).collect();
        let mut want = gate.clone();
        SCALAR.silu_mul(&mut want, &up);
        for (w, (&x, &u)) in want.iter().zip(gate.iter().zip(&up)) {
            let direct = x / (1.0 + super::expf(-x)) * u;
            assert_eq!(w.to_bits(), direct.to_bits(), "oracle silu({x}) * {u}");
        }
        for k in fast_tables() {
            let mut got = gate.clone();
            k.silu_mul(&mut got, &up);
            assert_eq!(bits(&got), bits(&want), "{} silu_mul n {n}", k.isa());
        }
    }
}

#[test]
fn simd_expf_equals_the_scalar_expf_across_its_range() {
    // Every weight is `expf(s − 0)`: a dense sweep of `[-110, 0]` and every float bit
    // pattern near 0, through the vector path (no score exceeds the maximum of 0).
    let mut s: Vec<f32> = (0..1 << 20)
        .map(|i| -110.0 * i as f32 / (1 << 20) as f32)
        .collect();
    s.extend((0..1 << 16).map(|i| -f32::from_bits(i * 977)));
    let n = s.len();
    let (mut wms, mut wvs) = (vec![0.0; n], vec![0.0; n]);
    SCALAR.softmax_online(&s, 0.0, 0.0, &mut wms, &mut wvs);
    for (w, &x) in wvs.iter().zip(&s) {
        assert_eq!(w.to_bits(), super::expf(x).to_bits(), "oracle expf({x})");
    }
    for k in fast_tables() {
        let (mut ms, mut vs) = (vec![0.0; n], vec![0.0; n]);
        k.softmax_online(&s, 0.0, 0.0, &mut ms, &mut vs);
        for (i, (a, b)) in vs.iter().zip(&wvs).enumerate() {
            assert_eq!(a.to_bits(), b.to_bits(), "{} expf({})", k.isa(), s[i]);
        }
    }
}

/// ggml's `ggml_vec_dot_f16` order, written out for one key of 64 + 3 dimensions: lane sum
/// `l` is dimension `l` alone, the lanes fold as accumulators `j` and `j + 2`, then the two
/// results, then the sixteen lanes as `_mm512_reduce_add_ps` folds them, and the last three
/// dimensions are added in f64. One product of 2^24 and the rest 1: added one by one each 1
/// rounds away (ties to even), while the tree adds them up among themselves first.
#[test]
fn split_scores_sum_in_ggml_vec_dot_f16_order() {
    let hd = 67;
    let q: Vec<f32> = (0..hd).map(|d| if d == 0 { 4096.0 } else { 1.0 }).collect();
    let k: Vec<f16> = (0..hd)
        .map(|d| f16::from_f32(if d == 0 { 4096.0 } else { 1.0 }))
        .collect();
    let p: Vec<f32> = (0..hd).map(|d| q[d] * k[d].to_f32()).collect();
    let acc = |l: usize| (p[l] + p[l + 32]) + (p[l + 16] + p[l + 48]);
    let quarter = |i: usize| (acc(i) + acc(i + 8)) + (acc(i + 4) + acc(i + 12));
    let tree = (quarter(0) + quarter(2)) + (quarter(1) + quarter(3));
    let want = ((f64::from(tree) + f64::from(p[64])) + f64::from(p[65]) + f64::from(p[66])) as f32;
    let sequential: f32 = p.iter().sum();
    assert_ne!(
        want.to_bits(),
        sequential.to_bits(),
        "the case tells the orders apart"
    );
    // Dimension-major keys: one page of one slot.
    for kern in std::iter::once(&SCALAR).chain(fast_tables()) {
        let mut out = [0.0f32];
        kern.scores_rows_f16_split(&q, hd, &k, &[0], 1, 1.0, &mut out);
        assert_eq!(out[0].to_bits(), want.to_bits(), "{}", kern.isa());
    }
}
