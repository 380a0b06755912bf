//! The cache: per-layer K and V arenas of blocks, sequences as block tables over them, and
//! the operations on both (allocate, extend, append, fork, copy-on-write, free, prefix
//! attach). Statistics and compaction are in `stats.rs`.

use std::ops::Range;

use half::f16;
use kiln_quant::GgmlType;
use kiln_quant::attn::{hadamard_rotate, store_row};

use crate::config::{KvConfig, PageLayout};
use crate::pool::{NONE, Pool};
use crate::prefix::{MissReason, PrefixEvent, PrefixIndex, chain_key};
use crate::view::LayerView;
use crate::{KvError, KvType};

/// A sequence's handle. Stale handles (of freed sequences) are refused, even when the slot
/// has been reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SeqId {
    slot: u32,
    generation: u32,
}

impl SeqId {
    /// The slot number (small, reused after a sequence is freed).
    pub fn index(self) -> usize {
        self.slot as usize
    }
}

impl std::fmt::Display for SeqId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "#{}.{}", self.slot, self.generation)
    }
}

pub(crate) struct Sequence {
    /// Block ids, in position order. Blocks past `len` are reserved (private, unregistered).
    pub(crate) blocks: Vec<u32>,
    /// The chain key of every full block already committed.
    pub(crate) keys: Vec<u64>,
    pub(crate) len: usize,
}

/// What [`KvCache::attach_prefix`] reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrefixHit {
    /// Positions whose KV is now in the sequence (a whole number of blocks).
    pub tokens: usize,
    /// Why nothing was reused, when nothing was.
    pub miss: Option<MissReason>,
}

/// A paged KV cache. See the crate docs.
pub struct KvCache {
    pub(crate) cfg: KvConfig,
    pub(crate) k: Vec<Vec<u64>>,
    pub(crate) v: Vec<Vec<u64>>,
    pub(crate) pool: Pool,
    pub(crate) seqs: Vec<Option<Sequence>>,
    seq_gen: Vec<u32>,
    free_slots: Vec<u32>,
    pub(crate) prefix: PrefixIndex,
    pub(crate) forks: u64,
    pub(crate) cow_copies: u64,
    pub(crate) compactions: u64,
    /// Row conversion scratch.
    row: Vec<u8>,
    /// A head vector being rotated before it is stored.
    rot: Vec<f32>,
    /// Filled slots per block, the scratch of [`KvCache::stats`] (sized once, so reading
    /// the statistics allocates nothing).
    pub(crate) fill: std::sync::Mutex<Vec<u16>>,
    /// Prefix events since the last [`KvCache::drain_prefix_events`], while recording
    /// (`None`: not recording, nothing kept). Behind a mutex so a reader holding `&self`
    /// can switch recording on and drain.
    events: std::sync::Mutex<Option<Vec<PrefixEvent>>>,
}

impl KvCache {
    /// A cache with `cfg.n_blocks` blocks. Arenas are allocated zeroed (the operating system
    /// commits pages as they are first written).
    pub fn new(cfg: KvConfig) -> Result<KvCache, KvError> {
        KvCache::with_salt(cfg, 0)
    }

    /// A cache whose prefix keys are salted with `salt` (e.g. a hash of the model), so two
    /// caches never share a key space.
    pub fn with_salt(cfg: KvConfig, salt: u64) -> Result<KvCache, KvError> {
        cfg.validate()?;
        let kw = cfg.n_blocks * cfg.k_block_stride() / 8;
        let vw = cfg.n_blocks * cfg.v_block_stride() / 8;
        let row = vec![0u8; 4 * cfg.head_dim_k.max(cfg.head_dim_v)];
        let rot = vec![0f32; cfg.head_dim_k.max(cfg.head_dim_v)];
        let cfg_n_blocks = cfg.n_blocks;
        Ok(KvCache {
            k: (0..cfg.n_layer).map(|_| vec![0u64; kw]).collect(),
            v: (0..cfg.n_layer).map(|_| vec![0u64; vw]).collect(),
            pool: Pool::new(cfg.n_blocks, cfg.block_size),
            prefix: PrefixIndex::new(cfg.n_blocks, salt),
            cfg,
            seqs: Vec::new(),
            seq_gen: Vec::new(),
            free_slots: Vec::new(),
            forks: 0,
            cow_copies: 0,
            compactions: 0,
            row,
            rot,
            fill: std::sync::Mutex::new(vec![0; cfg_n_blocks]),
            events: std::sync::Mutex::new(None),
        })
    }

