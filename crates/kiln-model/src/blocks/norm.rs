//! Normalisation: RMSNorm (llama family; also per head, and after blocks) or LayerNorm with
//! a bias (phi-2, GPT-2), with ggml's arithmetic (sums of squares accumulated in f64).

pub use crate::config::NormKind;

/// `out = x / rms(x) * weight` over one row. The sum of squares is accumulated in f64 as
/// ggml does.
pub(crate) fn rms_norm(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    debug_assert_eq!(x.len(), weight.len());
    debug_assert_eq!(x.len(), out.len());
    let sum: f64 = x.iter().map(|&v| (v * v) as f64).sum();
    let mean = (sum / x.len() as f64) as f32;
    let scale = 1.0 / (mean + eps).sqrt();
    for ((o, &v), &w) in out.iter_mut().zip(x).zip(weight) {
        *o = (v * scale) * w;
    }
}

/// In-place RMSNorm of one row with a weight.
pub(crate) fn rms_norm_inplace(x: &mut [f32], weight: &[f32], eps: f32) {
    let sum: f64 = x.iter().map(|&v| (v * v) as f64).sum();
    let mean = (sum / x.len() as f64) as f32;
    let scale = 1.0 / (mean + eps).sqrt();
    for (v, &w) in x.iter_mut().zip(weight) {
        *v = (*v * scale) * w;
    }
}

/// The weights of one normalisation (the bias only for LayerNorm, when the model has it).
#[derive(Clone, Debug)]
pub(crate) struct Norm {
    pub weight: Vec<f32>,
    pub bias: Option<Vec<f32>>,
}

impl Norm {
    /// Normalises one row `x` into `out`.
    pub fn apply(&self, kind: NormKind, eps: f32, x: &[f32], out: &mut [f32]) {
        match kind {
            NormKind::Rms => rms_norm(x, &self.weight, eps, out),
            NormKind::Layer => layer_norm(x, &self.weight, eps, out),
        }
        if let Some(b) = &self.bias {
            for (o, &b) in out.iter_mut().zip(b) {
                *o += b;
            }
        }
    }
}

/// LayerNorm without bias, with ggml's arithmetic: the mean and the variance are
/// accumulated in f64, the centred values scaled by `1/sqrt(var + eps)` in f32, then
/// multiplied by the weight.
pub(crate) fn layer_norm(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let n = x.len() as f64;
    let mean = (x.iter().map(|&v| v as f64).sum::<f64>() / n) as f32;
    let mut sum2 = 0.0f64;
    for (o, &v) in out.iter_mut().zip(x) {
        let c = v - mean;
        *o = c;
        sum2 += (c * c) as f64;
    }
    let scale = 1.0 / ((sum2 / n) as f32 + eps).sqrt();
    for (o, &w) in out.iter_mut().zip(weight) {
        *o = (*o * scale) * w;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rms_norm_of_constant_row_is_the_weight() {
        let x = [3.0f32; 8];
        let w = [0.5f32, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0];
        let mut out = [0.0f32; 8];
        rms_norm(&x, &w, 0.0, &mut out);
        for (o, w) in out.iter().zip(w) {
            assert!((o - w).abs() < 1e-6);
        }
    }

    #[test]
    fn layer_norm_centres_scales_and_adds_the_bias() {
        let norm = Norm {
            weight: vec![1.0, 2.0, 1.0, 1.0],
            bias: Some(vec![0.5, 0.0, 0.0, -1.0]),
        };
        let x = [1.0f32, 2.0, 3.0, 4.0];
        let mut out = [0.0f32; 4];
        norm.apply(NormKind::Layer, 0.0, &x, &mut out);
        // mean 2.5, variance 1.25.
        let s = 1.0 / 1.25f32.sqrt();
        let want = [-1.5 * s + 0.5, -0.5 * s * 2.0, 0.5 * s, 1.5 * s - 1.0];
        for (o, w) in out.iter().zip(want) {
            assert!((o - w).abs() < 1e-6, "{out:?} vs {want:?}");
        }
    }

    #[test]
    fn rms_norm_kind_ignores_the_mean() {
        let norm = Norm {
            weight: vec![1.0; 2],
            bias: None,
        };
        let mut out = [0.0f32; 2];
        norm.apply(NormKind::Rms, 0.0, &[3.0, 3.0], &mut out);
        assert!((out[0] - 1.0).abs() < 1e-6 && (out[1] - 1.0).abs() < 1e-6);
    }
}
