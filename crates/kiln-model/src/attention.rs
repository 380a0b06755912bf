//! Causal multi-head attention with grouped KV heads, read straight from the paged KV cache
//! (`kiln-kv`) in its stored form.
//!
//! For an f16 cache there are llama.cpp's two arithmetics of CPU flash attention, chosen per
//! row as llama.cpp chooses them (see `crate::model::PROMPT_ATTENTION_MIN_ROWS`):
//! - **one-row** (decode, short prompts; llama.cpp's `one_chunk` path): the query is rounded
//!   to f16, each score is an f16·f16 dot product accumulated in f32 in the order of ggml's
//!   `ggml_vec_dot_f16` (`kiln_quant::attn::AttnKernels::scores_rows_f16_split`: 64 lane
//!   sums folded by a fixed tree), and the weighted sum of values is accumulated in f16 with
//!   one rounding per multiply-add;
//! - **prompt** (rows of a prompt of 64 tokens or more; llama.cpp's tiled path): the query
//!   stays f32, the f16 keys and values are widened exactly, scores are fused f32 dot
//!   products and the values are accumulated in f32; for a float cache with K and V of one
//!   type the softmax runs tile by tile, as llama.cpp's tiled path runs it: per chunk of
//!   keys one maximum, the accumulator and sum rescaled once, and every weight by
//!   kiln-quant's vector `exp` (`AttnKernels::softmax_weights`; the chunks are whole pages
//!   of about 128 keys on a grid fixed by position, so they depend on the page size but not
//!   on the batch or the thread split).
//!
//! In both, each score is scaled (soft-capped, `c·tanh(s)`, for Gemma 2), the softmax is
//! computed online (running maximum and sum, `exp` in f32) — key by key with glibc's `expf`
//! algorithm (`kiln_quant::attn::expf`, the same bits on every platform) in the one-row
//! arithmetic — and the sum is multiplied by `1/sum` at the end. Matching these roundings keeps Kiln's outputs as close
//! to llama.cpp's as these models allow (see `docs/correctness.md`): the one-row arithmetic
//! reproduces llama.cpp's greedy decoding, the prompt arithmetic its perplexity and KL figures
//! (with the one-row arithmetic for prompts too, an f16 cache lost 0.0035 nats of KL to an
//! f32 cache on SmolLM2 where llama.cpp loses none).
//! Other stored types (see `docs/kv-cache.md`): f32 K — f32 query, fused multiply-add dot;
//! q8_0 / q4_0 / q4_1 / q5_0 K — the query quantized to the type's `vec_dot_type` and
//! kiln-quant's integer dot (ggml's `vec_dot`); f32 or quantized V — rows (dequantized per
//! block) accumulated in f32. Block-quantized K / V may be stored rotated by an orthonormal
//! Walsh–Hadamard transform (llama.cpp's `attn_rot_k` / `attn_rot_v`, see
//! `kiln_kv::KvConfig::k_rotation`): then each query is rotated the same way before it is
//! quantized, and each output row is rotated back before the output projection.
//!
//! Every query row is computed independently, keys in position order with one fixed
//! summation order, so results depend neither on the batch a row runs in nor on the thread
//! count. The inner loops are kiln-quant's attention kernels (`kiln_quant::attn`), whose
//! SIMD forms equal the scalar oracle bit for bit. Work is split over (the query heads of one
//! KV group, tile of tokens), for all the sequences of a batched step in one pass (a group's
//! heads split among more tasks when there are fewer tasks than threads); within a task,
//! keys are walked in chunks of pages and each chunk serves every row of the task — through
//! the many-row kernels, which load each key and value once for several rows — before the
//! next is read, so K/V is read once per group and prefill reuses K/V pages from cache.

use half::f16;
use kiln_kv::{KvType, LayerView};
use kiln_quant::GgmlType;
use kiln_quant::attn::{AttnKernels, attn_kernels, exp, hadamard_rotate};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::{ModelConfig, ModelError};

