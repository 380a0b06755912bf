//! The non-linear 4-bit types IQ4_NL (32-element blocks, `Q8_0` activations) and IQ4_XS
//! (256-element super-blocks, `Q8_K` activations), which share the level table
//! [`IQ4NL_VALUES`]. IQ4_NL is filed here rather than with the legacy types although its
//! block has their shape: its values, its kernels' level lookup and its dot order (blocks in
//! pairs) are IQ4_XS's, not theirs. Dequantization as ggml's reference `dequantize_row_*`;
//! dot products in ggml's AVX2 order (see [`super::util`]).

use super::util::{add8, arr32, fma8, hsum8, nibbles, quads_ss, quads_us_scaled, sign_trick};
use crate::blocks::{
    BlockIQ4NL, BlockIQ4XS, BlockQ8_0, BlockQ8K, IQ4NL_VALUES, QK, QK_K, as_blocks, iq4xs_scale,
};

pub(crate) fn dequant_iq4_nl(src: &[u8], dst: &mut [f32]) {
    let blocks: &[BlockIQ4NL] = as_blocks(src);
    assert_eq!(blocks.len() * QK, dst.len());
    for (b, y) in blocks.iter().zip(dst.chunks_exact_mut(QK)) {
        let d = b.d.to_f32();
        for j in 0..QK / 2 {
            y[j] = d * IQ4NL_VALUES[(b.qs[j] & 0x0F) as usize] as f32;
            y[j + QK / 2] = d * IQ4NL_VALUES[(b.qs[j] >> 4) as usize] as f32;
        }
    }
}

pub(crate) fn dequant_iq4_xs(src: &[u8], dst: &mut [f32]) {
    let blocks: &[BlockIQ4XS] = as_blocks(src);
    assert_eq!(blocks.len() * QK_K, dst.len());
    for (b, y) in blocks.iter().zip(dst.chunks_exact_mut(QK_K)) {
        let d = b.d.to_f32();
        for (j, y) in y.chunks_exact_mut(32).enumerate() {
            let dl = d * iq4xs_scale(b, j) as f32;
            let q = &b.qs[16 * j..16 * j + 16];
            for l in 0..16 {
                y[l] = dl * IQ4NL_VALUES[(q[l] & 0x0F) as usize] as f32;
                y[l + 16] = dl * IQ4NL_VALUES[(q[l] >> 4) as usize] as f32;
            }
        }
    }
}

/// The 32 signed levels of an IQ4_NL block in element order.
fn iq4nl_values(qs: &[u8; 16]) -> [i8; 32] {
    nibbles(qs).map(|q| IQ4NL_VALUES[q as usize])
}

/// IQ4_NL × Q8_0 (ggml's order, which differs from the other 32-element types): blocks are
/// taken in pairs, the even block of each pair into accumulator `acc1`, the odd one into
/// `acc2` (`fma(f16(dy) * f16(dx), quads, acc)` on the signed levels); the two are added
/// lane-wise and reduced with [`hsum8`]. An odd last block is added afterwards as one exact
/// integer sum: `total + dy * dx * sum` (a multiply, then an add).
pub(crate) fn dot_iq4_nl(w: &[u8], a: &[u8]) -> f32 {
    let (w, a): (&[BlockIQ4NL], &[BlockQ8_0]) = (as_blocks(w), as_blocks(a));
    assert_eq!(w.len(), a.len());
    let pairs = w.len() / 2;
    let mut acc = [[0.0f32; 8]; 2];
    for i in 0..2 * pairs {
        let (x, y) = (&w[i], &a[i]);
        let d = y.d.to_f32() * x.d.to_f32();
        fma8(&mut acc[i % 2], d, &quads_ss(&iq4nl_values(&x.qs), &y.qs));
    }
    let both: [f32; 8] = std::array::from_fn(|l| acc[0][l] + acc[1][l]);
    let mut sum = hsum8(&both);
    if w.len() % 2 == 1 {
        let (x, y) = (&w[w.len() - 1], &a[w.len() - 1]);
        let d = y.d.to_f32() * x.d.to_f32();
        let q = iq4nl_values(&x.qs);
        let sumi: i32 = q
            .iter()
            .zip(&y.qs)
            .map(|(&v, &u)| v as i32 * u as i32)
            .sum();
        // Not fused: ggml's x86 build compiles this tail to a multiply and an add (checked
        // against its `ggml_vec_dot_iq4_nl_q8_0` on odd block counts).
        sum += d * sumi as f32;
    }
    sum
}

/// IQ4_XS × Q8_K, per super-block: the 8 lanes of `sum ls_j * v * q8` over the 8 sub-blocks
/// of 32 (`v` the signed levels, multiplied through AVX2's sign trick), `fma(f16(d) * dy,
/// lanes, acc)`. Result `hsum8(acc)`.
pub(crate) fn dot_iq4_xs(w: &[u8], a: &[u8]) -> f32 {
    let (w, a): (&[BlockIQ4XS], &[BlockQ8K]) = (as_blocks(w), as_blocks(a));
    assert_eq!(w.len(), a.len());
    let mut acc = [0.0f32; 8];
    for (x, y) in w.iter().zip(a) {
        let mut sumi = [0i32; 8];
        for j in 0..8 {
            let qs = &x.qs[16 * j..16 * j + 16];
            let v: [i8; 32] = std::array::from_fn(|l| {
                let q = if l < 16 {
                    qs[l] & 0x0F
                } else {
                    qs[l - 16] >> 4
                };
                IQ4NL_VALUES[q as usize]
            });
            let (av, sy) = sign_trick(&v, arr32(&y.qs, 32 * j));
            let ls = iq4xs_scale(x, j) as i32;
            add8(&mut sumi, &quads_us_scaled(&av, &sy, ls, ls));
        }
        fma8(&mut acc, x.d.to_f32() * y.d.get(), &sumi);
    }
    hsum8(&acc)
}
