//! Stored types, the cache's shape, and the byte layout of a block.

use kiln_quant::GgmlType;

use crate::KvError;

/// How K or V vectors are stored. `f16` is llama.cpp's default and Kiln's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)]
pub enum KvType {
    F32,
    F16,
    Q8_0,
    Q4_0,
    Q4_1,
    Q5_0,
}

impl KvType {
    /// Every type a page can hold.
    pub const ALL: [KvType; 6] = [
        KvType::F32,
        KvType::F16,
        KvType::Q8_0,
        KvType::Q4_0,
        KvType::Q4_1,
        KvType::Q5_0,
    ];

    /// The name `--kv-type` accepts (llama.cpp's `--cache-type-k` names).
    pub fn name(self) -> &'static str {
        match self {
            KvType::F32 => "f32",
            KvType::F16 => "f16",
            KvType::Q8_0 => "q8_0",
            KvType::Q4_0 => "q4_0",
            KvType::Q4_1 => "q4_1",
            KvType::Q5_0 => "q5_0",
        }
    }

    /// Every name, for error messages.
    pub fn names() -> Vec<&'static str> {
        KvType::ALL.iter().map(|t| t.name()).collect()
    }

    /// Parses a name (case-insensitive).
    pub fn parse(name: &str) -> Result<KvType, KvError> {
        let n = name.trim();
        KvType::ALL
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(n))
            .ok_or_else(|| KvError::UnsupportedType {
                name: n.to_string(),
                supported: KvType::names(),
            })
    }

    /// Parses `K[,V]`: one type for both, or a K type and a V type.
    pub fn parse_pair(spec: &str) -> Result<(KvType, KvType), KvError> {
        match spec.split_once(',') {
            Some((k, v)) => Ok((KvType::parse(k)?, KvType::parse(v)?)),
            None => {
                let t = KvType::parse(spec)?;
                Ok((t, t))
            }
        }
    }

    /// The ggml block type of the stored bytes.
    pub fn ggml(self) -> GgmlType {
        match self {
            KvType::F32 => GgmlType::F32,
            KvType::F16 => GgmlType::F16,
            KvType::Q8_0 => GgmlType::Q8_0,
            KvType::Q4_0 => GgmlType::Q4_0,
            KvType::Q4_1 => GgmlType::Q4_1,
            KvType::Q5_0 => GgmlType::Q5_0,
        }
    }

    /// A float type (stored value by value) rather than a block-quantized one.
    pub fn is_float(self) -> bool {
        matches!(self, KvType::F32 | KvType::F16)
    }

    /// Bytes of one vector of `dim` values (`dim` a whole number of blocks).
    pub fn row_bytes(self, dim: usize) -> usize {
        let t = self.ggml();
        dim / t.block_elems() * t.block_bytes()
    }
}

impl std::fmt::Display for KvType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How the vectors of one head are laid out inside a page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageLayout {
    /// `page[slot][dim]`: each token's vector contiguous (V always; quantized K, whose
    /// blocks run along the dimension).
    TokenMajor,
    /// `page[dim][slot]`: the page's tokens contiguous for each dimension (f16 / f32 K), so
    /// attention computes the scores of eight keys per SIMD register.
    DimMajor,
}

/// The shape of a cache: what it stores per token and how many blocks it has.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvConfig {
    pub n_layer: usize,
    /// K/V heads per layer.
    pub n_kv_head: usize,
    /// Values per K head.
    pub head_dim_k: usize,
    /// Values per V head.
    pub head_dim_v: usize,
    pub k_type: KvType,
    pub v_type: KvType,
    /// Tokens per block (page).
    pub block_size: usize,
    /// Blocks in the pool.
    pub n_blocks: usize,
    /// Store block-quantized K and V rotated by an orthonormal Walsh–Hadamard transform, as
    /// llama.cpp does (`attn_rot_k` / `attn_rot_v`): see [`KvConfig::k_rotation`] and
    /// [`KvConfig::v_rotation`]. Float types are never rotated, whatever this says.
    pub rotate: bool,
}

/// Pages start on cache lines.
const ALIGN: usize = 64;

impl KvConfig {
    /// The default block size (tokens per page).
    pub const DEFAULT_BLOCK_SIZE: usize = 16;

