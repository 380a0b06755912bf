//! The orthonormal Walsh–Hadamard rotation a KV cache applies to vectors before quantizing
//! them (llama.cpp's `attn_rot_k` / `attn_rot_v`).
//!
//! Block quantization (q8_0, q4_0 …) spends one scale per 32 values, so a few large
//! channels — keys have them — cost every other value of their block its precision. An
//! orthonormal rotation `H` spreads each channel over all values of the rotated block and
//! keeps dot products: `(H·q)·(H·k) = q·k`. With `H` the Sylvester–Hadamard matrix scaled
//! by `1/√n` (entries `±1/√n`, `H[i][j] = (−1)^popcount(i & j) / √n`), `H` is symmetric and
//! `H·H = I`, so the same transform rotates back.
//!
//! The fast transform: `log2(n)` stages of butterflies `(a, b) → (a + b, a − b)` in place,
//! then one multiplication by `1/√n`. Each output is a fixed sequence of additions, so the
//! result depends on nothing but the input (no thread count, batch or ISA enters); the cost
//! (`n·log2(n)` additions per vector, a few thousand per token and layer) is far below
//! anything worth a hand-written SIMD form, and the compiler vectorises the wide stages.

/// The smallest rotation llama.cpp applies, and the size it uses for values.
pub const MIN_ROTATION: usize = 64;

/// The rotation size for keys of `head_dim` values: the largest power of two of at least
/// [`MIN_ROTATION`] dividing `head_dim` (llama.cpp's `build_input_k_rot`), or `None` when
/// `head_dim` is not a multiple of [`MIN_ROTATION`].
pub fn key_rotation_size(head_dim: usize) -> Option<usize> {
    if head_dim == 0 || !head_dim.is_multiple_of(MIN_ROTATION) {
        return None;
    }
    let mut n = MIN_ROTATION;
    while head_dim.is_multiple_of(2 * n) {
        n *= 2;
    }
    Some(n)
}

/// The rotation size for values of `head_dim` values: [`MIN_ROTATION`] when it divides
/// `head_dim` (llama.cpp's `build_input_v_rot`), else `None`.
pub fn value_rotation_size(head_dim: usize) -> Option<usize> {
    (head_dim > 0 && head_dim.is_multiple_of(MIN_ROTATION)).then_some(MIN_ROTATION)
}

/// Rotates every consecutive block of `n` values of `x` in place by the orthonormal
/// Walsh–Hadamard matrix of size `n`. Applying it twice gives back `x` (up to rounding).
///
/// # Panics
/// If `n` is not a power of two or does not divide `x.len()` (a caller's shape bug: the
/// sizes come from [`key_rotation_size`] / [`value_rotation_size`]).
pub fn hadamard_rotate(x: &mut [f32], n: usize) {
    assert!(
        n.is_power_of_two() && x.len().is_multiple_of(n),
        "Hadamard rotation of size {n} over {} values",
        x.len()
    );
    let scale = 1.0 / (n as f32).sqrt();
    for block in x.chunks_exact_mut(n) {
        let mut h = 1;
        while h < n {
            for pair in block.chunks_exact_mut(2 * h) {
                let (lo, hi) = pair.split_at_mut(h);
                for (a, b) in lo.iter_mut().zip(hi.iter_mut()) {
                    let (u, v) = (*a, *b);
                    *a = u + v;
                    *b = u - v;
                }
            }
            h *= 2;
        }
        block.iter_mut().for_each(|v| *v *= scale);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `H[i][j] = (−1)^popcount(i & j) / √n`, as llama.cpp's `ggml_gen_hadamard` builds it.
    fn matrix(n: usize) -> Vec<f64> {
        let s = 1.0 / (n as f64).sqrt();
        (0..n * n)
            .map(|ij| {
                let (i, j) = (ij / n, ij % n);
                if (i & j).count_ones() % 2 == 0 { s } else { -s }
            })
            .collect()
    }

    fn pseudo(n: usize, seed: u32) -> Vec<f32> {
        let mut z = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
        (0..n)
            .map(|_| {
                z ^= z << 13;
                z ^= z >> 17;
                z ^= z << 5;
                (z as f32 / u32::MAX as f32) * 4.0 - 2.0
            })
            .collect()
    }

    #[test]
    fn fast_transform_equals_the_sylvester_matrix_product() {
        for n in [64, 128, 256] {
            let h = matrix(n);
            let x = pseudo(2 * n, n as u32);
            let mut y = x.clone();
            hadamard_rotate(&mut y, n);
            for (b, (xb, yb)) in x.chunks(n).zip(y.chunks(n)).enumerate() {
                for i in 0..n {
                    let want: f64 = (0..n).map(|j| h[i * n + j] * xb[j] as f64).sum();
                    assert!(
                        (yb[i] as f64 - want).abs() < 1e-5,
                        "n {n} block {b} row {i}: {} vs {want}",
                        yb[i]
                    );
                }
            }
        }
    }

    #[test]
    fn rotating_twice_gives_back_the_input_and_keeps_dot_products() {
        let (q, k) = (pseudo(128, 1), pseudo(128, 2));
        let (mut rq, mut rk) = (q.clone(), k.clone());
        hadamard_rotate(&mut rq, 64);
        hadamard_rotate(&mut rk, 64);
        let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
        assert!((dot(&q, &k) - dot(&rq, &rk)).abs() < 1e-4);
        hadamard_rotate(&mut rq, 64);
        for (a, b) in q.iter().zip(&rq) {
            assert!((a - b).abs() < 1e-6, "{a} vs {b}");
        }
    }

    #[test]
    fn rotation_sizes_follow_llama_cpp() {
        assert_eq!(key_rotation_size(64), Some(64));
        assert_eq!(key_rotation_size(128), Some(128));
        assert_eq!(key_rotation_size(192), Some(64));
        assert_eq!(key_rotation_size(256), Some(256));
        assert_eq!(key_rotation_size(80), None);
        assert_eq!(key_rotation_size(32), None);
        assert_eq!(value_rotation_size(256), Some(64));
        assert_eq!(value_rotation_size(96), None);
    }
}