    /// The configuration the cache was built with.
    pub fn config(&self) -> &KvConfig {
        &self.cfg
    }

    pub(crate) fn seq(&self, id: SeqId) -> Result<&Sequence, KvError> {
        match (self.seqs.get(id.index()), self.seq_gen.get(id.index())) {
            (Some(Some(s)), Some(&g)) if g == id.generation => Ok(s),
            _ => Err(KvError::SequenceNotFound { seq: id }),
        }
    }

    fn seq_mut(&mut self, id: SeqId) -> Result<&mut Sequence, KvError> {
        match (self.seqs.get_mut(id.index()), self.seq_gen.get(id.index())) {
            (Some(Some(s)), Some(&g)) if g == id.generation => Ok(s),
            _ => Err(KvError::SequenceNotFound { seq: id }),
        }
    }

    /// The live sequences.
    pub fn sequences(&self) -> Vec<SeqId> {
        self.seqs
            .iter()
            .enumerate()
            .filter(|(_, s)| s.is_some())
            .map(|(i, _)| SeqId {
                slot: i as u32,
                generation: self.seq_gen[i],
            })
            .collect()
    }

    /// A new, empty sequence. `max_tokens` sizes its tables once (so growing to that length
    /// never allocates); it is not a limit.
    pub fn create_sequence(&mut self, max_tokens: usize) -> SeqId {
        let n = self.cfg.blocks_for_tokens(max_tokens);
        let s = Sequence {
            blocks: Vec::with_capacity(n),
            keys: Vec::with_capacity(n),
            len: 0,
        };
        let slot = match self.free_slots.pop() {
            Some(slot) => {
                self.seqs[slot as usize] = Some(s);
                slot
            }
            None => {
                self.seqs.push(Some(s));
                self.seq_gen.push(0);
                (self.seqs.len() - 1) as u32
            }
        };
        let g = &mut self.seq_gen[slot as usize];
        *g = g.wrapping_add(1);
        SeqId {
            slot,
            generation: *g,
        }
    }

    /// A new sequence with blocks reserved for `n_tokens` positions.
    pub fn allocate(&mut self, n_tokens: usize) -> Result<SeqId, KvError> {
        let id = self.create_sequence(n_tokens);
        if let Err(e) = self.extend(id, n_tokens) {
            self.free_sequence(id)?;
            return Err(e);
        }
        Ok(id)
    }

    /// Positions held by `seq`.
    pub fn len(&self, seq: SeqId) -> Result<usize, KvError> {
        Ok(self.seq(seq)?.len)
    }

    /// The block ids `seq` holds, in position order: those holding its positions, then any
    /// reserved by [`KvCache::extend`].
    pub fn block_table(&self, seq: SeqId) -> Result<&[u32], KvError> {
        Ok(&self.seq(seq)?.blocks)
    }

    /// How many sequences hold block `b` (0 for free or idle cached blocks).
    pub fn ref_count(&self, b: u32) -> u32 {
        self.pool.refs.get(b as usize).copied().unwrap_or(0)
    }

    /// Starts (`true`) or stops recording [`PrefixEvent`]s: blocks entering the prefix
    /// index ([`KvCache::commit`]) and leaving it (eviction). Off by default (nothing is
    /// recorded nor allocated). Switching on drops nothing already cached: a consumer
    /// starting late learns of the blocks stored from then on.
    pub fn set_prefix_events(&self, on: bool) {
        let mut e = self.events.lock().unwrap_or_else(|e| e.into_inner());
        match (on, e.is_some()) {
            (true, false) => *e = Some(Vec::new()),
            (false, true) => *e = None,
            _ => {}
        }
    }

    /// Moves the recorded prefix events, oldest first, to the end of `out`.
    pub fn drain_prefix_events(&self, out: &mut Vec<PrefixEvent>) {
        let mut e = self.events.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(ev) = e.as_mut() {
            out.append(ev);
        }
    }

