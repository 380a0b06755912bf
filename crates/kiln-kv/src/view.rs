//! A read-only view of one layer of one sequence: what attention walks.

use half::f16;

use crate::KvType;
use crate::config::{KvConfig, PageLayout};

/// One layer of one sequence: the layer's K and V arenas and the sequence's block table.
/// Page `p` holds positions `p·bs .. (p+1)·bs`; within a page each KV head has its own
/// contiguous region (K in [`KvConfig::k_layout`], V token-major). Slots past
/// [`LayerView::len`] in the last page hold stale data and must be ignored.
#[derive(Clone, Copy)]
pub struct LayerView<'a> {
    cfg: &'a KvConfig,
    k: &'a [u64],
    v: &'a [u64],
    blocks: &'a [u32],
    len: usize,
}

impl<'a> LayerView<'a> {
    pub(crate) fn new(
        cfg: &'a KvConfig,
        k: &'a [u64],
        v: &'a [u64],
        blocks: &'a [u32],
        len: usize,
    ) -> Self {
        LayerView {
            cfg,
            k,
            v,
            blocks,
            len,
        }
    }

    /// The cache's configuration (types, head sizes, block size).
    pub fn config(&self) -> &'a KvConfig {
        self.cfg
    }

    /// Positions the sequence holds.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the sequence holds no positions.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Tokens per page.
    pub fn block_size(&self) -> usize {
        self.cfg.block_size
    }

    /// Pages holding the sequence's positions.
    pub fn n_pages(&self) -> usize {
        self.blocks.len()
    }

    /// The stored type of K.
    pub fn k_type(&self) -> KvType {
        self.cfg.k_type
    }

    /// The stored type of V.
    pub fn v_type(&self) -> KvType {
        self.cfg.v_type
    }

    /// The Walsh–Hadamard block size K is stored rotated by, if it is
    /// ([`KvConfig::k_rotation`]): queries must be rotated the same way.
    pub fn k_rotation(&self) -> Option<usize> {
        self.cfg.k_rotation()
    }

    /// The Walsh–Hadamard block size V is stored rotated by, if it is
    /// ([`KvConfig::v_rotation`]): the attention output must be rotated back.
    pub fn v_rotation(&self) -> Option<usize> {
        self.cfg.v_rotation()
    }

    /// How K is laid out within a head's page.
    pub fn k_layout(&self) -> PageLayout {
        self.cfg.k_layout()
    }

    /// The whole K arena of the layer, as bytes.
    pub fn k_bytes(&self) -> &'a [u8] {
        bytemuck::cast_slice(self.k)
    }

    /// The whole V arena of the layer, as bytes.
    pub fn v_bytes(&self) -> &'a [u8] {
        bytemuck::cast_slice(self.v)
    }

    /// The K arena as halves, when K is stored as f16.
    pub fn k_f16(&self) -> Option<&'a [f16]> {
        (self.cfg.k_type == KvType::F16).then(|| bytemuck::cast_slice(self.k))
    }

    /// The K arena as floats, when K is stored as f32.
    pub fn k_f32(&self) -> Option<&'a [f32]> {
        (self.cfg.k_type == KvType::F32).then(|| bytemuck::cast_slice(self.k))
    }

    /// The V arena as halves, when V is stored as f16.
    pub fn v_f16(&self) -> Option<&'a [f16]> {
        (self.cfg.v_type == KvType::F16).then(|| bytemuck::cast_slice(self.v))
    }

    /// The V arena as floats, when V is stored as f32.
    pub fn v_f32(&self) -> Option<&'a [f32]> {
        (self.cfg.v_type == KvType::F32).then(|| bytemuck::cast_slice(self.v))
    }

    /// Byte offset in [`LayerView::k_bytes`] of KV head `head`'s K page `page`
    /// ([`KvConfig::k_page_bytes`] long).
    pub fn k_page(&self, page: usize, head: usize) -> usize {
        self.blocks[page] as usize * self.cfg.k_block_stride() + head * self.cfg.k_page_bytes()
    }

    /// Byte offset in [`LayerView::v_bytes`] of KV head `head`'s V page `page`.
    pub fn v_page(&self, page: usize, head: usize) -> usize {
        self.blocks[page] as usize * self.cfg.v_block_stride() + head * self.cfg.v_page_bytes()
    }
}
