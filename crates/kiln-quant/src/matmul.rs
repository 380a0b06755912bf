//! Quantized matrix × activations: GEMV for decode, cache-blocked GEMM for prefill.
//!
//! Every output element is one call of a dot kernel (`dot`, or `dot4` which is bit-identical
//! to it) over the whole row, so an output never depends on the batch size, the tiling or
//! the number of threads. The drivers allocate nothing: activations are quantized into
//! buffers owned by [`MatmulScratch`] that are reused from call to call.

use kiln_format::GgmlType;

use crate::error::QuantError;
use bytemuck::Zeroable;

use crate::blocks::BlockI8;
use crate::kernels::kernels;
use crate::pool;
use crate::table::{
    ActRows, Kernels, Line64, WeightKernels, act_scale_count, act_scales, interleave8,
    interleave8_q8k, interleave8_q80, interleave8_q81, lay8_group_bytes,
};
use crate::types::{AType, WType};

/// A row-major matrix of `rows` rows of `cols` elements of one GGML type, borrowed from
/// (typically) an mmapped GGUF tensor: `dims[0] = cols`, `dims[1] = rows`.
#[derive(Clone, Copy, Debug)]
pub struct QMatrix<'a> {
    ty: GgmlType,
    wt: WType,
    rows: usize,
    cols: usize,
    row_bytes: usize,
    data: &'a [u8],
}

impl<'a> QMatrix<'a> {
    /// Checks that kiln-quant can compute with `ty`, that a row is a whole number of blocks
    /// and that `data` holds exactly `rows` rows.
    pub fn new(ty: GgmlType, rows: usize, cols: usize, data: &'a [u8]) -> Result<Self, QuantError> {
        let wt = WType::of(ty).ok_or(QuantError::unsupported(ty))?;
        if !cols.is_multiple_of(ty.block_elems()) {
            return Err(QuantError::PartialBlock {
                type_name: ty.name(),
                elems: cols,
                block_elems: ty.block_elems(),
            });
        }
        let row_bytes = cols / ty.block_elems() * ty.block_bytes();
        let expected = row_bytes.checked_mul(rows).ok_or(QuantError::BadShape {
            type_name: ty.name(),
            what: "matrix bytes (rows * row bytes overflows)",
            expected: usize::MAX,
            actual: data.len(),
        })?;
        if data.len() != expected {
            return Err(QuantError::BadShape {
                type_name: ty.name(),
                what: "matrix bytes",
                expected,
                actual: data.len(),
            });
        }
        Ok(QMatrix {
            ty,
            wt,
            rows,
            cols,
            row_bytes,
            data,
        })
    }

    pub fn ty(&self) -> GgmlType {
        self.ty
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Bytes per row.
    pub fn row_bytes(&self) -> usize {
        self.row_bytes
    }

    /// The raw blocks of row `r`.
    ///
    /// # Panics
    /// If `r >= rows`.
    #[inline]
    pub fn row(&self, r: usize) -> &'a [u8] {
        &self.data[r * self.row_bytes..(r + 1) * self.row_bytes]
    }

    /// Dequantizes row `r` into `dst` (`cols` elements), e.g. for an embedding lookup.
    ///
    /// # Panics
    /// If `r >= rows` or `dst.len() != cols`.
    pub fn dequantize_row(&self, r: usize, dst: &mut [f32]) {
        self.dequantize_row_with(kernels(), r, dst)
    }

    /// [`QMatrix::dequantize_row`] with the kernels of a specific ISA.
    pub fn dequantize_row_with(&self, k: &Kernels, r: usize, dst: &mut [f32]) {
        assert_eq!(dst.len(), self.cols, "dequantize_row: dst length != cols");
        let row = self.row(r);
        // SAFETY: `k` exists only for an ISA this CPU supports; `row` is whole blocks and
        // `dst` has exactly its element count.
        unsafe { (k.weight(self.wt).dequant.f)(row, dst) }
    }
}

/// Reusable buffers for [`matmul`]: a copy of the input rows and their conversion to each
/// activation type, made on first use. After a first call with a given size, nothing is
/// allocated.
#[derive(Default)]
pub struct MatmulScratch {
    x: Vec<f32>,
    n_tokens: usize,
    cols: usize,
    acts: [Vec<u8>; AType::COUNT],
    /// Per activation row, its block scales widened to `f32` (Q8_0, Q8_1; see `act_scales`),
    /// for the GEMM micro-kernels.
    scales: [Vec<f32>; AType::COUNT],
    /// The same scales interleaved per group of eight rows (see `interleave8`), for the
    /// eight-token micro-kernels; whole groups only.
    scales8: [Vec<f32>; AType::COUNT],
    /// The Q8_K, Q8_0 and Q8_1 rows laid out per group of eight rows for the tiles that read
    /// them (`Kernels::reads_lay8`; see `interleave8_q8k`, `interleave8_q80`,
    /// `interleave8_q81`); whole groups only, empty when no kernel reads them.
    lay8: [Vec<u8>; AType::COUNT],
    ready: [bool; AType::COUNT],
    /// Per activation type, whether `lay8` holds the prepared rows' layout (made when a
    /// kernel of the table in use reads it).
    lay8_ready: [bool; AType::COUNT],
    /// [`matmul_grouped`]'s task plan: per group, the end of its task range and its rows per
    /// task.
    group_tasks: Vec<(usize, usize)>,
    /// [`matmul_grouped`]'s tasks in the order they are handed out, the most work first:
    /// (work, task).
    task_order: Vec<(u64, u32)>,
}

/// A [`MatmulScratch::prepare_gathered`] source index meaning "a row of zeros".
pub const GATHER_ZERO: u32 = u32::MAX;

/// Below this many elements, activations are converted on the calling thread.
const ACT_PAR_MIN_ELEMS: usize = 1 << 16;

impl MatmulScratch {
    /// An empty scratch whose [`matmul_grouped`] task plan holds `groups` matrices without
    /// growing. The plan grows only in grouped calls, so a caller that makes them on some
    /// passes only (a few tokens, not a prompt) sizes it here: its first grouped call after
    /// larger ungrouped ones, whose buffers already fit, then allocates nothing.
    pub fn with_group_capacity(groups: usize) -> MatmulScratch {
        MatmulScratch {
            group_tasks: Vec::with_capacity(groups),
            ..MatmulScratch::default()
        }
    }

    /// Takes `n_tokens` rows of `cols` activations; they are converted lazily, once per
    /// activation type, by the [`matmul_prepared`] calls that follow.
    ///
    /// # Panics
    /// If `x.len() != n_tokens * cols`.
    pub fn prepare(&mut self, x: &[f32], n_tokens: usize, cols: usize) {
        assert_eq!(
            x.len(),
            n_tokens * cols,
            "MatmulScratch::prepare: x has {} values, not {n_tokens} tokens x {cols}",
            x.len()
        );
        self.x.clear();
        self.x.extend_from_slice(x);
        self.n_tokens = n_tokens;
        self.cols = cols;
        self.ready = [false; AType::COUNT];
        self.lay8_ready = [false; AType::COUNT];
        self.reserve_task_order();
    }