    fn record(&mut self, event: impl FnOnce(&Self) -> PrefixEvent) {
        let on = self
            .events
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .is_some();
        if on {
            let ev = event(self);
            if let Some(v) = self
                .events
                .get_mut()
                .unwrap_or_else(|e| e.into_inner())
                .as_mut()
            {
                v.push(ev);
            }
        }
    }

    /// Takes a block from the pool, evicting an idle cached block if none is free.
    fn take_block(&mut self) -> Result<u32, KvError> {
        match self.pool.take() {
            Some((b, evicted)) => {
                if let Some(key) = evicted {
                    self.prefix.evict(key);
                    self.record(|_| PrefixEvent::Removed { key });
                }
                Ok(b)
            }
            None => Err(KvError::OutOfMemory {
                needed: 1,
                available: 0,
            }),
        }
    }

    /// Whether writing into block `b` needs a private copy first: it is shared, or it is
    /// registered in the prefix index (whose content must not change).
    fn must_copy(&self, b: u32) -> bool {
        self.pool.refs[b as usize] > 1 || self.pool.key[b as usize].is_some()
    }

    /// Makes block `bi` of `seq` private: copies it (all layers, K and V, token ids) into a
    /// fresh block.
    fn copy_on_write(&mut self, seq: SeqId, bi: usize) -> Result<(), KvError> {
        let old = self.seq(seq)?.blocks[bi];
        let new = self.take_block()?;
        let (ks, vs) = (self.cfg.k_block_stride() / 8, self.cfg.v_block_stride() / 8);
        let (o, n) = (old as usize, new as usize);
        for arena in self.k.iter_mut() {
            arena.copy_within(o * ks..(o + 1) * ks, n * ks);
        }
        for arena in self.v.iter_mut() {
            arena.copy_within(o * vs..(o + 1) * vs, n * vs);
        }
        let bs = self.cfg.block_size;
        self.pool.tokens.copy_within(o * bs..(o + 1) * bs, n * bs);
        self.seq_mut(seq)?.blocks[bi] = new;
        self.pool.release(old);
        self.cow_copies += 1;
        Ok(())
    }

    /// Makes room for `n_tokens` more positions in `seq`: reserves the blocks they need and
    /// makes the partly filled last block private if it is shared or cached. Either all of
    /// it happens or, with [`KvError::OutOfMemory`], nothing.
    pub fn extend(&mut self, seq: SeqId, n_tokens: usize) -> Result<(), KvError> {
        let bs = self.cfg.block_size;
        let s = self.seq(seq)?;
        let need = self.cfg.blocks_for_tokens(s.len + n_tokens);
        let grow = need.saturating_sub(s.blocks.len());
        let tail = (n_tokens > 0 && !s.len.is_multiple_of(bs)).then_some(s.len / bs);
        let cow = tail.filter(|&bi| self.must_copy(s.blocks[bi]));
        let needed = grow + cow.is_some() as usize;
        if needed > self.pool.available() {
            return Err(KvError::OutOfMemory {
                needed,
                available: self.pool.available(),
            });
        }
        if let Some(bi) = cow {
            self.copy_on_write(seq, bi)?;
        }
        for _ in 0..grow {
            let b = self.take_block()?;
            self.seq_mut(seq)?.blocks.push(b);
        }
        Ok(())
    }

    /// Claims the next `tokens.len()` positions of `seq` for these token ids (reserving
    /// blocks and copying a shared last block as [`KvCache::extend`] does) and returns them.
    /// The caller then writes every layer's K and V at those positions.
    pub fn append(&mut self, seq: SeqId, tokens: &[u32]) -> Result<Range<usize>, KvError> {
        self.extend(seq, tokens.len())?;
        let bs = self.cfg.block_size;
        let idx = seq.index();
        let s = match self.seqs.get_mut(idx) {
            Some(Some(s)) => s,
            _ => return Err(KvError::SequenceNotFound { seq }),
        };
        let start = s.len;
        for (i, &t) in tokens.iter().enumerate() {
            let pos = start + i;
            let b = s.blocks[pos / bs];
            self.pool.block_tokens_mut(b)[pos % bs] = t;
        }
        s.len += tokens.len();
        Ok(start..s.len)
    }