/// Per-call geometry of one attention evaluation.
pub struct AttnShape {
    /// Position of the first query token.
    pub pos0: usize,
    /// Number of query tokens.
    pub n_tokens: usize,
    /// Attend only to the last `window` positions (sliding-window layers), or all.
    pub window: Option<usize>,
}

/// Query rows per task (the query heads of one KV group times a tile of tokens): every
/// K/V chunk read serves all of them.
const TILE_ROWS: usize = 64;

/// Tokens per task when each of its tokens brings `heads` query rows.
fn tile_tokens(heads: usize) -> usize {
    (TILE_ROWS / heads.max(1)).max(1)
}
/// Keys per chunk (rounded to whole pages).
const CHUNK_KEYS: usize = 128;

/// Buffers of one task (one query head × one tile of rows), sized once.
struct Slot {
    /// The tile's queries in the form the key kernel takes (f16-rounded or f32).
    q: Vec<f32>,
    /// The tile's queries quantized to the K type's `vec_dot_type`.
    qa: Vec<u8>,
    scores: Vec<f32>,
    ms: Vec<f32>,
    vs: Vec<f32>,
    acc16: Vec<f16>,
    acc32: Vec<f32>,
    max: Vec<f32>,
    sum: Vec<f32>,
    /// A chunk of dequantized V rows (quantized V only).
    vdq: Vec<f32>,
    pages_k: Vec<usize>,
    pages_v: Vec<usize>,
}

/// The shape of one task's buffers (see [`Slot`]).
#[derive(Clone, Copy)]
struct SlotDims {
    rows: usize,
    hd: usize,
    hdv: usize,
    qa: usize,
    keys: usize,
    pages: usize,
    v_type: KvType,
}

impl SlotDims {
    fn slot(&self) -> Slot {
        let SlotDims {
            rows,
            hd,
            hdv,
            qa,
            keys,
            v_type,
            ..
        } = *self;
        Slot {
            q: vec![0.0; rows * hd],
            qa: vec![0; rows * qa],
            scores: vec![0.0; rows * keys],
            ms: vec![0.0; rows * keys],
            vs: vec![0.0; rows * keys],
            acc16: vec![f16::ZERO; if v_type == KvType::F16 { rows * hdv } else { 0 }],
            acc32: vec![0.0; rows * hdv],
            max: vec![0.0; rows],
            sum: vec![0.0; rows],
            vdq: vec![0.0; if v_type.is_float() { 0 } else { keys * hdv }],
            pages_k: vec![0; self.pages],
            pages_v: vec![0; self.pages],
        }
    }

    fn bytes(&self) -> usize {
        let s = self.slot();
        4 * (s.q.len() + s.scores.len() * 3 + s.acc32.len() + s.max.len() * 2 + s.vdq.len())
            + s.qa.len()
            + 2 * s.acc16.len()
            + 8 * (s.pages_k.len() + s.pages_v.len())
    }
}

/// Everything the attention needs besides its inputs: a pool of task buffers (a task takes
/// one while it runs, so there are about as many as threads, made on first need), and the
/// tasks' output pieces before they are interleaved.
pub(crate) struct AttnScratch {
    pool: SlotPool,
    head_out: Vec<f32>,
    /// The tasks of a call (empty between calls; kept for its allocation).
    tasks: Vec<Task<'static>>,
}

/// One parallel task: sequence, first query head and number of heads (all of one KV
/// group), first token, and its piece of the output (rows token-major, then head). Behind
/// an uncontended lock, through which the pool's thread that runs the task takes it.
type Task<'a> = Mutex<(usize, usize, usize, usize, &'a mut [f32])>;