    /// Sizes [`matmul_grouped`]'s task order for as many groups as its plan holds, at the
    /// current pool's thread count, on every prepared pass: a caller whose first grouped call
    /// comes after wider ungrouped passes (Q, K and V fused only for a few tokens) then finds
    /// it already sized. A group has at most `⌈work / per_task⌉` tasks, and with `per_task =
    /// ⌊total / (GROUPED_TASKS_PER_THREAD · threads)⌋` (at least 1) the groups together have
    /// at most `2 · GROUPED_TASKS_PER_THREAD · threads + groups`.
    fn reserve_task_order(&mut self) {
        let groups = self.group_tasks.capacity();
        let most = groups * (2 * GROUPED_TASKS_PER_THREAD * pool::current().n_threads() + 1);
        if self.task_order.capacity() < most {
            self.task_order.reserve(most - self.task_order.len());
        }
    }

    /// [`MatmulScratch::prepare`] on rows gathered from `x` (rows of `cols`): prepared row `r`
    /// is row `src[r]` of `x`, or zeros where `src[r]` is [`GATHER_ZERO`]. A
    /// mixture-of-experts layer prepares each expert's tokens this way, with no gathered copy
    /// of its own.
    ///
    /// # Panics
    /// If `x.len()` is not a multiple of `cols` or a `src` entry is neither a row of `x` nor
    /// [`GATHER_ZERO`].
    pub fn prepare_gathered(&mut self, x: &[f32], cols: usize, src: &[u32]) {
        assert!(
            cols > 0 && x.len().is_multiple_of(cols) || x.is_empty(),
            "MatmulScratch::prepare_gathered: x has {} values, not whole rows of {cols}",
            x.len()
        );
        let n_src = x.len().checked_div(cols).unwrap_or(0);
        self.x.clear();
        for &r in src {
            if r == GATHER_ZERO {
                self.x.resize(self.x.len() + cols, 0.0);
            } else {
                let r = r as usize;
                assert!(
                    r < n_src,
                    "MatmulScratch::prepare_gathered: source row {r} of {n_src}"
                );
                self.x.extend_from_slice(&x[r * cols..(r + 1) * cols]);
            }
        }
        self.n_tokens = src.len();
        self.cols = cols;
        self.ready = [false; AType::COUNT];
        self.lay8_ready = [false; AType::COUNT];
        self.reserve_task_order();
    }

    /// The prepared rows already converted to `a` by [`MatmulScratch::act_rows`], as
    /// [`ActRows`] over all of them.
    fn rows_of(&self, a: AType) -> ActRows<'_> {
        let i = a as usize;
        debug_assert!(self.ready[i]);
        let n_sc = act_scale_count(a, self.cols / a.ggml().block_elems());
        ActRows {
            a: &self.acts[i],
            stride: a.row_bytes(self.cols),
            sc: &self.scales[i],
            sc_stride: n_sc.max(1),
            sc8: &self.scales8[i],
            lay8: &self.lay8[i],
        }
    }

    /// The prepared rows converted to `a` (converting them now if needed), their widened
    /// scales for the GEMM micro-kernels, the scales' per-row stride, and the scales
    /// interleaved by groups of eight rows (and for Q8_K the rows laid out for the Q4_K
    /// tiles that read them).
    #[allow(clippy::type_complexity)]
    fn act_rows(&mut self, k: &Kernels, a: AType) -> (&[u8], &[f32], usize, &[f32], &[u8]) {
        let i = a as usize;
        // Float activations are widened for the GEMM micro-kernels only: one token's GEMV
        // reads them as they are.
        let float = matches!(a, AType::F16 | AType::BF16);
        let n_sc = if float && self.n_tokens == 1 {
            0
        } else {
            act_scale_count(a, self.cols / a.ggml().block_elems())
        };
        // One slot per row at least, so rows and scale rows zip one to one.
        let sc_stride = n_sc.max(1);
        if !self.ready[i] {
            let rb = a.row_bytes(self.cols);
            let (n, n_rows) = (self.n_tokens, padded_rows(self.n_tokens));
            let buf = &mut self.acts[i];
            buf.resize(n_rows * rb, 0);
            buf[n * rb..].fill(0);
            let sc = &mut self.scales[i];
            sc.resize(n_rows * sc_stride, 0.0);
            sc[n * sc_stride..].fill(0.0);
            let f = k.act[i].f;
            // The widening of a float activation row: the table's dequantizer of that type
            // (exact, as `act_scales`).
            let widen = match a {
                AType::F16 => Some(k.weight(WType::F16).dequant.f),
                AType::BF16 => Some(k.weight(WType::BF16).dequant.f),
                _ => None,
            };
            let cols = self.cols;
            let convert = |((dst, src), sc): ((&mut [u8], &[f32]), &mut [f32])| {
                // SAFETY: `k` exists only for an ISA this CPU supports; `src` has `cols`
                // values (a whole number of blocks: a weight type's block size is a multiple
                // of its activation type's) and `dst` is one row of `rb` bytes.
                unsafe { f(src, dst) };
                match widen {
                    // SAFETY: as above; `dst` holds `n_sc` float values of `a`.
                    Some(w) if n_sc > 0 => unsafe { w(dst, &mut sc[..n_sc]) },
                    Some(_) => {}
                    None => act_scales(a, dst, &mut sc[..n_sc]),
                }
            };
            if rb > 0 && cols > 0 {
                let n_tok = self.n_tokens;
                let p = pool::current();
                if self.x.len() >= ACT_PAR_MIN_ELEMS && p.n_threads() > 1 {
                    let per = n_tok.div_ceil(4 * p.n_threads());
                    let out = SharedOut::new(buf);
                    let scs = SharedOut::new(sc);
                    let x = &self.x;
                    p.run(n_tok.div_ceil(per), &|c| {
                        let (t0, t1) = (c * per, ((c + 1) * per).min(n_tok));
                        // SAFETY: task `c` alone writes rows t0..t1 of both buffers.
                        let (dst, scr) = unsafe {
                            (
                                out.slice(t0 * rb..t1 * rb),
                                scs.slice(t0 * sc_stride..t1 * sc_stride),
                            )
                        };
                        dst.chunks_mut(rb)
                            .zip(x[t0 * cols..t1 * cols].chunks(cols))
                            .zip(scr.chunks_mut(sc_stride))
                            .for_each(convert);
                    });
                } else {
                    buf.chunks_mut(rb)
                        .zip(self.x.chunks(cols))
                        .zip(sc.chunks_mut(sc_stride))
                        .for_each(convert);
                }
            }
            // The eight-token kernels of quantized types read their scales interleaved;
            // the float ones read `sc` row by row.
            let groups = if float { 0 } else { n_rows / 8 };
            let sc8 = &mut self.scales8[i];
            sc8.resize(groups * 8 * sc_stride, 0.0);
            for (g, o) in sc8.chunks_exact_mut(8 * sc_stride).enumerate() {
                interleave8(&sc[g * 8 * sc_stride..], sc_stride, o);
            }
            self.ready[i] = true;
        }
        let nb = self.cols / a.ggml().block_elems();
        let per = lay8_group_bytes(a, nb);
        if per > 0 && !self.lay8_ready[i] && k.reads_lay8(a) {
            // Whole groups of eight rows (quantized types: `n_rows` is a multiple of eight
            // for a GEMM).
            let groups = padded_rows(self.n_tokens) / 8;
            let (rb, buf) = (a.row_bytes(self.cols), &self.acts[i]);
            // Reserving the layout of every block the row buffer's capacity holds makes the
            // layouts grow in the same calls as that buffer, never in a later step of a size
            // seen before (the zero-allocation tests of kiln-model and kiln-engine). Q8_K's
            // and Q8_1's take fewer bytes than the rows they copy (272 against 292 per value
            // block and row; 32 against 36), Q8_0's more (its quad sums: 64⅛ against 34), at
            // most a group of one block's layout per eight blocks of rows.
            let blocks = buf.capacity() / a.row_bytes(a.ggml().block_elems());
            let cap = buf
                .capacity()
                .max(blocks.div_ceil(8) * lay8_group_bytes(a, 1))
                .max(groups * per);
            let lay8 = &mut self.lay8[i];
            if lay8.capacity() < cap {
                lay8.reserve_exact(cap - lay8.len());
            }
            lay8.resize(groups * per, 0);
            for (g, o) in lay8.chunks_exact_mut(per).enumerate() {
                let rows = &buf[g * 8 * rb..];
                match a {
                    AType::Q8_K => interleave8_q8k(rows, rb, nb, o),
                    AType::Q8_0 => interleave8_q80(rows, rb, nb, o),
                    _ => interleave8_q81(rows, rb, nb, o),
                }
            }
            self.lay8_ready[i] = true;
        }
        let lay8: &[u8] = &self.lay8[i];
        (
            &self.acts[i],
            &self.scales[i],
            sc_stride,
            &self.scales8[i],
            lay8,
        )
    }
}