    /// A new sequence sharing all of `seq`'s positions. Blocks are shared (reference counts
    /// go up) until one side writes to one, which then gets a private copy.
    pub fn fork_sequence(&mut self, seq: SeqId) -> Result<SeqId, KvError> {
        let (len, cap) = {
            let s = self.seq(seq)?;
            (s.len, s.blocks.capacity() * self.cfg.block_size)
        };
        let child = self.create_sequence(cap.max(len));
        let used = self.cfg.blocks_for_tokens(len);
        let (blocks, keys): (Vec<u32>, Vec<u64>) = {
            let s = self.seq(seq)?;
            (s.blocks[..used].to_vec(), s.keys.clone())
        };
        for &b in &blocks {
            self.pool.retain(b);
        }
        let c = self.seq_mut(child)?;
        c.blocks.extend_from_slice(&blocks);
        c.keys.extend_from_slice(&keys);
        c.len = len;
        self.forks += 1;
        Ok(child)
    }

    /// Frees a sequence: its blocks return to the pool (cached ones stay findable until the
    /// space is needed; the tail blocks are queued for eviction before the head blocks).
    pub fn free_sequence(&mut self, seq: SeqId) -> Result<(), KvError> {
        self.seq(seq)?;
        let s = match self.seqs[seq.index()].take() {
            Some(s) => s,
            None => return Err(KvError::SequenceNotFound { seq }),
        };
        for &b in s.blocks.iter().rev() {
            self.pool.release(b);
        }
        self.free_slots.push(seq.slot);
        Ok(())
    }

    /// Forgets positions `len..` of `seq` (and any blocks reserved past them).
    pub fn truncate(&mut self, seq: SeqId, len: usize) -> Result<(), KvError> {
        let bs = self.cfg.block_size;
        let keep = self.cfg.blocks_for_tokens(len.min(self.seq(seq)?.len));
        let s = self.seq_mut(seq)?;
        let len = len.min(s.len);
        s.len = len;
        s.keys.truncate(len / bs);
        // Released in place, without a list of them: a rollback of rejected speculative
        // positions runs every engine step, which must not allocate.
        let mut blocks = std::mem::take(&mut s.blocks);
        for b in blocks.drain(keep..).rev() {
            self.pool.release(b);
        }
        self.seq_mut(seq)?.blocks = blocks;
        Ok(())
    }

    fn check_access(&self, seq: SeqId, layer: usize, pos: usize, n: usize) -> Result<(), KvError> {
        let len = self.seq(seq)?.len;
        if layer >= self.cfg.n_layer || pos + n > len {
            return Err(KvError::InvalidPageAccess {
                seq,
                layer,
                pos: pos + n.saturating_sub(1),
                len,
            });
        }
        Ok(())
    }

    /// Writes the K and V vectors (all KV heads, `f32`) of `n` consecutive positions from
    /// `pos0` for one layer, converting them to the stored types. `k` holds `n` rows of
    /// `n_kv_head · head_dim_k` values, `v` of `n_kv_head · head_dim_v`. A write to a block
    /// shared with another sequence, or cached, goes to a private copy first.
    pub fn write_rows(
        &mut self,
        seq: SeqId,
        layer: usize,
        pos0: usize,
        k: &[f32],
        v: &[f32],
    ) -> Result<(), KvError> {
        let kd = self.cfg.n_kv_head * self.cfg.head_dim_k;
        let vd = self.cfg.n_kv_head * self.cfg.head_dim_v;
        if !k.len().is_multiple_of(kd) {
            return Err(KvError::RowLength {
                what: "K rows",
                expected: k.len() / kd * kd + kd,
                actual: k.len(),
            });
        }
        let n = k.len() / kd;
        if v.len() != n * vd {
            return Err(KvError::RowLength {
                what: "V rows",
                expected: n * vd,
                actual: v.len(),
            });
        }
        self.check_access(seq, layer, pos0, n)?;
        let bs = self.cfg.block_size;
        if n > 0 {
            // Copies needed first, so running out of blocks changes nothing.
            let s = self.seq(seq)?;
            let needed = (pos0 / bs..=(pos0 + n - 1) / bs)
                .filter(|&bi| self.must_copy(s.blocks[bi]))
                .count();
            if needed > self.pool.available() {
                return Err(KvError::OutOfMemory {
                    needed,
                    available: self.pool.available(),
                });
            }
        }
        for t in 0..n {
            let pos = pos0 + t;
            let bi = pos / bs;
            if self.must_copy(self.seq(seq)?.blocks[bi]) {
                self.copy_on_write(seq, bi)?;
            }
            let b = self.seq(seq)?.blocks[bi] as usize;
            self.store(
                layer,
                b,
                pos % bs,
                &k[t * kd..(t + 1) * kd],
                &v[t * vd..(t + 1) * vd],
            )?;
        }
        Ok(())
    }