/// An empty task list with `v`'s allocation, for any lifetime (the tasks borrow one call's
/// output; the allocation is kept for every call).
fn recycle<'b>(mut v: Vec<Task<'_>>) -> Vec<Task<'b>> {
    v.clear();
    // Collecting an emptied vector's iterator into one of a same-layout type reuses its
    // allocation.
    v.into_iter()
        .map(|_| unreachable!("the vector is empty"))
        .collect()
}

/// Task buffers, shared by the parallel tasks of one call.
struct SlotPool {
    free: Mutex<Vec<Slot>>,
    made: AtomicUsize,
    dims: SlotDims,
}

impl AttnScratch {
    /// Scratch for batches of up to `n_batch` tokens of a model with this shape, over a
    /// cache with `block_size`-token pages and these stored types.
    pub(crate) fn new(
        cfg: &ModelConfig,
        n_batch: usize,
        block_size: usize,
        k_type: KvType,
        v_type: KvType,
    ) -> AttnScratch {
        let pages = chunk_pages(block_size);
        let (hd, hdv) = (cfg.head_dim, cfg.head_dim_v);
        let dims = SlotDims {
            // A task's rows never exceed `tile_tokens(hs)·hs ≤ max(TILE_ROWS, group)`.
            rows: TILE_ROWS
                .max(cfg.n_head / cfg.n_head_kv)
                .min(n_batch.max(1) * (cfg.n_head / cfg.n_head_kv)),
            hd,
            hdv,
            qa: if k_type.is_float() {
                0
            } else {
                act_row_bytes(k_type, hd)
            },
            keys: pages * block_size,
            pages,
            v_type,
        };
        AttnScratch {
            pool: SlotPool {
                free: Mutex::new(Vec::new()),
                made: AtomicUsize::new(0),
                dims,
            },
            head_out: vec![0.0; n_batch.max(1) * cfg.n_head * hdv],
            tasks: Vec::new(),
        }
    }

    /// Bytes held (task buffers made so far and the output).
    pub(crate) fn bytes(&self) -> usize {
        let p = &self.pool;
        p.dims.bytes() * p.made.load(Ordering::Relaxed) + 4 * self.head_out.len()
    }
}

impl SlotPool {
    /// Makes task buffers until there are `n` (one per thread that may run a task), so
    /// a call after the first makes none.
    fn fill(&self, n: usize) {
        while self.made.load(Ordering::Relaxed) < n {
            self.made.fetch_add(1, Ordering::Relaxed);
            let slot = self.dims.slot();
            self.give(slot);
        }
    }

    /// A task buffer: a free one, or a new one when every one made is in use.
    fn take(&self) -> Slot {
        let free = self.free.lock().unwrap_or_else(|e| e.into_inner()).pop();
        free.unwrap_or_else(|| {
            self.made.fetch_add(1, Ordering::Relaxed);
            self.dims.slot()
        })
    }

    fn give(&self, slot: Slot) {
        self.free
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(slot);
    }
}

/// One sequence's part of a batched attention call: its query rows (token-major, `n_tokens ×
/// n_head·head_dim`), their geometry, and its KV cache layer.
pub(crate) struct SeqAttn<'a> {
    pub(crate) shape: AttnShape,
    pub(crate) q: &'a [f32],
    pub(crate) kv: LayerView<'a>,
    /// Prompt arithmetic (f32 query and accumulator) rather than one-row arithmetic, for an
    /// f16 cache (see the module docs).
    pub(crate) prompt: bool,
}

/// Keys per chunk of the walk over the cache — the tiles of the prompt arithmetic's
/// softmax, on a grid from position 0 — for pages of `block_size` tokens.
#[cfg(test)]
pub(crate) fn chunk_keys(block_size: usize) -> usize {
    chunk_pages(block_size) * block_size
}

/// Pages per chunk: about [`CHUNK_KEYS`] keys.
fn chunk_pages(block_size: usize) -> usize {
    (CHUNK_KEYS / block_size).max(1)
}