/// Activation rows held for `n` tokens: for a GEMM (`n > 1`) the rows are padded with zero
/// rows to a whole number of eight-token groups, so a ragged tail of two to seven tokens
/// runs a four- or eight-token micro-kernel (its padding outputs dropped) instead of one
/// single dot per token, each of which would unpack the weight row again. A speculative
/// verification pass scores a handful of tokens, so its whole pass is such a tail.
fn padded_rows(n: usize) -> usize {
    if n > 1 { n.next_multiple_of(8) } else { n }
}

/// `y[t * rows + r] = sum_c W[r][c] * x[t * cols + c]` for `t in 0..n_tokens`.
///
/// Activations are converted once per token row to `vec_dot_type(w.ty())` the way ggml's
/// x86 build does. Runs on the current rayon pool: call it from inside the pool
/// (`pool.install(|| forward(...))`). Called from a thread outside the pool, every matmul
/// hands its work to the pool's threads and sleeps until they finish, which at decode
/// (about 200 matmuls a token) costs more than the matmuls themselves.
///
/// # Panics
/// If `x.len() != n_tokens * w.cols()` or `y.len() != n_tokens * w.rows()`.
pub fn matmul(w: &QMatrix, x: &[f32], n_tokens: usize, y: &mut [f32], scratch: &mut MatmulScratch) {
    scratch.prepare(x, n_tokens, w.cols());
    matmul_prepared(w, scratch, y);
}

/// [`matmul`] on rows given to [`MatmulScratch::prepare`]: several matrices sharing one input
/// (Q, K, V; gate, up) convert it once.
///
/// # Panics
/// If `w.cols()` differs from the prepared `cols`, or `y.len() != n_tokens * w.rows()`.
pub fn matmul_prepared(w: &QMatrix, scratch: &mut MatmulScratch, y: &mut [f32]) {
    matmul_prepared_with(kernels(), w, scratch, y)
}

/// [`matmul_prepared`] with the kernels of a specific ISA (tests, benchmarks).
pub fn matmul_prepared_with(k: &Kernels, w: &QMatrix, scratch: &mut MatmulScratch, y: &mut [f32]) {
    assert_eq!(
        w.cols, scratch.cols,
        "matmul: matrix has {} columns, prepared activations {}",
        w.cols, scratch.cols
    );
    let n = scratch.n_tokens;
    assert_eq!(
        y.len(),
        n * w.rows,
        "matmul: y has {} values, not {n} tokens x {} rows",
        y.len(),
        w.rows
    );
    let at = w.wt.act();
    let stride = at.row_bytes(w.cols);
    let (acts, sc, sc_stride, sc8, lay8) = scratch.act_rows(k, at);
    let wk = k.weight(w.wt);
    if n == 1 {
        gemv(wk, w, acts, y);
    } else if n > 1 {
        let a = ActRows {
            a: acts,
            stride,
            sc,
            sc_stride,
            sc8,
            lay8,
        };
        gemm(wk, w, a, n, y);
    }
}

/// Below this many weight bytes a GEMV runs on the calling thread: waking other threads
/// costs more than it saves.
const GEMV_PAR_MIN_BYTES: usize = 48 * 1024;
/// GEMV tasks per thread.
const GEMV_TASKS_PER_THREAD: usize = 4;
/// Fewest rows a GEMV task gets.
const GEMV_MIN_ROWS: usize = 16;

fn gemv(wk: &WeightKernels, w: &QMatrix, a: &[u8], y: &mut [f32]) {
    let p = pool::current();
    let threads = p.n_threads();
    if threads <= 1 || w.data.len() < GEMV_PAR_MIN_BYTES || w.rows < 2 * GEMV_MIN_ROWS {
        gemv_rows(wk, w, a, 0, y);
        return;
    }
    // A few contiguous chunks per thread (multiples of 4 rows), claimed dynamically, so a
    // thread that is late (preempted, or busy elsewhere) delays the matmul by one chunk.
    let chunk = w
        .rows
        .div_ceil(GEMV_TASKS_PER_THREAD * threads)
        .next_multiple_of(4)
        .max(GEMV_MIN_ROWS);
    let out = SharedOut::new(y);
    p.run(w.rows.div_ceil(chunk), &|c| {
        let (r0, r1) = (c * chunk, ((c + 1) * chunk).min(w.rows));
        // SAFETY: task `c` alone writes rows r0..r1.
        gemv_rows(wk, w, a, r0, unsafe { out.slice(r0..r1) });
    });
}

