//! Shared test helpers: a seeded generator, random blocks of every type, activation rows with
//! the awkward values (ties, outliers, zero blocks), the types (the crate's own lists) and
//! the kernel tables to feed.
#![allow(dead_code)]

use kiln_quant::{GgmlType, Isa, Kernels, kernels_for};

/// Every weight type kiln-quant supports: the crate's own list, so no type can be left out
/// of a test (one without a generator or budget below fails).
pub fn weight_types() -> Vec<GgmlType> {
    kiln_quant::supported_types()
}

/// Every activation type, from the crate's own list.
pub fn act_types() -> Vec<GgmlType> {
    kiln_quant::activation_types()
}

/// The kernel tables this machine can run, scalar first.
pub fn tables() -> Vec<&'static Kernels> {
    Isa::ALL.into_iter().filter_map(kernels_for).collect()
}

pub fn scalar() -> &'static Kernels {
    kernels_for(Isa::Scalar).expect("scalar kernels always exist")
}

/// SplitMix64: small, seeded, good enough for test data.
pub struct SeedRng(u64);

impl SeedRng {
    pub fn new(seed: u64) -> SeedRng {
        SeedRng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }
    /// Roughly normal (sum of uniforms).
    pub fn normal(&mut self) -> f32 {
        (0..4).map(|_| self.unit()).sum::<f32>() - 2.0
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
}

fn f16_bytes(x: f32) -> [u8; 2] {
    half::f16::from_f32(x).to_bits().to_le_bytes()
}

/// `n_blocks` random blocks of weight type `ty`: random quant bits, sane random scales.
pub fn random_weights(ty: GgmlType, n_blocks: usize, rng: &mut SeedRng) -> Vec<u8> {
    let bb = ty.block_bytes();
    let mut v = rng.bytes(n_blocks * bb);
    for b in v.chunks_exact_mut(bb) {
        let scale = 0.001 + rng.unit() * 0.05;
        match ty {
            GgmlType::F32 => b.copy_from_slice(&(rng.normal() * 0.1).to_le_bytes()),
            GgmlType::F16 => b.copy_from_slice(&f16_bytes(rng.normal() * 0.1)),
            GgmlType::BF16 => {
                let x = rng.normal() * 0.1;
                b.copy_from_slice(&((x.to_bits() >> 16) as u16).to_le_bytes())
            }
            GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => {
                b[0..2].copy_from_slice(&f16_bytes(scale))
            }
            GgmlType::Q4_1 => {
                b[0..2].copy_from_slice(&f16_bytes(scale));
                b[2..4].copy_from_slice(&f16_bytes(-8.0 * scale * (0.5 + rng.unit())));
            }
            GgmlType::Q4_K => {
                b[0..2].copy_from_slice(&f16_bytes(scale / 32.0));
                b[2..4].copy_from_slice(&f16_bytes(scale / 64.0));
            }
            GgmlType::Q6_K => b[208..210].copy_from_slice(&f16_bytes(scale / 64.0)),
            GgmlType::Q5_1 => {
                b[0..2].copy_from_slice(&f16_bytes(scale / 2.0));
                b[2..4].copy_from_slice(&f16_bytes(-8.0 * scale * (0.5 + rng.unit())));
            }
            GgmlType::Q2_K => {
                b[80..82].copy_from_slice(&f16_bytes(scale / 8.0));
                b[82..84].copy_from_slice(&f16_bytes(scale / 16.0));
            }
            GgmlType::Q3_K => b[108..110].copy_from_slice(&f16_bytes(scale / 32.0)),
            GgmlType::Q5_K => {
                b[0..2].copy_from_slice(&f16_bytes(scale / 64.0));
                b[2..4].copy_from_slice(&f16_bytes(scale / 64.0));
            }
            GgmlType::IQ4_NL => b[0..2].copy_from_slice(&f16_bytes(scale / 64.0)),
            GgmlType::IQ4_XS => b[0..2].copy_from_slice(&f16_bytes(scale / 1024.0)),
            other => panic!("no generator for {other}"),
        }
    }
    v
}

/// Elements per row that make `n_blocks` blocks of `ty`'s *activation* granularity: weight
/// block sizes are 1, 32 or 256, so use the weight block size.
pub fn elems(ty: GgmlType, n_blocks: usize) -> usize {
    ty.block_elems() * n_blocks
}

/// Activations with the awkward cases: varying block scales, exact ties for the rounding
/// (values k + 0.5 after scaling), a zero block, equal-magnitude opposite-sign maxima and a
/// few outliers.
pub fn random_acts(n: usize, rng: &mut SeedRng) -> Vec<f32> {
    let mut x: Vec<f32> = (0..n).map(|_| rng.normal()).collect();
    for blk in x.chunks_mut(32) {
        if blk.len() < 8 {
            continue;
        }
        match rng.below(8) {
            0 => blk.iter_mut().for_each(|v| *v = 0.0),
            1 => {
                // amax 127 ⇒ multiplier 1: halves are exact ties.
                for v in blk.iter_mut() {
                    *v = (rng.below(255) as f32 - 127.0) + 0.5 * (rng.below(2) as f32);
                }
                blk[0] = 127.0;
            }
            2 => {
                let m = 3.0 + rng.unit();
                blk[1] = m;
                blk[7] = -m;
            }
            3 => blk[rng.below(blk.len() as u64) as usize] *= 40.0,
            _ => {
                let s = 10f32.powi(rng.below(5) as i32 - 2);
                blk.iter_mut().for_each(|v| *v *= s);
            }
        }
    }
    x
}

/// Bytes of one row of `n` activations of type `act`.
pub fn act_bytes(act: GgmlType, n: usize) -> usize {
    n / act.block_elems() * act.block_bytes()
}

/// Quantizes a row with the given table.
pub fn quantize(k: &Kernels, act: GgmlType, x: &[f32]) -> Vec<u8> {
    let mut out = vec![0u8; act_bytes(act, x.len())];
    k.quantize_activations(act, x, &mut out).expect("quantize");
    out
}

/// Dequantizes with the scalar table.
pub fn dequant(ty: GgmlType, src: &[u8]) -> Vec<f32> {
    let n = src.len() / ty.block_bytes() * ty.block_elems();
    let mut out = vec![0.0; n];
    scalar().dequantize(ty, src, &mut out).expect("dequantize");
    out
}

/// A bound on how far two float dot products that add the same terms in different orders
/// may be apart: a few ulps of the sum of magnitudes of the terms.
pub fn order_tolerance(abs_sum: f64, n_terms: usize) -> f64 {
    abs_sum * f32::EPSILON as f64 * (n_terms as f64).sqrt().max(4.0) * 2.0 + 1e-30
}

/// `sum |w_i * a_i|` with both sides decoded exactly.
pub fn abs_products(wd: &[f32], ad: &[f32]) -> f64 {
    wd.iter()
        .zip(ad)
        .map(|(w, a)| (*w as f64 * *a as f64).abs())
        .sum()
}

/// Decodes an activation row (an independent, test-side decoder).
pub fn decode_act(act: GgmlType, bytes: &[u8]) -> Vec<f32> {
    use kiln_quant::blocks::{BlockQ8_0, BlockQ8_1, BlockQ8K};
    match act {
        GgmlType::F32 => bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        GgmlType::F16 => bytes
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        GgmlType::BF16 => bytes
            .chunks_exact(2)
            .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        GgmlType::Q8_0 => bytemuck::cast_slice::<u8, BlockQ8_0>(bytes)
            .iter()
            .flat_map(|b| b.qs.map(|q| q as f32 * b.d.to_f32()))
            .collect(),
        GgmlType::Q8_1 => bytemuck::cast_slice::<u8, BlockQ8_1>(bytes)
            .iter()
            .flat_map(|b| b.qs.map(|q| q as f32 * b.d.to_f32()))
            .collect(),
        GgmlType::Q8_K => bytemuck::cast_slice::<u8, BlockQ8K>(bytes)
            .iter()
            .flat_map(|b| b.qs.map(|q| q as f32 * b.d.get()))
            .collect(),
        other => panic!("{other} is not an activation type"),
    }
}

/// Per element, the magnitude of the additive offset a weight type computes separately from
/// `d * q` (Q4_1/Q5_1's `m`, Q2_K/Q4_K/Q5_K's `dmin * m_j`); 0 for the others. Dot kernels add those terms
/// on their own, so summation-order tolerances must count them.
pub fn weight_offsets(ty: GgmlType, bytes: &[u8]) -> Vec<f32> {
    use kiln_quant::blocks::{BlockQ2K, BlockQ4_1, BlockQ4K, BlockQ5_1, BlockQ5K, q4k_scale_min};
    let n = bytes.len() / ty.block_bytes() * ty.block_elems();
    match ty {
        GgmlType::Q4_1 => bytemuck::cast_slice::<u8, BlockQ4_1>(bytes)
            .iter()
            .flat_map(|b| [b.m.to_f32().abs(); 32])
            .collect(),
        GgmlType::Q4_K => bytemuck::cast_slice::<u8, BlockQ4K>(bytes)
            .iter()
            .flat_map(|b| {
                (0..256).map(move |i| {
                    (b.dmin.to_f32() * q4k_scale_min(i / 32, &b.scales).1 as f32).abs()
                })
            })
            .collect(),
        GgmlType::Q5_1 => bytemuck::cast_slice::<u8, BlockQ5_1>(bytes)
            .iter()
            .flat_map(|b| [b.m.to_f32().abs(); 32])
            .collect(),
        GgmlType::Q5_K => bytemuck::cast_slice::<u8, BlockQ5K>(bytes)
            .iter()
            .flat_map(|b| {
                (0..256).map(move |i| {
                    (b.dmin.to_f32() * q4k_scale_min(i / 32, &b.scales).1 as f32).abs()
                })
            })
            .collect(),
        GgmlType::Q2_K => bytemuck::cast_slice::<u8, BlockQ2K>(bytes)
            .iter()
            .flat_map(|b| {
                (0..256).map(move |i| (b.dmin.to_f32() * (b.scales[i / 16] >> 4) as f32).abs())
            })
            .collect(),
        _ => vec![0.0; n],
    }
}

/// `sum (|w_i| + offset_i) * |a_i|`: the magnitude the float rounding of a dot is relative to.
pub fn dot_magnitude(ty: GgmlType, w: &[u8], wd: &[f32], ad: &[f32]) -> f64 {
    let off = weight_offsets(ty, w);
    wd.iter()
        .zip(&off)
        .zip(ad)
        .map(|((w, o), a)| (w.abs() as f64 + *o as f64) * a.abs() as f64)
        .sum()
}

/// (weight type, budget as a fraction of the activation block's largest magnitude).
pub const BUDGETS: &[(GgmlType, f64)] = &[
    (GgmlType::F32, 1e-6),
    (GgmlType::F16, 1.0 / 2048.0 + 1e-6),
    (GgmlType::BF16, 1.0 / 256.0 + 1e-6),
    (GgmlType::Q4_0, 1.0 / 254.0 + 1.0 / 2048.0 + 1e-6),
    (GgmlType::Q4_1, 1.0 / 254.0 + 1.0 / 2048.0 + 1e-6),
    (GgmlType::Q5_0, 1.0 / 254.0 + 1.0 / 2048.0 + 1e-6),
    (GgmlType::Q8_0, 1.0 / 254.0 + 1.0 / 2048.0 + 1e-6),
    (GgmlType::Q4_K, 1.0 / 254.0 + 1e-6),
    (GgmlType::Q6_K, 1.0 / 254.0 + 1e-6),
    (GgmlType::Q5_1, 1.0 / 254.0 + 1.0 / 2048.0 + 1e-6),
    (GgmlType::Q2_K, 1.0 / 254.0 + 1e-6),
    (GgmlType::Q3_K, 1.0 / 254.0 + 1e-6),
    (GgmlType::Q5_K, 1.0 / 254.0 + 1e-6),
    (GgmlType::IQ4_NL, 1.0 / 254.0 + 1.0 / 2048.0 + 1e-6),
    (GgmlType::IQ4_XS, 1.0 / 254.0 + 1e-6),
];

/// The budget bound for one row pair.
pub fn budget_bound(ty: GgmlType, w: &[u8], x: &[f32]) -> f64 {
    let budget = BUDGETS.iter().find(|(t, _)| *t == ty).expect("budget").1;
    let wd = dequant(ty, w);
    let off = weight_offsets(ty, w);
    // Float types convert element by element: the error is relative to |x_i| itself.
    let per_elem = ty.block_elems() == 1;
    let act_block = kiln_quant::vec_dot_type(ty)
        .expect("supported")
        .block_elems()
        .max(1);
    let mut b = 0.0f64;
    for (c, xs) in x.chunks(act_block).enumerate() {
        let amax = xs.iter().fold(0.0f32, |m, v| m.max(v.abs())) as f64;
        for (j, xv) in xs.iter().enumerate() {
            let i = c * act_block + j;
            let scale = if per_elem { xv.abs() as f64 } else { amax };
            b += (wd[i].abs() as f64 + off[i] as f64) * scale;
        }
    }
    budget * b + order_tolerance(abs_products(&wd, x), wd.len())
}
