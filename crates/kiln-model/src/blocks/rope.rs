//! Rotary position embeddings: the cos/sin table of a position (angles by repeated
//! multiplication, as ggml computes them, so rounding matches), its application in either
//! pairing, and frequency factors: Llama 3.x scales long wavelengths down by per-dimension
//! factors (GGUF: the `rope_freqs.weight` tensor; Hugging Face: `rope_scaling.rope_type =
//! "llama3"`, from which the same factors are computed here as llama.cpp's converter does).

/// The cos/sin table of one position: `table[2i] = cos θ_i`, `table[2i+1] = sin θ_i`,
/// `θ_i = pos · scale · base^(-2i/n_rot)`, the angle computed by repeated multiplication as
/// ggml does so rounding matches.
pub(crate) fn rope_table(pos: usize, n_rot: usize, base: f32, freq_scale: f32, table: &mut [f32]) {
    let theta_scale = base.powf(-2.0 / n_rot as f32);
    let mut theta_extrap = pos as f32;
    for i in 0..n_rot / 2 {
        let theta = freq_scale * theta_extrap;
        table[2 * i] = theta.cos();
        table[2 * i + 1] = theta.sin();
        theta_extrap *= theta_scale;
    }
}

/// Rotates the first `n_rot` dimensions of each head in `x` (`n_heads` heads of
/// `head_dim`), using a table from [`rope_table`].
pub(crate) fn rope_apply(
    x: &mut [f32],
    head_dim: usize,
    n_rot: usize,
    style: crate::config::RopeStyle,
    table: &[f32],
) {
    use crate::config::RopeStyle;
    for head in x.chunks_exact_mut(head_dim) {
        match style {
            RopeStyle::Normal => {
                for i in 0..n_rot / 2 {
                    let (c, s) = (table[2 * i], table[2 * i + 1]);
                    let (x0, x1) = (head[2 * i], head[2 * i + 1]);
                    head[2 * i] = x0.mul_add(c, -(x1 * s));
                    head[2 * i + 1] = x0.mul_add(s, x1 * c);
                }
            }
            RopeStyle::Neox => {
                let half = n_rot / 2;
                for i in 0..half {
                    let (c, s) = (table[2 * i], table[2 * i + 1]);
                    let (x0, x1) = (head[i], head[i + half]);
                    head[i] = x0.mul_add(c, -(x1 * s));
                    head[i + half] = x0.mul_add(s, x1 * c);
                }
            }
        }
    }
}

/// As [`rope_table`], with each angle divided by its frequency factor
/// (`θ_i = scale · pos · base^(-2i/n_rot) / factors[i]`), as ggml's `rope_ext` does.
pub(crate) fn rope_table_with_factors(
    pos: usize,
    n_rot: usize,
    base: f32,
    freq_scale: f32,
    factors: Option<&[f32]>,
    table: &mut [f32],
) {
    let Some(factors) = factors else {
        rope_table(pos, n_rot, base, freq_scale, table);
        return;
    };
    let theta_scale = base.powf(-2.0 / n_rot as f32);
    let mut theta_extrap = pos as f32;
    for i in 0..n_rot / 2 {
        let theta = freq_scale * (theta_extrap / factors[i]);
        table[2 * i] = theta.cos();
        table[2 * i + 1] = theta.sin();
        theta_extrap *= theta_scale;
    }
}

/// The Llama 3 frequency factors for `n_rot` rotated dimensions: 1 for wavelengths shorter
/// than `original_ctx / high_freq_factor`, `factor` for those longer than
/// `original_ctx / low_freq_factor`, and a smooth interpolation between.
pub(crate) fn llama3_rope_factors(
    n_rot: usize,
    base: f32,
    factor: f32,
    low_freq_factor: f32,
    high_freq_factor: f32,
    original_ctx: f32,
) -> Vec<f32> {
    let (factor, low, high, ctx) = (
        factor as f64,
        low_freq_factor as f64,
        high_freq_factor as f64,
        original_ctx as f64,
    );
    let low_wavelen = ctx / low;
    let high_wavelen = ctx / high;
    (0..n_rot / 2)
        .map(|i| {
            let exponent = (2 * i) as f32 / n_rot as f32;
            let freq = 1.0 / (base as f64).powf(exponent as f64);
            let wavelen = 2.0 * std::f64::consts::PI / freq;
            let f = if wavelen < high_wavelen {
                1.0
            } else if wavelen > low_wavelen {
                factor
            } else {
                let smooth = (ctx / wavelen - low) / (high - low);
                1.0 / ((1.0 - smooth) / factor + smooth)
            };
            f as f32
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RopeStyle;

    #[test]
    fn rope_at_position_zero_is_identity() {
        let mut table = vec![0.0; 8];
        rope_table(0, 8, 10000.0, 1.0, &mut table);
        for style in [RopeStyle::Normal, RopeStyle::Neox] {
            let orig: Vec<f32> = (0..16).map(|i| i as f32).collect();
            let mut x = orig.clone();
            rope_apply(&mut x, 8, 8, style, &table);
            assert_eq!(x, orig);
        }
    }

    #[test]
    fn rope_preserves_pair_norms_and_styles_differ_only_in_pairing() {
        let mut table = vec![0.0; 8];
        rope_table(7, 8, 10000.0, 1.0, &mut table);
        let orig: Vec<f32> = (0..8).map(|i| (i as f32 * 0.37).sin()).collect();
        let mut a = orig.clone();
        rope_apply(&mut a, 8, 8, RopeStyle::Normal, &table);
        for i in 0..4 {
            let n0 = orig[2 * i].hypot(orig[2 * i + 1]);
            let n1 = a[2 * i].hypot(a[2 * i + 1]);
            assert!((n0 - n1).abs() < 1e-5);
        }
        // NeoX on a de-interleaved vector equals Normal on the interleaved one.
        let deint: Vec<f32> = (0..4)
            .map(|i| orig[2 * i])
            .chain((0..4).map(|i| orig[2 * i + 1]))
            .collect();
        let mut b = deint.clone();
        rope_apply(&mut b, 8, 8, RopeStyle::Neox, &table);
        for i in 0..4 {
            assert!((b[i] - a[2 * i]).abs() < 1e-6);
            assert!((b[i + 4] - a[2 * i + 1]).abs() < 1e-6);
        }
    }

    #[test]
    fn unit_factors_give_the_plain_table() {
        let mut a = vec![0.0; 16];
        let mut b = vec![0.0; 16];
        rope_table_with_factors(37, 16, 10000.0, 1.0, Some(&[1.0; 8]), &mut a);
        rope_table(37, 16, 10000.0, 1.0, &mut b);
        assert_eq!(a, b);
    }

    #[test]
    fn llama3_factors_span_one_to_factor() {
        // Llama 3.1 8B: head_dim 128, base 500000, factor 8, low 1, high 4, ctx 8192.
        let f = llama3_rope_factors(128, 500_000.0, 8.0, 1.0, 4.0, 8192.0);
        assert_eq!(f.len(), 64);
        assert_eq!(f[0], 1.0);
        assert_eq!(f[63], 8.0);
        assert!(
            f.windows(2).all(|w| w[0] <= w[1]),
            "factors grow with wavelength"
        );
    }
}