/// Rows `r0 .. r0 + ys.len()` of `w` times the activation row `a`, on the calling thread.
fn gemv_rows(wk: &WeightKernels, w: &QMatrix, a: &[u8], r0: usize, ys: &mut [f32]) {
    let (dot, dotr4) = (wk.dot.f, wk.dotr4.f);
    let rb = w.row_bytes;
    let mut quads = ys.chunks_exact_mut(4);
    let mut r = r0;
    for q in &mut quads {
        // The kernels prefetch the row quads ahead of this one themselves, spread over
        // their block steps (a burst of prefetches here did not help: the hardware
        // prefetchers lose track of four interleaved row streams).
        let mut o = [0.0f32; 4];
        // SAFETY: `wk` comes from a `Kernels` for an ISA this CPU supports; the slice is
        // four whole rows `rb` apart and `a` one activation row of the matching length.
        unsafe { dotr4(&w.data[r * rb..(r + 4) * rb], rb, a, &mut o) };
        q.copy_from_slice(&o);
        r += 4;
    }
    for o in quads.into_remainder() {
        // SAFETY: as above, one row.
        *o = unsafe { dot(w.row(r), a) };
        r += 1;
    }
}

/// Weight bytes of a GEMM row block (after unpacking, for types unpacked per row block): the
/// block stays in the core's L2 while every token of the task streams past it, so each
/// weight byte comes from DRAM once per matmul, not once per group of tokens.
const ROW_BLOCK_BYTES: usize = 192 * 1024;
/// Fewest groups of eight tokens in a GEMM task for which a type with both an eight-token
/// kernel over unpacked rows and one over packed rows takes the unpacked one.
/// Below it, unpacking the row block is a pass over the weights that overlaps no
/// arithmetic (AVX2, Q5_0 and Q4_0 rows out of cache, one thread: with packed rows eight
/// tokens took 21.9–23.6 ms where unpacked ones took 24.6–28.9, 24 tokens 56–61 against
/// 67–70, 32 tokens 77–88 against 71–84).
pub(crate) const UNPACK_MIN_GROUPS: usize = 4;
/// Fewest tokens in a GEMM task for which a type with a four-row tile over rows laid out
/// per row block (`dot8r4_grouped`) takes it. Below it the layout, a pass over the weights,
/// costs more than the tile saves (AVX-512, Qwen2.5-Coder-0.5B's matrices, mostly Q5_0 and
/// Q8_0, two threads, alternated runs: two tokens 50 ms with the layout, 26 as GEMVs; four
/// 48 against 42; five and eight about even, 49–51 against 51–55; sixteen 77 against 114).
pub(crate) const QUAD_MIN_TOKENS: usize = 5;
/// Most tokens in a GEMM task for which a type with both a four-row tile over rows laid
/// out per row block (`dot8r4_grouped`) and one over rows as stored (`dot8r4`) takes the
/// latter. With one or two groups of eight tokens the layout is a pass over weights that
/// come from memory, which overlaps no arithmetic, while the tile over stored rows streams
/// them (prefetching the next row group) as it computes; with more groups each laid-out
/// row serves more tokens and its cheaper inner loop wins. AVX-512 Q8_0, one thread,
/// best of runs: the 151,936 × 896 output matrix of Qwen2.5-0.5B (from memory) with eight
/// tokens 29.3 ms laid out against 18.8 as stored, sixteen 41.6 against 36.5, 24 even
/// (53.2), 32 65.8 against 70.3; an 896 × 4864 matrix in cache with sixteen tokens 0.82
/// against 1.00 ms.
const PACKED_MAX_TOKENS: usize = 16;
/// Fewest rows in a GEMM row block.
const ROW_BLOCK_MIN: usize = 4;
/// GEMM tasks per thread (claimed dynamically, so a late thread delays the matmul by one).
/// Twelve rather than four: with four, the main thread of an 8B-shape prefill (AVX2 Zen 3,
/// two threads, 256 tokens) spent 2.6 % of its samples waiting for the other thread's last
/// task, with twelve 0.8 %, and the pass ran 4–8 % faster.
const GEMM_TASKS_PER_THREAD: usize = 12;
/// Fewest rows a GEMM task gets.
const GEMM_MIN_ROWS: usize = 16;

/// An output buffer shared by parallel tasks that write disjoint parts of it.
struct SharedOut<T> {
    ptr: *mut T,
    len: usize,
}

// SAFETY: tasks only write through `write`/`slice`, each to indices no other task touches
// (the callers' contract), while the `&mut [T]` it came from stays borrowed.
unsafe impl<T: Send> Sync for SharedOut<T> {}

impl<T> SharedOut<T> {
    fn new(v: &mut [T]) -> SharedOut<T> {
        SharedOut {
            ptr: v.as_mut_ptr(),
            len: v.len(),
        }
    }

    /// The `len` elements from `start` as a buffer of their own (indices relative to
    /// `start`); the same contract applies to the view.
    fn sub(&self, start: usize, len: usize) -> SharedOut<T> {
        assert!(start <= self.len && len <= self.len - start);
        SharedOut {
            // SAFETY: in bounds (asserted).
            ptr: unsafe { self.ptr.add(start) },
            len,
        }
    }

    /// # Safety
    /// No other thread reads or writes index `i` meanwhile.
    #[inline(always)]
    unsafe fn write(&self, i: usize, v: T) {
        assert!(i < self.len);
        // SAFETY: in bounds (asserted); exclusive per the caller's contract.
        unsafe { self.ptr.add(i).write(v) }
    }

    /// # Safety
    /// No other thread reads or writes `range` while the slice lives.
    #[allow(clippy::mut_from_ref)]
    unsafe fn slice(&self, range: std::ops::Range<usize>) -> &mut [T] {
        assert!(range.start <= range.end && range.end <= self.len);
        // SAFETY: in bounds (asserted); exclusive per the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(range.start), range.len()) }
    }
}

/// `a` holds all `n` activation rows (`ActRows` used as a strided view of every row).
///
/// Weight-stationary: tasks are chunks of rows over all tokens (tokens are split too only when
/// there are too few rows to give every thread several tasks), and inside a task each block of
/// rows ([`ROW_BLOCK_BYTES`]) meets every token of the task before the next block is read.
fn gemm(wk: &WeightKernels, w: &QMatrix, a: ActRows<'_>, n: usize, y: &mut [f32]) {
    let rows = w.rows;
    let p = pool::current();
    let threads = p.n_threads();
    let want = if threads <= 1 {
        1
    } else {
        GEMM_TASKS_PER_THREAD * threads
    };
    let row_tasks = want.min(rows.div_ceil(GEMM_MIN_ROWS)).max(1);
    // Whole groups of eight tokens per task, so eight-token calls start on a group of
    // interleaved scales.
    let tok_tasks = want.div_ceil(row_tasks).min(n.div_ceil(8)).max(1);
    let tc = n.div_ceil(tok_tasks).next_multiple_of(8);
    let n_tc = n.div_ceil(tc);
    // Even row chunks (and row blocks, in `gemm_tile`), so the two-row tiles cover them.
    let rc = rows.div_ceil(row_tasks).next_multiple_of(2);
    let n_rc = rows.div_ceil(rc);
    let out = SharedOut::new(y);
    let task = |i: usize| {
        let (ti, ri) = (i / n_rc, i % n_rc);
        let (t0, t1) = (ti * tc, ((ti + 1) * tc).min(n));
        let (r0, r1) = (ri * rc, ((ri + 1) * rc).min(rows));
        // SAFETY: task (ti, ri) writes exactly the outputs of tokens t0..t1 and rows r0..r1;
        // the tasks partition tokens × rows, so no two write the same element.
        unsafe { gemm_tile(wk, w, a, (t0, t1), (r0, r1), &out) };
    };
    let n_tasks = n_tc * n_rc;
    if threads <= 1 || n_tasks == 1 {
        (0..n_tasks).for_each(task);
    } else {
        p.run(n_tasks, &task);
    }
}