    /// [`KvCache::write_rows`] for one position.
    pub fn write(
        &mut self,
        seq: SeqId,
        layer: usize,
        pos: usize,
        k: &[f32],
        v: &[f32],
    ) -> Result<(), KvError> {
        let kd = self.cfg.n_kv_head * self.cfg.head_dim_k;
        if k.len() != kd {
            return Err(KvError::RowLength {
                what: "K row",
                expected: kd,
                actual: k.len(),
            });
        }
        self.write_rows(seq, layer, pos, k, v)
    }

    /// Converts and stores one position's vectors into slot `slot` of block `b`.
    fn store(
        &mut self,
        layer: usize,
        b: usize,
        slot: usize,
        k: &[f32],
        v: &[f32],
    ) -> Result<(), KvError> {
        let cfg = &self.cfg;
        let (hk, hv, bs) = (cfg.head_dim_k, cfg.head_dim_v, cfg.block_size);
        let k_arena: &mut [u8] = bytemuck::cast_slice_mut(&mut self.k[layer]);
        let kbase = b * cfg.k_block_stride();
        for (h, src) in k.chunks_exact(hk).enumerate() {
            let page = kbase + h * cfg.k_page_bytes();
            match (cfg.k_layout(), cfg.k_type) {
                (PageLayout::DimMajor, KvType::F32) => {
                    for (d, &x) in src.iter().enumerate() {
                        let at = page + (d * bs + slot) * 4;
                        k_arena[at..at + 4].copy_from_slice(&x.to_le_bytes());
                    }
                }
                (PageLayout::DimMajor, _) => {
                    let tmp = &mut self.row[..2 * hk];
                    store_row(GgmlType::F16, src, tmp)?;
                    for d in 0..hk {
                        let at = page + (d * bs + slot) * 2;
                        k_arena[at..at + 2].copy_from_slice(&tmp[2 * d..2 * d + 2]);
                    }
                }
                (PageLayout::TokenMajor, ty) => {
                    let rb = cfg.k_row_bytes();
                    let at = page + slot * rb;
                    let src = rotated(&mut self.rot, src, cfg.k_rotation());
                    store_row(ty.ggml(), src, &mut k_arena[at..at + rb])?;
                }
            }
        }
        let v_arena: &mut [u8] = bytemuck::cast_slice_mut(&mut self.v[layer]);
        let vbase = b * cfg.v_block_stride();
        let rb = cfg.v_row_bytes();
        for (h, src) in v.chunks_exact(hv).enumerate() {
            let at = vbase + h * cfg.v_page_bytes() + slot * rb;
            let src = rotated(&mut self.rot, src, cfg.v_rotation());
            store_row(cfg.v_type.ggml(), src, &mut v_arena[at..at + rb])?;
        }
        Ok(())
    }

