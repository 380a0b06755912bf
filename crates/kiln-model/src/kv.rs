//! The adapter between a model and its KV cache (`kiln-kv`): the cache options a session
//! takes, the cache shape a model needs, and the memory plan printed at load.

use std::fmt;

use kiln_kv::{KvConfig, KvType};

use crate::ModelConfig;

/// How a session's KV cache is built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvOptions {
    /// Stored type of keys (default f16, as llama.cpp).
    pub k_type: KvType,
    /// Stored type of values (default f16).
    pub v_type: KvType,
    /// Tokens per page (default 16).
    pub block_size: usize,
    /// Bytes for the whole cache; `None`: exactly enough for one sequence of the session's
    /// context.
    pub memory: Option<usize>,
    /// Store block-quantized K / V rotated by an orthonormal Walsh–Hadamard transform
    /// (default on, as llama.cpp; `--kv-rotation off`): much closer to f16 for q4/q5 keys.
    /// Has no effect on f16 / f32 caches.
    pub rotation: bool,
}

impl Default for KvOptions {
    fn default() -> Self {
        KvOptions {
            k_type: KvType::F16,
            v_type: KvType::F16,
            block_size: KvConfig::DEFAULT_BLOCK_SIZE,
            memory: None,
            rotation: true,
        }
    }
}

impl KvOptions {
    /// The cache shape for `cfg` with `n_blocks` blocks.
    pub fn config(&self, cfg: &ModelConfig, n_blocks: usize) -> KvConfig {
        KvConfig {
            n_layer: cfg.n_layer,
            n_kv_head: cfg.n_head_kv,
            head_dim_k: cfg.head_dim,
            head_dim_v: cfg.head_dim_v,
            k_type: self.k_type,
            v_type: self.v_type,
            block_size: self.block_size,
            n_blocks,
            rotate: self.rotation,
        }
    }

    /// Blocks this budget buys for `cfg`, or the blocks of one `n_ctx` sequence without one.
    pub fn n_blocks(&self, cfg: &ModelConfig, n_ctx: usize) -> usize {
        let shape = self.config(cfg, 0);
        match self.memory {
            Some(bytes) => shape.blocks_in_budget(bytes),
            None => shape.blocks_for_tokens(n_ctx),
        }
    }
}

/// Where a session's memory goes, decided when it is created.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryPlan {
    /// Bytes of weights (mapped from the file, or quantized at load).
    pub weight_bytes: u64,
    pub k_type: KvType,
    pub v_type: KvType,
    pub kv_blocks: usize,
    /// Tokens per block.
    pub kv_block_tokens: usize,
    /// Bytes of one block (all layers, K and V).
    pub kv_block_bytes: usize,
    /// Bytes one token's K and V take in the stored types (all layers).
    pub kv_bytes_per_token: usize,
    /// Buffers of the forward pass (activations, attention scratch, logits).
    pub scratch_bytes: usize,
}

impl MemoryPlan {
    /// Bytes of the KV cache.
    pub fn kv_bytes(&self) -> usize {
        self.kv_blocks * self.kv_block_bytes
    }

    /// Positions the cache holds in all.
    pub fn kv_tokens(&self) -> usize {
        self.kv_blocks * self.kv_block_tokens
    }
}

/// `bytes` with a binary unit.
pub(crate) fn human(bytes: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

impl fmt::Display for MemoryPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "memory: weights {} | KV {}/{}: {} blocks × {} tokens × {} = {} ({} tokens, {} B/token) | scratch {}",
            human(self.weight_bytes as f64),
            self.k_type,
            self.v_type,
            self.kv_blocks,
            self.kv_block_tokens,
            human(self.kv_block_bytes as f64),
            human(self.kv_bytes() as f64),
            self.kv_tokens(),
            self.kv_bytes_per_token,
            human(self.scratch_bytes as f64),
        )
    }
}