thread_local! {
    /// Per worker thread: the current row block unpacked (types with `dot8_unpacked`). Grows
    /// to the largest row block seen, then is reused.
    static UNPACKED: std::cell::RefCell<Vec<BlockI8>> = const { std::cell::RefCell::new(Vec::new()) };
    /// Per worker thread: the current row block's groups of rows laid out together, the
    /// row pairs of `dot8r2_unpacked` or the groups of four of `dot8r4_grouped`. Sized on
    /// first use for the largest row block of any matrix
    /// whose rows fit [`ROW_BLOCK_BYTES`] at least [`ROW_BLOCK_MIN`] times, so it grows only
    /// for rows longer than that, then is reused.
    static ROW_GROUPS: std::cell::RefCell<Vec<Line64>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// `buf` with at least `lines` lines, the first `lines` as bytes. On first use it takes the
/// capacity of any row block whose rows are at most a [`ROW_BLOCK_MIN`]-th of
/// [`ROW_BLOCK_BYTES`], so a later matrix of another shape does not allocate.
fn group_lines(
    buf: &mut Vec<Line64>,
    lines: usize,
    layout_bytes: usize,
    raw_bytes: usize,
) -> &mut [u8] {
    if buf.len() < lines {
        // A row block holds at most `ROW_BLOCK_BYTES / row_bytes + 1` rows (rounded up to
        // its group size), so its groups' layout at most the layout of `ROW_BLOCK_BYTES`
        // plus one group of the longest such rows (and two groups for the rounding).
        // `raw_bytes` is what a group's block column counts against `ROW_BLOCK_BYTES`,
        // `layout_bytes` what it takes laid out.
        // Rounded up to whole 4 KiB, so layouts whose bounds differ only by their rounding
        // (the four-row ones: 144 bytes per block column, Q4_1's 160) share one capacity
        // whichever a thread meets first.
        let most =
            ((ROW_BLOCK_BYTES / raw_bytes + ROW_BLOCK_BYTES / ROW_BLOCK_MIN / raw_bytes + 2)
                * layout_bytes
                / 64)
                .next_multiple_of(64);
        buf.reserve_exact(lines.max(most).saturating_sub(buf.len()));
        buf.resize(lines, Line64([0; 64]));
    }
    bytemuck::cast_slice_mut(&mut buf[..lines])
}

/// # Safety
/// Nobody else writes outputs of tokens `t0..t1`, rows `r0..r1` meanwhile.
unsafe fn gemm_tile(
    wk: &WeightKernels,
    w: &QMatrix,
    a: ActRows<'_>,
    (t0, t1): (usize, usize),
    (r0, r1): (usize, usize),
    out: &SharedOut<f32>,
) {
    let rows = w.rows;
    let stride = a.stride;
    let (dot4, dot8) = (wk.dot4.f, wk.dot8.map(|k| k.f));
    let dot8r2 = wk.dot8r2.map(|k| k.f);
    let rows_at = |t: usize, n: usize| ActRows {
        a: &a.a[t * stride..(t + n) * stride],
        stride,
        sc: &a.sc[t * a.sc_stride..(t + n) * a.sc_stride],
        sc_stride: a.sc_stride,
        // Eight-token calls start on a group boundary (a task's tokens are whole groups);
        // float types have no interleaved scales.
        sc8: if n == 8 && !a.sc8.is_empty() {
            debug_assert_eq!(t % 8, 0);
            &a.sc8[t * a.sc_stride..(t + 8) * a.sc_stride]
        } else {
            &[]
        },
        lay8: if n == 8 && !a.lay8.is_empty() {
            let at = w.wt.act();
            let per = lay8_group_bytes(at, w.cols / at.ggml().block_elems());
            &a.lay8[t / 8 * per..(t / 8 + 1) * per]
        } else {
            &[]
        },
    };
    // Rows unpacked once per row block pay for themselves over several groups of eight
    // tokens; for fewer, a type that has a packed `dot8` unpacks each block in registers
    // as it goes, its weight stream overlapping the arithmetic (see `UNPACK_MIN_GROUPS`).
    let unpacked = wk
        .dot8_unpacked
        .filter(|_| dot8.is_none() || (t1 - t0).div_ceil(8) >= UNPACK_MIN_GROUPS)
        .map(|(u, d)| (u.f, d.f));
    // Rows laid out in groups of four pay for their layout over five tokens or more, and
    // for a type that also has a four-row tile over rows as stored, over more than
    // `PACKED_MAX_TOKENS`.
    let quad = wk.dot8r4_grouped.filter(|_| {
        t1 - t0 >= QUAD_MIN_TOKENS && (wk.dot8r4.is_none() || t1 - t0 > PACKED_MAX_TOKENS)
    });
    let pair_unpacked = wk.dot8r2_unpacked;
    let nb = w.cols / w.ty.block_elems();
    let block_row_bytes = if let Some(q) = quad {
        nb * q.block_bytes / 4
    } else if unpacked.is_some() {
        nb * size_of::<BlockI8>()
    } else {
        w.row_bytes
    };
    let row_block = (ROW_BLOCK_BYTES / block_row_bytes.max(1))
        .max(ROW_BLOCK_MIN)
        .next_multiple_of(if quad.is_some() || wk.dot8r4.is_some() {
            4
        } else {
            2
        });
    // Whether the activations hold `len` rows from `t` (real or padding, see
    // `padded_rows`): the tile's last group may then run a wider kernel than its tokens
    // fill, dropping the padding outputs. Without two- and three-token kernels, five to
    // seven tokens take an eight-token call and four a four-token one; two or three take
    // the GEMV's row quads once per token (below). With a four-row tile (a task of at
    // least `QUAD_MIN_TOKENS` tokens) its last one to four tokens take an eight-token call
    // too: it costs about what the four-token kernel does over the same rows (Q5_0,
    // 896 × 896, one thread: 107 against 102 µs), and a task's second group of eight
    // reuses the rows laid out for its first (12 tokens: 209 µs as eight + four, 178 as
    // two eights).
    let fits = |t: usize, len: usize| (t + len) * stride <= a.a.len();
    // With two- and three-token kernels (`dot23`, AVX2), two or three tokens left take
    // those kernels and five a four-token call and the GEMV's row quads: a four-token
    // call over two real tokens costs four tokens' arithmetic, which with a few tokens
    // is what sets the pace (the weights stream by meanwhile). Six or seven still take an
    // eight-token call (Qwen2.5-Coder-0.5B's matrices, two threads: two tokens 51 -> 33–43
    // ms, three 51 -> 43–48, five 85 -> 70–75; six and seven as four + two or three
    // were no faster than one padded eight-token call).
    let dot23 = wk.dot23.map(|(d2, d3)| (d2.f, d3.f));
    let least8 = if quad.is_some() {
        1
    } else if dot23.is_some() {
        5
    } else {
        4
    };
    let take8 = |t: usize| t + 8 <= t1 || (t + least8 < t1 && fits(t, 8));
    // The narrow call for the tokens from `t`, and how many it covers (real or padding):
    // four while four are left, then two or three with `dot23`. Without `dot23` two or
    // three tokens left take the GEMV once per token over the row block, which the first
    // brings into cache: cheaper than a padded four-token call's arithmetic (AVX-512,
    // Qwen2.5-Coder-0.5B's matrices, two threads, alternated runs: two tokens 38 -> 26 ms,
    // three 42 -> 38; four stay a four-token call, 41 against 43 as GEMVs).
    let narrow = |t: usize| -> Option<(crate::table::Dot4Fn, usize)> {
        match (t1.saturating_sub(t), dot23) {
            (4.., _) => Some((dot4, 4)),
            (2, Some((dot2, _))) => Some((dot2, 2)),
            (3, Some((_, dot3))) => Some((dot3, 3)),
            _ => None,
        }
    };
    let mut rb = r0;
    while rb < r1 {
        let re = (rb + row_block).min(r1);
        let mut t = t0;
        let write8 = |t: usize, r: usize, o: [f32; 8]| {
            for (i, v) in o.into_iter().enumerate().take(t1 - t) {
                // SAFETY: (t + i, r) is in this tile (`t + i < t1`).
                unsafe { out.write((t + i) * rows + r, v) };
            }
        };
        if let Some(q) = quad
            && take8(t)
        {
            // Lay out the row block's groups of four rows once for all the task's groups of
            // eight tokens; a last group of fewer rows is padded with zero rows, whose
            // outputs are dropped.
            let per = q.group_bytes(nb);
            let quads = (re - rb).div_ceil(4);
            ROW_GROUPS.with_borrow_mut(|buf| {
                let bytes = group_lines(buf, quads * per / 64, q.block_bytes, q.block_bytes);
                for (k, dst) in bytes.chunks_exact_mut(per).enumerate() {
                    let r = rb + 4 * k;
                    let n_r = (re - r).min(4);
                    // SAFETY: kernels of a supported ISA; one to four whole rows
                    // `row_bytes` apart, and `dst` holds the layout of a group of `nb` blocks.
                    unsafe {
                        (q.unpack.f)(
                            &w.data[r * w.row_bytes..(r + n_r) * w.row_bytes],
                            w.row_bytes,
                            dst,
                        )
                    };
                }
                while take8(t) {
                    let a8 = rows_at(t, 8);
                    for (k, wu) in bytes.chunks_exact(per).enumerate() {
                        let r = rb + 4 * k;
                        let mut o = [[0.0f32; 8]; 4];
                        // SAFETY: kernels of a supported ISA; `wu` is rows `r ..` laid out
                        // as a group of four, and `a8` as below.
                        unsafe { (q.tile.f)(wu, a8, &mut o) };
                        for (j, o) in o.into_iter().enumerate().take(re - r) {
                            write8(t, r + j, o);
                        }
                    }
                    t += 8;
                }
            });
        } else if let Some((unpack, dot8u)) = unpacked
            && take8(t)
        {
            // Unpack the row block once for all the task's groups of eight tokens.
            UNPACKED.with_borrow_mut(|buf| {
                buf.resize((re - rb) * nb, BlockI8::zeroed());
                for (r, dst) in (rb..re).zip(buf.chunks_exact_mut(nb)) {
                    // SAFETY: kernels of a supported ISA; `dst` holds one block per block.
                    unsafe { unpack(w.row(r), dst) };
                }
                while take8(t) {
                    let a8 = rows_at(t, 8);
                    for (r, wu) in (rb..re).zip(buf.chunks_exact(nb)) {
                        let mut o = [0.0f32; 8];
                        // SAFETY: as below; `wu` is row `r` unpacked.
                        unsafe { dot8u(bytemuck::cast_slice(wu), a8, &mut o) };
                        write8(t, r, o);
                    }
                    t += 8;
                }
            });
        } else if let (Some(p), Some(dot8)) = (pair_unpacked, dot8)
            && take8(t)
        {
            // Unpack the row block's pairs once for all the task's groups of eight tokens;
            // an odd last row takes the one-row tile.
            let per = nb * p.block_bytes;
            let pairs = (re - rb) / 2;
            ROW_GROUPS.with_borrow_mut(|buf| {
                let lines = pairs * per / 64;
                // The layout's bytes per raw super-block of the pair.
                let raw = 2 * w.ty.block_bytes();
                let bytes = group_lines(buf, lines, p.block_bytes, raw);
                for (k, dst) in bytes.chunks_exact_mut(per.max(1)).enumerate() {
                    let r = rb + 2 * k;
                    // SAFETY: kernels of a supported ISA; two whole rows `row_bytes` apart,
                    // and `dst` holds the layout of their `nb` super-blocks.
                    unsafe {
                        (p.unpack.f)(
                            &w.data[r * w.row_bytes..(r + 2) * w.row_bytes],
                            w.row_bytes,
                            dst,
                        )
                    };
                }
                while take8(t) {
                    let a8 = rows_at(t, 8);
                    for (k, wu) in bytes.chunks_exact(per.max(1)).enumerate() {
                        let mut o = [[0.0f32; 8]; 2];
                        // SAFETY: kernels of a supported ISA; `wu` is rows `rb + 2k` and
                        // `rb + 2k + 1` unpacked, and `a8` as below.
                        unsafe { (p.tile.f)(wu, a8, &mut o) };
                        write8(t, rb + 2 * k, o[0]);
                        write8(t, rb + 2 * k + 1, o[1]);
                    }
                    for r in rb + 2 * pairs..re {
                        let mut o = [0.0f32; 8];
                        // SAFETY: as below.
                        unsafe { dot8(w.row(r), a8, &mut o) };
                        write8(t, r, o);
                    }
                    t += 8;
                }
            });
        } else if let Some(dot8) = dot8 {
            let dot8r4 = wk.dot8r4.map(|k| k.f);
            while take8(t) {
                let a8 = rows_at(t, 8);
                let mut r = rb;
                if let Some(tile) = dot8r4 {
                    while r + 4 <= re {
                        let mut o = [[0.0f32; 8]; 4];
                        // SAFETY: kernels of a supported ISA; four whole rows `row_bytes`
                        // apart, and `a8` as below.
                        unsafe {
                            tile(
                                &w.data[r * w.row_bytes..(r + 4) * w.row_bytes],
                                w.row_bytes,
                                a8,
                                &mut o,
                            )
                        };
                        for (j, o) in o.into_iter().enumerate() {
                            write8(t, r + j, o);
                        }
                        r += 4;
                    }
                }
                if let Some(tile) = dot8r2 {
                    while r + 2 <= re {
                        let mut o = [[0.0f32; 8]; 2];
                        // SAFETY: kernels of a supported ISA; two whole rows `row_bytes`
                        // apart, and `a8` as below.
                        unsafe {
                            tile(
                                &w.data[r * w.row_bytes..(r + 2) * w.row_bytes],
                                w.row_bytes,
                                a8,
                                &mut o,
                            )
                        };
                        write8(t, r, o[0]);
                        write8(t, r + 1, o[1]);
                        r += 2;
                    }
                }
                for r in r..re {
                    let mut o = [0.0f32; 8];
                    // SAFETY: kernels of a supported ISA; `a8` is eight activation rows with
                    // their scales, the rows ending where the eighth ends.
                    unsafe { dot8(w.row(r), a8, &mut o) };
                    write8(t, r, o);
                }
                t += 8;
            }
        }
        while let Some((dot, m)) = narrow(t) {
            let a_m = rows_at(t, m);
            for r in rb..re {
                let mut o = [0.0f32; 4];
                // SAFETY: kernels of a supported ISA; `a_m` is the `m` activation rows the
                // kernel reads, with their scales, the rows ending where the last ends.
                unsafe { dot(w.row(r), a_m, &mut o) };
                for (i, v) in o.into_iter().enumerate().take(t1 - t) {
                    // SAFETY: (t + i, r) is in this tile (`t + i < t1`).
                    unsafe { out.write((t + i) * rows + r, v) };
                }
            }
            t += m;
        }
        let t = t.min(t1);
        for t in t..t1 {
            // A token left over after whole groups (the 17th of a 16-token draft's
            // scoring pass, or a prompt chunk of 8m + 1): the decode kernel's row quads
            // over the block, which is in cache by now, rather than one row at a time.
            // Cheaper than a padded four-token call, which costs about two one-token
            // GEMVs (one thread, cache-resident 512 x 896 Q5_0: the 17th token added
            // 30 µs to the 16-token GEMM row by row, 26 µs by row quads, as a GEMV).
            let a1 = &a.a[t * stride..(t + 1) * stride];
            // SAFETY: (t, r) is in this tile for every r in rb..re.
            let ys = unsafe { out.slice(t * rows + rb..t * rows + re) };
            gemv_rows(wk, w, a1, rb, ys);
        }
        rb = re;
    }
}

/// One matrix of a [`matmul_grouped`] call: `w` times the `n` prepared activation rows from
/// `first`, into rows `out_row .. out_row + n` (each `w.rows()` values) of output `out`.
#[derive(Clone, Copy, Debug)]
pub struct MatmulGroup<'a> {
    pub w: QMatrix<'a>,
    pub first: usize,
    pub n: usize,
    pub out: usize,
    pub out_row: usize,
}

