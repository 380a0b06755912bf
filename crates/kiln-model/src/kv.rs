//! A plain, contiguous KV cache: one f16 K and V row per (layer, position).
//!
//! This is the first-light cache; the paged cache of `kiln-kv` replaces it.

use half::f16;

use crate::ModelConfig;

/// Keys and values of every layer for positions `0..len`, stored as f16 as llama.cpp's
/// default cache does.
pub struct KvCache {
    n_ctx: usize,
    k_dim: usize,
    v_dim: usize,
    k: Vec<Vec<f16>>,
    v: Vec<Vec<f16>>,
}

impl KvCache {
    /// A cache for `n_ctx` positions of the given model shape.
    pub fn new(cfg: &ModelConfig, n_ctx: usize) -> Self {
        let (k_dim, v_dim) = (cfg.k_dim(), cfg.v_dim());
        KvCache {
            n_ctx,
            k_dim,
            v_dim,
            k: (0..cfg.n_layer)
                .map(|_| vec![f16::ZERO; n_ctx * k_dim])
                .collect(),
            v: (0..cfg.n_layer)
                .map(|_| vec![f16::ZERO; n_ctx * v_dim])
                .collect(),
        }
    }

    /// How many positions the cache holds.
    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    /// Bytes of memory held.
    pub fn bytes(&self) -> usize {
        self.k.len() * self.n_ctx * (self.k_dim + self.v_dim) * 2
    }

    /// Stores the keys and values of `n` consecutive positions starting at `pos`.
    pub fn store(&mut self, layer: usize, pos: usize, k: &[f32], v: &[f32]) {
        let kd = &mut self.k[layer][pos * self.k_dim..pos * self.k_dim + k.len()];
        for (d, &s) in kd.iter_mut().zip(k) {
            *d = f16::from_f32(s);
        }
        let vd = &mut self.v[layer][pos * self.v_dim..pos * self.v_dim + v.len()];
        for (d, &s) in vd.iter_mut().zip(v) {
            *d = f16::from_f32(s);
        }
    }

    /// All key rows of a layer (`n_ctx × k_dim`).
    pub fn keys(&self, layer: usize) -> &[f16] {
        &self.k[layer]
    }

    /// All value rows of a layer (`n_ctx × v_dim`).
    pub fn values(&self, layer: usize) -> &[f16] {
        &self.v[layer]
    }
}