    /// Reads back position `pos` of one layer as `f32` (dequantized, and rotated back when
    /// the stored form is rotated — [`KvConfig::k_rotation`]): `k` gets
    /// `n_kv_head · head_dim_k` values, `v` `n_kv_head · head_dim_v`.
    pub fn read(
        &self,
        seq: SeqId,
        layer: usize,
        pos: usize,
        k: &mut [f32],
        v: &mut [f32],
    ) -> Result<(), KvError> {
        let cfg = &self.cfg;
        let (hk, hv, bs) = (cfg.head_dim_k, cfg.head_dim_v, cfg.block_size);
        for (what, got, want) in [
            ("K row", k.len(), cfg.n_kv_head * hk),
            ("V row", v.len(), cfg.n_kv_head * hv),
        ] {
            if got != want {
                return Err(KvError::RowLength {
                    what,
                    expected: want,
                    actual: got,
                });
            }
        }
        self.check_access(seq, layer, pos, 1)?;
        let b = self.seq(seq)?.blocks[pos / bs] as usize;
        let slot = pos % bs;
        let k_arena: &[u8] = bytemuck::cast_slice(&self.k[layer]);
        for (h, dst) in k.chunks_exact_mut(hk).enumerate() {
            let page = b * cfg.k_block_stride() + h * cfg.k_page_bytes();
            match (cfg.k_layout(), cfg.k_type) {
                (PageLayout::DimMajor, KvType::F32) => {
                    for (d, o) in dst.iter_mut().enumerate() {
                        let at = page + (d * bs + slot) * 4;
                        *o = f32::from_le_bytes([
                            k_arena[at],
                            k_arena[at + 1],
                            k_arena[at + 2],
                            k_arena[at + 3],
                        ]);
                    }
                }
                (PageLayout::DimMajor, _) => {
                    for (d, o) in dst.iter_mut().enumerate() {
                        let at = page + (d * bs + slot) * 2;
                        *o = f16::from_le_bytes([k_arena[at], k_arena[at + 1]]).to_f32();
                    }
                }
                (PageLayout::TokenMajor, ty) => {
                    let rb = cfg.k_row_bytes();
                    let at = page + slot * rb;
                    kiln_quant::dequantize_row(ty.ggml(), &k_arena[at..at + rb], dst)?;
                    if let Some(n) = cfg.k_rotation() {
                        hadamard_rotate(dst, n);
                    }
                }
            }
        }
        let v_arena: &[u8] = bytemuck::cast_slice(&self.v[layer]);
        let rb = cfg.v_row_bytes();
        for (h, dst) in v.chunks_exact_mut(hv).enumerate() {
            let at = b * cfg.v_block_stride() + h * cfg.v_page_bytes() + slot * rb;
            kiln_quant::dequantize_row(cfg.v_type.ggml(), &v_arena[at..at + rb], dst)?;
            if let Some(n) = cfg.v_rotation() {
                hadamard_rotate(dst, n);
            }
        }
        Ok(())
    }