impl MatmulGroup<'_> {
    /// `v` emptied with its allocation kept, as a list of groups of another lifetime: a
    /// caller keeps one list in its scratch between calls, whose matrices it borrows anew
    /// each time, and allocates nothing once it has grown.
    pub fn recycle<'b>(v: Vec<MatmulGroup<'_>>) -> Vec<MatmulGroup<'b>> {
        let mut v = std::mem::ManuallyDrop::new(v);
        v.clear();
        let (ptr, cap) = (v.as_mut_ptr(), v.capacity());
        // SAFETY: the allocation came from a `Vec` of the same type up to a lifetime (same
        // layout), with the same capacity; the length is 0, so no value of the old lifetime
        // survives, and `v` is never dropped.
        unsafe { Vec::from_raw_parts(ptr.cast::<MatmulGroup<'b>>(), 0, cap) }
    }
}

/// Rows of prepared activations a group of eight or more starts on a multiple of (the
/// eight-token kernels take the block scales of eight rows interleaved, in the prepared
/// rows' groups of eight).
pub const GROUP_ROW_ALIGN: usize = 8;

/// Whether a group of `n` rows should start on a multiple of [`GROUP_ROW_ALIGN`]: it must
/// when it has that many or more; a group of six or seven should, so that its tokens take one
/// eight-token call over padding rows instead of a four-token call and two or three single
/// dots (see `grouped_rows`). Any other group may start anywhere.
pub fn group_starts_aligned(n: usize) -> bool {
    n >= GROUP_ROW_ALIGN || n % GROUP_ROW_ALIGN >= 6
}