/// The type a query is converted to before the integer dot with quantized keys.
fn act_type(k_type: KvType) -> GgmlType {
    match k_type {
        KvType::Q4_1 => GgmlType::Q8_1,
        _ => GgmlType::Q8_0,
    }
}

fn act_row_bytes(k_type: KvType, hd: usize) -> usize {
    let t = act_type(k_type);
    hd / t.block_elems() * t.block_bytes()
}

/// Computes attention for `n_tokens` queries at positions `pos0..pos0+n_tokens`, each
/// attending to the cached positions up to its own (within the window). The cache must
/// already hold the keys and values of the query positions.
///
/// `q` is token-major (`n_tokens × n_head·head_dim`); the result is written token-major to
/// `out` (`n_tokens × n_head·head_dim_v`). `prompt` selects the prompt arithmetic for an
/// f16 cache (see the module docs).
#[cfg(test)]
pub(crate) fn attention(
    cfg: &ModelConfig,
    shape: &AttnShape,
    q: &[f32],
    kv: &LayerView<'_>,
    scratch: &mut AttnScratch,
    out: &mut [f32],
    prompt: bool,
) -> Result<(), ModelError> {
    attention_with(attn_kernels(), cfg, shape, q, kv, scratch, out, prompt)
}

/// [`attention`] with the given kernel table (tests compare ISAs).
#[cfg(test)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention_with(
    ak: &AttnKernels,
    cfg: &ModelConfig,
    shape: &AttnShape,
    q: &[f32],
    kv: &LayerView<'_>,
    scratch: &mut AttnScratch,
    out: &mut [f32],
    prompt: bool,
) -> Result<(), ModelError> {
    let seq = SeqAttn {
        shape: AttnShape { ..*shape },
        q,
        kv: *kv,
        prompt,
    };
    attention_batch_with(ak, cfg, std::slice::from_ref(&seq), scratch, out)
}