    /// What attention reads for one layer of `seq`: its pages, in order.
    pub fn layer_view(&self, seq: SeqId, layer: usize) -> Result<LayerView<'_>, KvError> {
        let s = self.seq(seq)?;
        if layer >= self.cfg.n_layer {
            return Err(KvError::InvalidPageAccess {
                seq,
                layer,
                pos: 0,
                len: s.len,
            });
        }
        let used = self.cfg.blocks_for_tokens(s.len);
        Ok(LayerView::new(
            &self.cfg,
            &self.k[layer],
            &self.v[layer],
            &s.blocks[..used],
            s.len,
        ))
    }

    /// Registers the full blocks of `seq` not yet registered in the prefix index (call once
    /// their K and V are written for every layer). Returns how many blocks became findable.
    /// A block whose content is already cached in another block stays private.
    pub fn commit(&mut self, seq: SeqId) -> Result<usize, KvError> {
        let bs = self.cfg.block_size;
        let (full, done) = {
            let s = self.seq(seq)?;
            (s.len / bs, s.keys.len())
        };
        let mut registered = 0;
        for i in done..full {
            let s = self.seq(seq)?;
            let parent_key = if i == 0 {
                self.prefix.root()
            } else {
                s.keys[i - 1]
            };
            let b = s.blocks[i];
            let parent = if i == 0 { NONE } else { s.blocks[i - 1] };
            let key = chain_key(parent_key, self.pool.block_tokens(b));
            if self.prefix.get(key).is_none() && self.pool.key[b as usize].is_none() {
                self.prefix.insert(key, b);
                self.pool.key[b as usize] = Some(key);
                self.pool.parent[b as usize] = if parent == NONE {
                    (NONE, 0)
                } else {
                    (parent, self.pool.generation[parent as usize])
                };
                let parent_key = (i > 0).then_some(parent_key);
                self.record(|c| PrefixEvent::Stored {
                    key,
                    parent: parent_key,
                    tokens: c.pool.block_tokens(b).to_vec(),
                });
                registered += 1;
            }
            self.seq_mut(seq)?.keys.push(key);
        }
        Ok(registered)
    }

    /// The cached block that continues a match at `parent` (`NONE` at the start) with these
    /// tokens, verified: same tokens, and computed right after `parent`.
    fn find_block(&self, key: u64, tokens: &[u32], parent: u32) -> Option<u32> {
        let b = self.prefix.get(key)?;
        let i = b as usize;
        let parent_ok = if parent == NONE {
            self.pool.parent[i].0 == NONE
        } else {
            self.pool.parent[i] == (parent, self.pool.generation[parent as usize])
        };
        (self.pool.key[i] == Some(key) && parent_ok && self.pool.block_tokens(b) == tokens)
            .then_some(b)
    }

    /// Length (in tokens, whole blocks) of the longest cached prefix of `tokens`, at most
    /// `max_tokens`. Changes nothing, counts nothing.
    pub fn lookup_prefix(&self, tokens: &[u32], max_tokens: usize) -> usize {
        let bs = self.cfg.block_size;
        let mut key = self.prefix.root();
        let mut parent = NONE;
        let mut n = 0;
        for chunk in tokens[..max_tokens.min(tokens.len())].chunks_exact(bs) {
            key = chain_key(key, chunk);
            match self.find_block(key, chunk, parent) {
                Some(b) => {
                    parent = b;
                    n += bs;
                }
                None => break,
            }
        }
        n
    }

    /// Starts the empty sequence `seq` with the longest cached prefix of `tokens` (whole
    /// blocks, at most `max_tokens` positions; pass `tokens.len() - 1` to keep one token to
    /// evaluate). The blocks are shared, not copied. Counts the query in the prefix stats.
    pub fn attach_prefix(
        &mut self,
        seq: SeqId,
        tokens: &[u32],
        max_tokens: usize,
    ) -> Result<PrefixHit, KvError> {
        let len = self.seq(seq)?.len;
        if len != 0 {
            return Err(KvError::SequenceNotEmpty { seq, len });
        }
        // Reserved but unused blocks go back first: the prefix replaces them.
        let reserved: Vec<u32> = self.seq_mut(seq)?.blocks.drain(..).rev().collect();
        for b in reserved {
            self.pool.release(b);
        }
        self.prefix.stats.queries += 1;
        self.prefix.stats.tokens_queried += tokens.len() as u64;
        let bs = self.cfg.block_size;
        let limit = max_tokens.min(tokens.len());
        if limit < bs {
            self.prefix.stats.miss_short += 1;
            return Ok(PrefixHit {
                tokens: 0,
                miss: Some(MissReason::ShorterThanBlock),
            });
        }
        let mut key = self.prefix.root();
        let mut parent = NONE;
        let mut n = 0;
        let mut first_miss = None;
        for chunk in tokens[..limit].chunks_exact(bs) {
            key = chain_key(key, chunk);
            match self.find_block(key, chunk, parent) {
                Some(b) => {
                    self.pool.retain(b);
                    let s = self.seq_mut(seq)?;
                    s.blocks.push(b);
                    s.keys.push(key);
                    s.len += bs;
                    parent = b;
                    n += bs;
                }
                None => {
                    first_miss = Some(key);
                    break;
                }
            }
        }
        let st = &mut self.prefix.stats;
        if n > 0 {
            st.hits += 1;
            st.tokens_saved += n as u64;
            return Ok(PrefixHit {
                tokens: n,
                miss: None,
            });
        }
        let reason = match first_miss {
            Some(k) if self.prefix.was_evicted(k) => MissReason::Evicted,
            _ => MissReason::NeverSeen,
        };
        let st = &mut self.prefix.stats;
        match reason {
            MissReason::Evicted => st.miss_evicted += 1,
            _ => st.miss_never_seen += 1,
        }
        Ok(PrefixHit {
            tokens: 0,
            miss: Some(reason),
        })
    }
}

/// `src`, or its copy in `buf` rotated by Walsh–Hadamard blocks of `n` values.
fn rotated<'a>(buf: &'a mut [f32], src: &'a [f32], n: Option<usize>) -> &'a [f32] {
    match n {
        Some(n) => {
            let r = &mut buf[..src.len()];
            r.copy_from_slice(src);
            hadamard_rotate(r, n);
            r
        }
        None => src,
    }
}