/// Grouped tasks per thread (claimed dynamically: a late thread delays the call by one).
const GROUPED_TASKS_PER_THREAD: usize = 8;

/// How many activation rows from a group's first the group's GEMM tiles may read, of the
/// `avail` prepared rows there (real rows of later groups, or the zero rows that pad the
/// prepared rows to whole groups of eight): the group's own `n` and, for a ragged last group
/// of tokens, the padding that turns the calls its tokens would otherwise cost into one wider
/// call whose extra outputs are dropped (each output is still one dot kernel call's bits;
/// what the padding rows hold does not matter).
///
/// The tile takes an eight-token call for a last group of five to seven tokens when the rows
/// are there, else a four-token call and single dots; a four-token call for two or three
/// when the rows are there, else single dots. Measured on the AVX-512 Q4_K and Q6_K tiles (one
/// thread, matrix in cache), an eight-token call costs about 1.7 four-token calls and a single
/// dot about 0.43 of one, so the cheapest cover of the last `n % 8` tokens is: six or seven,
/// one eight-token call (padding to eight; needs `first` on a multiple of eight, where the
/// interleaved scales of eight rows start); five, a four-token call and a single dot; three,
/// a four-token call (one padding row); one, two or four, no padding.
fn grouped_rows(first: usize, n: usize, avail: usize) -> usize {
    let want = match n % 8 {
        6 | 7 if first.is_multiple_of(GROUP_ROW_ALIGN) => n.next_multiple_of(8),
        3 => n + 1,
        _ => n,
    };
    want.min(avail).max(n)
}