    /// Checks that the configuration can be built.
    pub fn validate(&self) -> Result<(), KvError> {
        let bad = |s: String| Err(KvError::InvalidConfig(s));
        if self.n_layer == 0 || self.n_kv_head == 0 || self.head_dim_k == 0 || self.head_dim_v == 0
        {
            return bad(format!(
                "zero-sized dimension: {} layers, {} KV heads, head sizes {} / {}",
                self.n_layer, self.n_kv_head, self.head_dim_k, self.head_dim_v
            ));
        }
        if self.block_size == 0 || self.block_size > 4096 {
            return bad(format!(
                "block size {} must be between 1 and 4096 tokens",
                self.block_size
            ));
        }
        if self.n_blocks >= u32::MAX as usize {
            return bad(format!(
                "{} blocks is more than a u32 can index",
                self.n_blocks
            ));
        }
        for (what, ty, dim) in [
            ("K", self.k_type, self.head_dim_k),
            ("V", self.v_type, self.head_dim_v),
        ] {
            let be = ty.ggml().block_elems();
            if !dim.is_multiple_of(be) {
                return bad(format!(
                    "{what} type {ty} stores blocks of {be} values, but a {what} head has {dim} \
                     (use f16 or f32 for this model)"
                ));
            }
        }
        if self.bytes_total().is_none() {
            return bad(format!(
                "{} blocks overflow the address space",
                self.n_blocks
            ));
        }
        Ok(())
    }

    /// The size of the Walsh–Hadamard blocks K vectors are stored rotated by, if they are:
    /// when [`KvConfig::rotate`] is set, K is block-quantized and its head size is a multiple
    /// of 64 (the largest power of two ≥ 64 dividing the head size). Readers of the stored
    /// form must rotate queries the same way (`(H·q)·(H·k) = q·k`).
    pub fn k_rotation(&self) -> Option<usize> {
        if self.rotate && !self.k_type.is_float() {
            kiln_quant::attn::key_rotation_size(self.head_dim_k)
        } else {
            None
        }
    }

    /// The size of the Walsh–Hadamard blocks V vectors are stored rotated by, if they are
    /// (64, when [`KvConfig::rotate`] is set, V is block-quantized and its head size a
    /// multiple of 64). A weighted sum of rotated values is rotated back by the same
    /// transform (`H·H = I`).
    pub fn v_rotation(&self) -> Option<usize> {
        if self.rotate && !self.v_type.is_float() {
            kiln_quant::attn::value_rotation_size(self.head_dim_v)
        } else {
            None
        }
    }

    /// How K is laid out in a page.
    pub fn k_layout(&self) -> PageLayout {
        if self.k_type.is_float() {
            PageLayout::DimMajor
        } else {
            PageLayout::TokenMajor
        }
    }

    /// Bytes of one K head vector.
    pub fn k_row_bytes(&self) -> usize {
        self.k_type.row_bytes(self.head_dim_k)
    }

    /// Bytes of one V head vector.
    pub fn v_row_bytes(&self) -> usize {
        self.v_type.row_bytes(self.head_dim_v)
    }

    /// Bytes of one head's page of K (`block_size` vectors).
    pub fn k_page_bytes(&self) -> usize {
        self.block_size * self.k_row_bytes()
    }

    /// Bytes of one head's page of V.
    pub fn v_page_bytes(&self) -> usize {
        self.block_size * self.v_row_bytes()
    }

    /// Bytes of one block of one layer's K arena (all heads, padded to a cache line).
    pub fn k_block_stride(&self) -> usize {
        (self.n_kv_head * self.k_page_bytes()).next_multiple_of(ALIGN)
    }

    /// Bytes of one block of one layer's V arena.
    pub fn v_block_stride(&self) -> usize {
        (self.n_kv_head * self.v_page_bytes()).next_multiple_of(ALIGN)
    }

    /// Bytes of one block across all layers, K and V.
    pub fn block_bytes(&self) -> usize {
        self.n_layer * (self.k_block_stride() + self.v_block_stride())
    }

    /// Bytes the stored form of one token takes (all layers, K and V, no padding).
    pub fn bytes_per_token(&self) -> usize {
        self.n_layer * self.n_kv_head * (self.k_row_bytes() + self.v_row_bytes())
    }

    /// Blocks needed to hold `n_tokens` positions of one sequence.
    pub fn blocks_for_tokens(&self, n_tokens: usize) -> usize {
        n_tokens.div_ceil(self.block_size)
    }

    /// Blocks that fit in `bytes`.
    pub fn blocks_in_budget(&self, bytes: usize) -> usize {
        bytes / self.block_bytes().max(1)
    }

    /// Bytes of the whole pool, if it fits in a `usize`.
    pub fn bytes_total(&self) -> Option<usize> {
        self.n_blocks.checked_mul(self.block_bytes())
    }
}