/// Attention for the rows of several sequences at once (a batched step): one parallel pass
/// over every (sequence, query head, tile of rows), so a step of many one-token decode rows
/// is one fork-join per layer rather than one per sequence. `out` is token-major over the
/// sequences' rows in order. Each task computes exactly what it would alone, so a row's
/// result does not depend on the batch.
pub(crate) fn attention_batch(
    cfg: &ModelConfig,
    seqs: &[SeqAttn<'_>],
    scratch: &mut AttnScratch,
    out: &mut [f32],
) -> Result<(), ModelError> {
    attention_batch_with(attn_kernels(), cfg, seqs, scratch, out)
}

fn attention_batch_with(
    ak: &AttnKernels,
    cfg: &ModelConfig,
    seqs: &[SeqAttn<'_>],
    scratch: &mut AttnScratch,
    out: &mut [f32],
) -> Result<(), ModelError> {
    let (n_head, hdv) = (cfg.n_head, cfg.head_dim_v);
    let n_tok: usize = seqs.iter().map(|s| s.shape.n_tokens).sum();
    let row = n_head * hdv;
    let AttnScratch {
        head_out,
        pool,
        tasks,
    } = scratch;
    let workers = kiln_quant::pool::current();
    let threads = workers.n_threads();
    pool.fill(threads);
    // Tasks are (query heads of one KV group) × (tile of tokens), so each K/V chunk read
    // serves every head of the group. When that gives fewer tasks than threads (decode of
    // a model with few KV heads), each group's heads are split among more tasks. A row's
    // arithmetic does not depend on which rows share its task.
    let group = n_head / cfg.n_head_kv;
    let base: usize = seqs
        .iter()
        .map(|s| cfg.n_head_kv * s.shape.n_tokens.div_ceil(tile_tokens(group)))
        .sum();
    let splits = threads.div_ceil(base.max(1)).clamp(1, group);
    let hs = group.div_ceil(splits);
    let tt = tile_tokens(hs);
    let mut rest = &mut head_out[..n_tok * row];
    // Disjoint output pieces, one per task: per sequence, per tile of tokens, per run of
    // heads.
    let mut tasks = recycle(std::mem::take(tasks));
    for (si, s) in seqs.iter().enumerate() {
        let m = s.shape.n_tokens;
        let mut t0 = 0;
        while t0 < m {
            let n = tt.min(m - t0);
            for g in 0..cfg.n_head_kv {
                let mut h0 = g * group;
                while h0 < (g + 1) * group {
                    let heads = hs.min((g + 1) * group - h0);
                    let (piece, r) = std::mem::take(&mut rest).split_at_mut(n * heads * hdv);
                    rest = r;
                    tasks.push(Mutex::new((si, h0, heads, t0, piece)));
                    h0 += heads;
                }
            }
            t0 += n;
        }
    }
    let pool = &*pool;
    // On kiln-quant's worker pool, as the matmuls before and after: its workers are still
    // spinning from the Q/K/V projections, where a rayon worker would have to be woken
    // (and, with both pools' threads awake, there would be more threads than cores).
    let failed = Mutex::new(None);
    let run = |i: usize| {
        let mut task = tasks[i].lock().unwrap_or_else(|e| e.into_inner());
        let (si, h0, heads, t0, o) = &mut *task;
        let s = &seqs[*si];
        let mut slot = pool.take();
        let r = run_tile(ak, cfg, s, *h0, *heads, *t0, &mut slot, o);
        pool.give(slot);
        if let Err(e) = r {
            failed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get_or_insert(e);
        }
    };
    workers.run(tasks.len(), &run);
    let result = match failed.into_inner().unwrap_or_else(|e| e.into_inner()) {
        Some(e) => Err(e),
        None => Ok(()),
    };
    if result.is_ok() {
        // Each piece's rows (token, then head) to their places in token-major `out`.
        // Tasks are in sequence order; `seq_base` is the first row of sequence `next`.
        let (mut seq_base, mut next) = (0, 0);
        for task in tasks.iter_mut() {
            let (si, h0, heads, t0, piece) = &*task.get_mut().unwrap_or_else(|e| e.into_inner());
            while next < *si {
                seq_base += seqs[next].shape.n_tokens;
                next += 1;
            }
            for (i, r) in piece.chunks_exact(hdv).enumerate() {
                let (t, h) = (seq_base + t0 + i / heads, h0 + i % heads);
                out[t * row + h * hdv..t * row + (h + 1) * hdv].copy_from_slice(r);
            }
        }
    }
    scratch.tasks = recycle(tasks);
    result
}

/// The first position a query at `pos` sees.
fn first_visible(pos: usize, window: Option<usize>) -> usize {
    match window {
        Some(w) if pos + 1 > w => pos + 1 - w,
        _ => 0,
    }
}

/// Query heads `h0..h0 + heads` (all of one KV group) of tokens `t0..` of the sequence, into
/// `out` (one row of `head_dim_v` per token and head, token-major; as many tokens as fit).
#[allow(clippy::too_many_arguments)]
fn run_tile(
    ak: &AttnKernels,
    cfg: &ModelConfig,
    seq: &SeqAttn<'_>,
    h0: usize,
    heads: usize,
    t0: usize,
    slot: &mut Slot,
    out: &mut [f32],
) -> Result<(), ModelError> {
    let (shape, q, kv) = (&seq.shape, seq.q, &seq.kv);
    // f16 accumulator: the one-row arithmetic over an f16 cache.
    let acc_f16 = kv.v_type() == KvType::F16 && !seq.prompt;
    // The softmax tile by tile: the prompt arithmetic over a float cache of one type (as
    // llama.cpp's tiled path); key by key otherwise.
    let tiled = seq.prompt && kv.k_type() == kv.v_type() && kv.k_type().is_float();
    let (hd, hdv, q_dim) = (cfg.head_dim, cfg.head_dim_v, cfg.q_dim());
    let rows = out.len() / hdv;
    let tokens = rows / heads;
    let g = h0 / (cfg.n_head / cfg.n_head_kv);
    let bs = kv.block_size();
    let (k_type, v_type) = (kv.k_type(), kv.v_type());
    let kq = kiln_quant::kernels();
    // With soft-capping (Gemma 2) a score is `c · tanh(dot · scale / c)`; the division is
    // folded into the scale as ggml does.
    // A query already scaled (`ModelConfig::scale_query`) takes scores unscaled.
    let softcap = cfg.attn_softcap;
    let score_scale = if cfg.scale_query { 1.0 } else { cfg.attn_scale };
    let scale = match softcap {
        Some(c) => score_scale / c,
        None => score_scale,
    };
    let qab = if k_type.is_float() {
        0
    } else {
        act_row_bytes(k_type, hd)
    };

    // Row `r` is token `t0 + r / heads`, query head `h0 + r % heads`.
    for r in 0..rows {
        let (t, h) = (t0 + r / heads, h0 + r % heads);
        let src = &q[t * q_dim + h * hd..t * q_dim + (h + 1) * hd];
        match k_type {
            KvType::F16 if !seq.prompt => ak.round_f16(src, &mut slot.q[r * hd..(r + 1) * hd]),
            KvType::F16 | KvType::F32 => slot.q[r * hd..(r + 1) * hd].copy_from_slice(src),
            _ => {
                // Keys stored rotated: rotate the query alike, `(H·q)·(H·k) = q·k`.
                let src = match kv.k_rotation() {
                    Some(nrot) => {
                        let qr = &mut slot.q[r * hd..(r + 1) * hd];
                        qr.copy_from_slice(src);
                        hadamard_rotate(qr, nrot);
                        &*qr
                    }
                    None => src,
                };
                kq.quantize_activations(
                    act_type(k_type),
                    src,
                    &mut slot.qa[r * qab..(r + 1) * qab],
                )?
            }
        }
        slot.max[r] = f32::NEG_INFINITY;
        slot.sum[r] = 0.0;
    }
    if acc_f16 {
        slot.acc16[..rows * hdv].fill(f16::ZERO);
    }
    slot.acc32[..rows * hdv].fill(0.0);

    let k_arena = kv.k_bytes();
    let v_arena = kv.v_bytes();
    let (k16, k32) = (kv.k_f16(), kv.k_f32());
    let (v16, v32) = (kv.v_f16(), kv.v_f32());
    let k_esize = match k_type {
        KvType::F16 => 2,
        KvType::F32 => 4,
        _ => 1,
    };
    let v_esize = match v_type {
        KvType::F16 => 2,
        KvType::F32 => 4,
        _ => 1,
    };
    let k_row = kv.config().k_row_bytes();
    let v_row = kv.config().v_row_bytes();

    let pos_first = shape.pos0 + t0;
    let key_lo = first_visible(pos_first, shape.window);
    let key_hi = pos_first + tokens; // exclusive: the last token's own position + 1
    // Keys `lo..hi` of token `tl` (of the tile) within the chunk `chunk_lo..chunk_hi`.
    let range = |tl: usize, chunk_lo: usize, chunk_hi: usize| {
        let pos = pos_first + tl;
        (
            first_visible(pos, shape.window).max(chunk_lo),
            (pos + 1).min(chunk_hi),
        )
    };
    let per_chunk = chunk_pages(bs);
    // Chunks on a grid fixed by position (not by the tile's first key), so a row's tiles
    // of keys — and the prompt arithmetic's per-tile maximum — do not depend on which
    // tokens share its task.
    let mut p0 = key_lo / bs / per_chunk * per_chunk;
    while p0 * bs < key_hi {
        let p1 = (p0 + per_chunk).min(key_hi.div_ceil(bs));
        let np = p1 - p0;
        let nk = np * bs;
        let (chunk_lo, chunk_hi) = (p0 * bs, p1 * bs);
        for (i, p) in (p0..p1).enumerate() {
            slot.pages_k[i] = kv.k_page(p, g) / k_esize;
            slot.pages_v[i] = kv.v_page(p, g) / v_esize;
        }
        if !v_type.is_float() {
            // Dequantize the chunk's V rows once for all rows of the tile.
            for i in 0..np {
                let at = slot.pages_v[i];
                kq.dequantize(
                    v_type.ggml(),
                    &v_arena[at..at + bs * v_row],
                    &mut slot.vdq[i * bs * hdv..(i + 1) * bs * hdv],
                )?;
            }
        }
        // Scores of every row against the whole chunk (row `r` at `r·nk`; keys a row does
        // not see are computed for float keys and ignored).
        let sc = &mut slot.scores[..rows * nk];
        let qs = &slot.q[..rows * hd];
        match (k16, k32) {
            // The one-row arithmetic sums each score in ggml's `vec_dot_f16` order.
            (Some(k), _) if !seq.prompt => {
                ak.scores_rows_f16_split(qs, hd, k, &slot.pages_k[..np], bs, scale, sc)
            }
            (Some(k), _) => ak.scores_rows_f16(qs, hd, k, &slot.pages_k[..np], bs, scale, sc),
            (_, Some(k)) => ak.scores_rows_f32(qs, hd, k, &slot.pages_k[..np], bs, scale, sc),
            _ => {
                for r in 0..rows {
                    let (lo, hi) = range(r / heads, chunk_lo, chunk_hi);
                    let qa = &slot.qa[r * qab..(r + 1) * qab];
                    for j in lo..hi {
                        let at = slot.pages_k[j / bs - p0] + (j % bs) * k_row;
                        let d = kq.dot(k_type.ggml(), &k_arena[at..at + k_row], qa)?;
                        sc[r * nk + j - chunk_lo] = d * scale;
                    }
                }
            }
        }
        // Online softmax over each row's visible keys, in order: the weights `ms`, `vs` of
        // key `j` at `r·nk + j - chunk_lo`.
        for r in 0..rows {
            let (lo, hi) = range(r / heads, chunk_lo, chunk_hi);
            let (max, mut sum) = (slot.max[r], slot.sum[r]);
            if lo >= hi {
                continue;
            }
            let span = r * nk + lo - chunk_lo..r * nk + hi - chunk_lo;
            if tiled {
                // Tile by tile: one maximum for the chunk, what was accumulated rescaled
                // once (at the row's first key of the chunk), every weight from it.
                let s = &mut sc[span.clone()];
                if let Some(c) = softcap {
                    for s in s.iter_mut() {
                        *s = c * s.tanh();
                    }
                }
                let (m, tile_sum) = ak.softmax_weights(s, max, &mut slot.vs[span.clone()]);
                let ms = &mut slot.ms[span];
                ms.fill(1.0);
                if m > max {
                    let scale = exp(max - m);
                    ms[0] = scale;
                    sum *= scale;
                }
                slot.max[r] = m;
                slot.sum[r] = sum + tile_sum;
                continue;
            }
            // Key by key, llama.cpp's order of operations (the kernel's `expf` is glibc's).
            let s = &mut sc[span.clone()];
            if let Some(c) = softcap {
                for s in s.iter_mut() {
                    *s = c * s.tanh();
                }
            }
            let (ms, vs) = (&mut slot.ms[span.clone()], &mut slot.vs[span]);
            (slot.max[r], slot.sum[r]) = ak.softmax_online(s, max, sum, ms, vs);
        }
        // Values: the keys every token of the tile sees (`clo..chi`) for all rows at once;
        // before them each token's own earlier keys (sliding window), after them its own
        // later ones (the causal diagonal), each token's heads together.
        let (mut clo, mut chi) = (0, usize::MAX);
        for tl in 0..tokens {
            let (lo, hi) = range(tl, chunk_lo, chunk_hi);
            clo = clo.max(lo);
            chi = chi.min(hi);
        }
        let acc = Accum {
            ak,
            hdv,
            nk,
            chunk_lo,
            bs,
            np,
            acc_f16,
            v16,
            v32,
        };
        if clo < chi {
            for tl in 0..tokens {
                let (lo, _) = range(tl, chunk_lo, chunk_hi);
                acc.run(slot, tl * heads..(tl + 1) * heads, lo..clo);
            }
            acc.run(slot, 0..rows, clo..chi);
            for tl in 0..tokens {
                let (_, hi) = range(tl, chunk_lo, chunk_hi);
                acc.run(slot, tl * heads..(tl + 1) * heads, chi..hi);
            }
        } else {
            for tl in 0..tokens {
                let (lo, hi) = range(tl, chunk_lo, chunk_hi);
                acc.run(slot, tl * heads..(tl + 1) * heads, lo..hi);
            }
        }
        p0 = p1;
    }

    for r in 0..rows {
        let sum = slot.sum[r];
        let inv = if sum == 0.0 { 0.0 } else { 1.0 / sum };
        let o = &mut out[r * hdv..(r + 1) * hdv];
        if acc_f16 {
            for (o, a) in o.iter_mut().zip(&slot.acc16[r * hdv..(r + 1) * hdv]) {
                *o = a.to_f32() * inv;
            }
        } else {
            for (o, a) in o.iter_mut().zip(&slot.acc32[r * hdv..(r + 1) * hdv]) {
                *o = a * inv;
            }
        }
        // Values stored rotated: their weighted sum is rotated back (`H·H = I`).
        if let Some(nrot) = kv.v_rotation() {
            hadamard_rotate(o, nrot);
        }
    }
    Ok(())
}

/// The value step of one chunk: accumulates keys into rows with the weights the softmax
/// left in the task's buffers.
struct Accum<'a> {
    ak: &'a AttnKernels,
    hdv: usize,
    /// Keys in the chunk (the row stride of the weights).
    nk: usize,
    chunk_lo: usize,
    bs: usize,
    np: usize,
    acc_f16: bool,
    v16: Option<&'a [f16]>,
    v32: Option<&'a [f32]>,
}

impl Accum<'_> {
    /// Keys `keys` (absolute positions) into accumulator rows `rows`, in order.
    fn run(&self, slot: &mut Slot, rows: std::ops::Range<usize>, keys: std::ops::Range<usize>) {
        if keys.is_empty() || rows.is_empty() {
            return;
        }
        let (hdv, nk) = (self.hdv, self.nk);
        let first = keys.start - self.chunk_lo;
        let n = keys.len();
        let w = rows.start * nk + first;
        let (ms, vs) = (&slot.ms[w..], &slot.vs[w..]);
        let pages = &slot.pages_v[..self.np];
        let (a, bs) = (rows.start * hdv..rows.end * hdv, self.bs);
        let ak = self.ak;
        match (self.v16, self.v32) {
            (Some(v), _) if self.acc_f16 => {
                ak.accum_rows_f16(&mut slot.acc16[a], hdv, v, pages, bs, first, n, ms, vs, nk)
            }
            (Some(v), _) => {
                ak.accum_rows_f16_f32(&mut slot.acc32[a], hdv, v, pages, bs, first, n, ms, vs, nk)
            }
            (_, Some(v)) => {
                ak.accum_rows_f32(&mut slot.acc32[a], hdv, v, pages, bs, first, n, ms, vs, nk)
            }
            _ => ak.accum_rows_f32(
                &mut slot.acc32[a],
                hdv,
                &slot.vdq[..self.np * bs * hdv],
                &[0],
                self.np * bs,
                first,
                n,
                ms,
                vs,
                nk,
            ),
        }
    }
}

#[cfg(test)]
mod tests;