/// Several matrices over parts of one set of prepared activation rows (a mixture-of-experts
/// layer: each expert's matrix over its tokens' rows) in **one** parallel region: the work
/// items are (group, chunk of rows), each over all of its group's activation rows, so each
/// weight row is read once per call (weight-stationary, as [`matmul`]) and the threads meet
/// once per call rather than once per matrix. Each output element is one call of a dot
/// kernel, bit-identical to [`matmul`] on the same matrix and rows, whatever the grouping or
/// the number of threads.
///
/// Activations are converted once per activation type, as for [`matmul_prepared`], however
/// many groups read a row (a decode step's experts all read the same row).
///
/// A group's last few tokens may run a wider kernel over the prepared rows after its own (a
/// later group's, or padding), dropping those outputs: a group of six or seven tokens (or
/// whose count is six or seven past a multiple of eight) takes one eight-token call if it
/// starts on a multiple of [`GROUP_ROW_ALIGN`] ([`group_starts_aligned`]).
///
/// # Panics
/// If a group's `w.cols()` differs from the prepared `cols`, its rows are not within the
/// prepared rows, a group of [`GROUP_ROW_ALIGN`] or more rows does not start on a multiple
/// of it, its `out` is not an index of `outs` or its output rows do not fit there, or two
/// groups writing one output are not in ascending order of disjoint output rows.
pub fn matmul_grouped<const N: usize>(
    groups: &[MatmulGroup<'_>],
    scratch: &mut MatmulScratch,
    outs: [&mut [f32]; N],
) {
    matmul_grouped_with(kernels(), groups, scratch, outs)
}

/// [`matmul_grouped`] with the kernels of a specific ISA (tests, benchmarks).
pub fn matmul_grouped_with<const N: usize>(
    k: &Kernels,
    groups: &[MatmulGroup<'_>],
    scratch: &mut MatmulScratch,
    outs: [&mut [f32]; N],
) {
    let mut ends = [0usize; N];
    for (i, g) in groups.iter().enumerate() {
        assert_eq!(
            g.w.cols, scratch.cols,
            "matmul_grouped: group {i}'s matrix has {} columns, prepared activations {}",
            g.w.cols, scratch.cols
        );
        assert!(
            g.first <= scratch.n_tokens && g.n <= scratch.n_tokens - g.first,
            "matmul_grouped: group {i}'s rows {}..{} are not within the {} prepared rows",
            g.first,
            g.first + g.n,
            scratch.n_tokens
        );
        assert!(
            g.n < GROUP_ROW_ALIGN || g.first.is_multiple_of(GROUP_ROW_ALIGN),
            "matmul_grouped: group {i} of {} rows starts at row {}, not a multiple of \
             {GROUP_ROW_ALIGN}",
            g.n,
            g.first
        );
        assert!(
            g.out < N,
            "matmul_grouped: group {i} writes output {} of {N}",
            g.out
        );
        let (o0, o1) = (g.out_row * g.w.rows, (g.out_row + g.n) * g.w.rows);
        assert!(
            o0 >= ends[g.out] && o1 <= outs[g.out].len(),
            "matmul_grouped: group {i}'s output values {o0}..{o1} overlap an earlier group's \
             (which end at {}) or pass the end of output {} ({} values)",
            ends[g.out],
            g.out,
            outs[g.out].len()
        );
        if g.n > 0 {
            ends[g.out] = o1;
        }
    }
    for g in groups {
        // Converts the rows, once per activation type.
        scratch.act_rows(k, g.w.wt.act());
    }

    // The plan: each group's rows cut into chunks so that there are a few tasks per thread
    // overall and none smaller than GEMV_MIN_ROWS rows (but at least one task per group).
    let threads = pool::current().n_threads();
    let work = |g: &MatmulGroup| g.n as u128 * g.w.data.len() as u128;
    let total = groups.iter().map(work).sum::<u128>();
    let per_task = (total / (GROUPED_TASKS_PER_THREAD * threads) as u128).max(1);
    let mut plan = std::mem::take(&mut scratch.group_tasks);
    plan.clear();
    let mut n_tasks = 0;
    for g in groups {
        let rows = g.w.rows;
        let tasks = if g.n == 0 || rows == 0 {
            0
        } else if threads <= 1 {
            1
        } else {
            let want = work(g).div_ceil(per_task).min(rows as u128) as usize;
            want.clamp(1, rows.div_ceil(GEMV_MIN_ROWS))
        };
        let rc = if tasks == 0 {
            1
        } else {
            rows.div_ceil(tasks).next_multiple_of(4)
        };
        n_tasks += if tasks == 0 { 0 } else { rows.div_ceil(rc) };
        plan.push((n_tasks, rc));
    }
    // Tasks are handed out largest first (by weight bytes times tokens), so that the last
    // ones claimed are small and the threads finish together: an expert that most tokens
    // chose is one or a few large tasks, and in group order it might come last.
    let mut order = std::mem::take(&mut scratch.task_order);
    order.clear();
    let mut first_task = 0;
    for (g, &(end, rc)) in groups.iter().zip(&plan) {
        for i in first_task..end {
            let r0 = (i - first_task) * rc;
            let r1 = (r0 + rc).min(g.w.rows);
            let work = (r1 - r0) as u64 * g.w.row_bytes as u64 * g.n as u64;
            order.push((work, i as u32));
        }
        first_task = end;
    }
    if threads > 1 {
        // Unstable but total: equal work keeps task order (rows ascending in a group).
        order.sort_unstable_by_key(|&(work, i)| (std::cmp::Reverse(work), i));
    }

    let mut views = [None; AType::COUNT];
    for g in groups {
        let at = g.w.wt.act();
        views[at as usize].get_or_insert_with(|| scratch.rows_of(at));
    }
    let outs = outs.map(SharedOut::new);
    let task = |j: usize| {
        let i = order[j].1 as usize;
        let gi = plan.partition_point(|&(end, _)| end <= i);
        let g = &groups[gi];
        let (end, rc) = plan[gi];
        let first_task = end - g.w.rows.div_ceil(rc);
        let r0 = (i - first_task) * rc;
        let r1 = (r0 + rc).min(g.w.rows);
        let at = g.w.wt.act();
        let Some(a) = views[at as usize] else {
            unreachable!("every group's activation type was converted above")
        };
        let wk = k.weight(g.w.wt);
        let out = outs[g.out].sub(g.out_row * g.w.rows, g.n * g.w.rows);
        if g.n == 1 {
            let row = &a.a[g.first * a.stride..(g.first + 1) * a.stride];
            // SAFETY: task `i` alone writes rows r0..r1 of this group's one output row
            // (groups' output rows are disjoint, checked above).
            gemv_rows(wk, &g.w, row, r0, unsafe { out.slice(r0..r1) });
        } else {
            let sc8_from = (g.first * a.sc_stride).min(a.sc8.len());
            let avail = (a.a.len().checked_div(a.stride).unwrap_or(0)).saturating_sub(g.first);
            // The group's rows and the padding its last tokens' calls may read.
            let n_read = grouped_rows(g.first, g.n, avail);
            let ag = ActRows {
                a: &a.a[g.first * a.stride..(g.first + n_read) * a.stride],
                stride: a.stride,
                sc: &a.sc[g.first * a.sc_stride..(g.first + n_read) * a.sc_stride],
                sc_stride: a.sc_stride,
                // The group starts on a group of eight interleaved rows when it has eight
                // or more (checked above) or is padded to eight (`grouped_rows`).
                sc8: &a.sc8[sc8_from..],
                lay8: &a.lay8[(g.first / 8
                    * lay8_group_bytes(at, g.w.cols / at.ggml().block_elems()))
                .min(a.lay8.len())..],
            };
            // SAFETY: task `i` alone writes rows r0..r1 of this group's output rows (as
            // above), all of its tokens (and only those: the tile drops padding outputs).
            unsafe { gemm_tile(wk, &g.w, ag, (0, g.n), (r0, r1), &out) };
        }
    };
    let p = pool::current();
    if threads <= 1 || n_tasks <= 1 {
        (0..n_tasks).for_each(task);
    } else {
        p.run(n_tasks, &task);
    }
    scratch.group_tasks = plan;
    scratch.task_order = order;
}
