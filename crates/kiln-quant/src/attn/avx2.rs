//! AVX2 (+ FMA + F16C) attention kernels, bit-identical to `scalar.rs`: the same roundings
//! in the same order. Scores run eight keys per register (one lane per key, each lane a
//! sequential sum over the dimensions); value accumulation keeps up to 64 dimensions of the
//! accumulator in registers across keys, rounding to f16 after every step exactly as a
//! store and reload would.
//!
//! Every function here requires AVX2, FMA and F16C (its `target_feature`s), which the table
//! in `mod.rs` guarantees, and the page bounds its safe wrapper checks: each page offset plus
//! `rows · bs` elements lies inside the arena slice. The raw loads below rely on that.

use std::arch::x86_64::*;

use half::f16;

use super::scalar::SPLIT_STEP;

/// Rounds eight floats to f16 and back (`vcvtps2ph` with round-to-nearest-even).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn r16(x: __m256) -> __m256 {
    _mm256_cvtph_ps(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(x))
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn round_f16(x: &[f32], out: &mut [f32]) {
    let n8 = x.len() / 8 * 8;
    for (o, c) in out[..n8].chunks_exact_mut(8).zip(x[..n8].chunks_exact(8)) {
        // SAFETY: `c` and `o` hold exactly 8 floats each.
        unsafe { _mm256_storeu_ps(o.as_mut_ptr(), r16(_mm256_loadu_ps(c.as_ptr()))) };
    }
    super::scalar::round_f16(&x[n8..], &mut out[n8..]);
}

/// Where group `g` (eight consecutive slots) of the pages starts in the arena, and where its
/// eight scores go in `out`.
#[inline(always)]
fn group(pages: &[usize], bs: usize, gpp: usize, g: usize) -> (usize, usize) {
    let (p, r) = (g / gpp, g % gpp);
    (pages[p] + r * 8, p * bs + r * 8)
}

macro_rules! scores_kernel {
    ($name:ident, $elem:ty, $load:ident, $tail:path) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(super) fn $name(
            q: &[f32],
            k: &[$elem],
            pages: &[usize],
            bs: usize,
            scale: f32,
            out: &mut [f32],
        ) {
            let gpp = bs / 8;
            let n_groups = pages.len() * gpp;
            let sc = _mm256_set1_ps(scale);
            let kp = k.as_ptr();
            let mut g = 0;
            // Four groups at once: four independent FMA chains hide the FMA latency.
            while g + 4 <= n_groups {
                let gs = [
                    group(pages, bs, gpp, g),
                    group(pages, bs, gpp, g + 1),
                    group(pages, bs, gpp, g + 2),
                    group(pages, bs, gpp, g + 3),
                ];
                let mut a = [_mm256_set1_ps(-0.0); 4];
                for (d, &qd) in q.iter().enumerate() {
                    let qv = _mm256_set1_ps(qd);
                    for (ai, &(src, _)) in a.iter_mut().zip(&gs) {
                        // SAFETY: slot group `src..src + 8` of dimension row `d < q.len()`
                        // lies in its page, which the wrapper checked is inside `k`.
                        let kv = unsafe { $load(kp.add(src + d * bs)) };
                        *ai = _mm256_fmadd_ps(qv, kv, *ai);
                    }
                }
                for (ai, &(_, dst)) in a.iter().zip(&gs) {
                    let o = &mut out[dst..dst + 8];
                    // SAFETY: `o` holds exactly 8 floats.
                    unsafe { _mm256_storeu_ps(o.as_mut_ptr(), _mm256_mul_ps(*ai, sc)) };
                }
                g += 4;
            }
            while g < n_groups {
                let (src, dst) = group(pages, bs, gpp, g);
                let mut a = _mm256_set1_ps(-0.0);
                for (d, &qd) in q.iter().enumerate() {
                    // SAFETY: as above.
                    let kv = unsafe { $load(kp.add(src + d * bs)) };
                    a = _mm256_fmadd_ps(_mm256_set1_ps(qd), kv, a);
                }
                let o = &mut out[dst..dst + 8];
                // SAFETY: `o` holds exactly 8 floats.
                unsafe { _mm256_storeu_ps(o.as_mut_ptr(), _mm256_mul_ps(a, sc)) };
                g += 1;
            }
            // Slots past the last whole group of eight (page sizes not a multiple of 8).
            if gpp * 8 < bs {
                for (&page, o) in pages.iter().zip(out.chunks_exact_mut(bs)) {
                    for slot in gpp * 8..bs {
                        o[slot] = $tail(q, k, page, bs, slot) * scale;
                    }
                }
            }
        }
    };
}

/// Eight halves at `p` widened to f32.
///
/// # Safety
/// `p..p + 8` must be readable.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load_f16x8(p: *const f16) -> __m256 {
    // SAFETY: the caller guarantees 16 readable bytes; unaligned load.
    _mm256_cvtph_ps(unsafe { _mm_loadu_si128(p.cast()) })
}

/// Eight floats at `p`.
///
/// # Safety
/// `p..p + 8` must be readable.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load_f32x8(p: *const f32) -> __m256 {
    // SAFETY: the caller guarantees 32 readable bytes; unaligned load.
    unsafe { _mm256_loadu_ps(p) }
}

/// Asks for the `bytes` at `p` to be brought into the cache (a hint: no fault, no effect on
/// results). The kernels call it for the page after the one they are reading, whose address
/// the hardware prefetchers cannot guess (pages are scattered through the arena).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn prefetch_bytes<T>(p: *const T, bytes: usize) {
    let p = p.cast::<i8>();
    for at in (0..bytes).step_by(64) {
        // A prefetch never faults; the address is only formed, not dereferenced.
        _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(at));
    }
}

/// One slot's sequential f16 score (the scalar oracle's loop of fused steps).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn tail_f16(q: &[f32], k: &[f16], page: usize, bs: usize, slot: usize) -> f32 {
    let mut acc = -0.0f32;
    for (d, &qd) in q.iter().enumerate() {
        acc = qd.mul_add(k[page + d * bs + slot].to_f32(), acc);
    }
    acc
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn tail_f32(q: &[f32], k: &[f32], page: usize, bs: usize, slot: usize) -> f32 {
    let mut acc = -0.0f32;
    for (d, &qd) in q.iter().enumerate() {
        acc = qd.mul_add(k[page + d * bs + slot], acc);
    }
    acc
}

scores_kernel!(scores_f16, f16, load_f16x8, tail_f16);
scores_kernel!(scores_f32, f32, load_f32x8, tail_f32);

/// Walks keys `first..first + n` across `pages` without a division per key: yields each
/// key's row offset (rows of `row` elements).
struct Rows<'a> {
    pages: &'a [usize],
    bs: usize,
    row: usize,
    page: usize,
    slot: usize,
}

impl<'a> Rows<'a> {
    fn new(pages: &'a [usize], bs: usize, row: usize, first: usize) -> Self {
        Rows {
            pages,
            bs,
            row,
            page: first / bs,
            slot: first % bs,
        }
    }

    #[inline(always)]
    fn next_row(&mut self) -> usize {
        let at = self.pages[self.page] + self.slot * self.row;
        self.slot += 1;
        if self.slot == self.bs {
            self.slot = 0;
            self.page += 1;
        }
        at
    }
}

/// Value elements an accumulator can take eight at a time (widened exactly).
trait Value8: Copy {
    /// Eight values at `p` as f32.
    ///
    /// # Safety
    /// `p..p + 8` must be readable, and the CPU must have AVX2, FMA and F16C.
    unsafe fn load8(p: *const Self) -> __m256;
    fn widen(self) -> f32;
}

impl Value8 for f32 {
    #[inline(always)]
    unsafe fn load8(p: *const f32) -> __m256 {
        // SAFETY: the caller's contract.
        unsafe { load_f32x8(p) }
    }
    #[inline(always)]
    fn widen(self) -> f32 {
        self
    }
}

impl Value8 for f16 {
    #[inline(always)]
    unsafe fn load8(p: *const f16) -> __m256 {
        // SAFETY: the caller's contract.
        unsafe { load_f16x8(p) }
    }
    #[inline(always)]
    fn widen(self) -> f32 {
        self.to_f32()
    }
}

/// An accumulator element: an f32 accumulator keeps every step's float result; an f16 one
/// rounds it to f16 after every step, exactly as a store and reload would (the scalar
/// oracle's `accum_f16`).
trait Acc8: Value8 {
    /// Rounds eight lanes to the accumulator's precision.
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and F16C.
    unsafe fn round8(x: __m256) -> __m256;
    /// Writes eight lanes, already rounded by [`Acc8::round8`] (so exactly representable), to
    /// `p`.
    ///
    /// # Safety
    /// `p..p + 8` must be writable, and the CPU must have AVX2, FMA and F16C.
    unsafe fn store8(p: *mut Self, x: __m256);
    /// Rounds one value to the accumulator's precision.
    fn round(x: f32) -> f32;
    /// The nearest accumulator value to `x`.
    fn narrow(x: f32) -> Self;
}

impl Acc8 for f32 {
    #[inline(always)]
    unsafe fn round8(x: __m256) -> __m256 {
        x
    }
    #[inline(always)]
    unsafe fn store8(p: *mut f32, x: __m256) {
        // SAFETY: the caller's contract.
        unsafe { _mm256_storeu_ps(p, x) }
    }
    #[inline(always)]
    fn round(x: f32) -> f32 {
        x
    }
    #[inline(always)]
    fn narrow(x: f32) -> f32 {
        x
    }
}

impl Acc8 for f16 {
    #[inline(always)]
    unsafe fn round8(x: __m256) -> __m256 {
        // SAFETY: the caller's contract (F16C).
        unsafe { r16(x) }
    }
    #[inline(always)]
    unsafe fn store8(p: *mut f16, x: __m256) {
        // SAFETY: the caller's contract: F16C, and 16 writable bytes (unaligned store).
        unsafe { _mm_storeu_si128(p.cast(), _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(x)) }
    }
    #[inline(always)]
    fn round(x: f32) -> f32 {
        f16::from_f32(x).to_f32()
    }
    #[inline(always)]
    fn narrow(x: f32) -> f16 {
        f16::from_f32(x)
    }
}

/// One key's step on one accumulator element, as the scalar oracle takes it: rescale by `m`
/// (skipped when 1), rounded to the accumulator's precision, then `fma(x, w, ·)`, rounded.
#[inline(always)]
fn step<A: Acc8, V: Value8>(a: &mut A, x: V, m: f32, w: f32) {
    let mut y = a.widen();
    if m != 1.0 {
        y = A::round(y * m);
    }
    *a = A::narrow(x.widen().mul_add(w, y));
}

/// `N` registers (8·N dimensions from `d0`) of the accumulator through all keys.
///
/// # Safety
/// `acc[d0..d0 + 8N]` must exist and every key row `r` must have `v[r + d0..r + d0 + 8N]`
/// (guaranteed by the wrapper's page check, as `d0 + 8N ≤ acc.len()`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
unsafe fn accum_regs<const N: usize, A: Acc8, V: Value8>(
    acc: &mut [A],
    v: &[V],
    pages: &[usize],
    bs: usize,
    first: usize,
    ms: &[f32],
    vs: &[f32],
    d0: usize,
) {
    let dv = acc.len();
    let ap = acc[d0..d0 + 8 * N].as_mut_ptr();
    let mut a = [_mm256_setzero_ps(); N];
    for (j, aj) in a.iter_mut().enumerate() {
        // SAFETY: `ap` points at 8·N accumulators; this function's target features.
        *aj = unsafe { A::load8(ap.add(8 * j)) };
    }
    let vp = v.as_ptr();
    let mut rows = Rows::new(pages, bs, dv, first);
    for (&m, &w) in ms.iter().zip(vs) {
        let row = rows.next_row() + d0;
        if m != 1.0 {
            let mv = _mm256_set1_ps(m);
            for aj in a.iter_mut() {
                // SAFETY: this function's target features.
                *aj = unsafe { A::round8(_mm256_mul_ps(*aj, mv)) };
            }
        }
        let wv = _mm256_set1_ps(w);
        for (j, aj) in a.iter_mut().enumerate() {
            // SAFETY: the key's row holds `dv ≥ d0 + 8N` values inside a checked page.
            let x = unsafe { V::load8(vp.add(row + 8 * j)) };
            // SAFETY: this function's target features.
            *aj = unsafe { A::round8(_mm256_fmadd_ps(x, wv, *aj)) };
        }
    }
    for (j, aj) in a.iter().enumerate() {
        // SAFETY: `ap` points at 8·N accumulators; this function's target features.
        unsafe { A::store8(ap.add(8 * j), *aj) };
    }
}

/// Value accumulation over keys `first..first + ms.len()`: 64 dimensions at a time in
/// registers, then 8, then the tail one element at a time with the scalar oracle's step.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn accum<A: Acc8, V: Value8>(
    acc: &mut [A],
    v: &[V],
    pages: &[usize],
    bs: usize,
    first: usize,
    ms: &[f32],
    vs: &[f32],
) {
    let dv = acc.len();
    let mut d0 = 0;
    while d0 + 64 <= dv {
        // SAFETY: `d0 + 64 ≤ dv`; pages checked by the wrapper.
        unsafe { accum_regs::<8, A, V>(acc, v, pages, bs, first, ms, vs, d0) };
        d0 += 64;
    }
    while d0 + 8 <= dv {
        // SAFETY: `d0 + 8 ≤ dv`; pages checked by the wrapper.
        unsafe { accum_regs::<1, A, V>(acc, v, pages, bs, first, ms, vs, d0) };
        d0 += 8;
    }
    if d0 < dv {
        let mut rows = Rows::new(pages, bs, dv, first);
        for (&m, &w) in ms.iter().zip(vs) {
            let row = rows.next_row();
            for d in d0..dv {
                step(&mut acc[d], v[row + d], m, w);
            }
        }
    }
}

macro_rules! accum_kernel {
    ($name:ident, $acc:ty, $val:ty) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        pub(super) fn $name(
            acc: &mut [$acc],
            v: &[$val],
            pages: &[usize],
            bs: usize,
            first: usize,
            ms: &[f32],
            vs: &[f32],
        ) {
            accum::<$acc, $val>(acc, v, pages, bs, first, ms, vs)
        }
    };
}

accum_kernel!(accum_f16, f16, f16);
accum_kernel!(accum_f32, f32, f32);
accum_kernel!(accum_f16_f32, f32, f16);

/// Query rows per block of the many-row score kernels: each key register loaded (and
/// widened) serves this many rows.
const SCORE_ROWS: usize = 6;

/// Scores of rows `r0..r0 + R` (rows of `hd` in `q`, of `n = pages.len()·bs` in `out`)
/// against every page: two groups of eight keys at a time, so each dimension step is two
/// key loads, `R` broadcasts and `2R` independent fused multiply-adds. Every lane is still
/// one key's sequential sum over the dimensions, as in the one-row kernel.
///
/// # Safety
/// Rows `r0..r0 + R` exist in `q` and `out`, and every page lies inside `k` (checked by the
/// wrapper).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
unsafe fn scores_block<const R: usize, V: Value8>(
    q: &[f32],
    hd: usize,
    k: &[V],
    pages: &[usize],
    bs: usize,
    scale: f32,
    out: &mut [f32],
    r0: usize,
) {
    let n = pages.len() * bs;
    let gpp = bs / 8;
    let n_groups = pages.len() * gpp;
    let sc = _mm256_set1_ps(scale);
    let kp = k.as_ptr();
    let qs = &q[r0 * hd..(r0 + R) * hd];
    let os = &mut out[r0 * n..(r0 + R) * n];
    let qp: [*const f32; R] = std::array::from_fn(|i| qs[i * hd..(i + 1) * hd].as_ptr());
    let mut g = 0;
    while g < n_groups {
        // Two groups when there are two left, else one (the second repeats the first and is
        // not stored).
        let two = g + 1 < n_groups;
        let g0 = group(pages, bs, gpp, g);
        let g1 = if two {
            group(pages, bs, gpp, g + 1)
        } else {
            g0
        };
        let mut a = [[_mm256_set1_ps(-0.0); 2]; R];
        let (mut p0, mut p1) = (kp.wrapping_add(g0.0), kp.wrapping_add(g1.0));
        for d in 0..hd {
            // SAFETY: slot groups `src..src + 8` of dimension row `d < hd` lie in their
            // pages, which the wrapper checked are inside `k`.
            let (k0, k1) = unsafe { (V::load8(p0), V::load8(p1)) };
            for (ai, &qi) in a.iter_mut().zip(&qp) {
                // SAFETY: `d < hd`, inside the row.
                let qv = _mm256_set1_ps(unsafe { *qi.add(d) });
                ai[0] = _mm256_fmadd_ps(qv, k0, ai[0]);
                ai[1] = _mm256_fmadd_ps(qv, k1, ai[1]);
            }
            (p0, p1) = (p0.wrapping_add(bs), p1.wrapping_add(bs));
        }
        for (i, ai) in a.iter().enumerate() {
            let o = &mut os[i * n + g0.1..i * n + g0.1 + 8];
            // SAFETY: `o` holds exactly 8 floats.
            unsafe { _mm256_storeu_ps(o.as_mut_ptr(), _mm256_mul_ps(ai[0], sc)) };
            if two {
                let o = &mut os[i * n + g1.1..i * n + g1.1 + 8];
                // SAFETY: `o` holds exactly 8 floats.
                unsafe { _mm256_storeu_ps(o.as_mut_ptr(), _mm256_mul_ps(ai[1], sc)) };
            }
        }
        g += if two { 2 } else { 1 };
    }
    // Slots past the last whole group of eight (page sizes not a multiple of 8).
    if gpp * 8 < bs {
        for (qr, o) in qs.chunks_exact(hd).zip(os.chunks_exact_mut(n)) {
            for (&page, o) in pages.iter().zip(o.chunks_exact_mut(bs)) {
                for (slot, o) in o.iter_mut().enumerate().skip(gpp * 8) {
                    let mut acc = -0.0f32;
                    for (d, &qd) in qr.iter().enumerate() {
                        acc = qd.mul_add(k[page + d * bs + slot].widen(), acc);
                    }
                    *o = acc * scale;
                }
            }
        }
    }
}

/// Many query rows against the same pages: blocks of [`SCORE_ROWS`] rows, then the rest
/// (one to five rows) as one block.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn scores_rows<V: Value8>(
    q: &[f32],
    hd: usize,
    k: &[V],
    pages: &[usize],
    bs: usize,
    scale: f32,
    out: &mut [f32],
) {
    let rows = q.len() / hd;
    let mut r = 0;
    while r + SCORE_ROWS <= rows {
        // SAFETY: rows `r..r + SCORE_ROWS` exist; pages checked by the wrapper.
        unsafe { scores_block::<SCORE_ROWS, V>(q, hd, k, pages, bs, scale, out, r) };
        r += SCORE_ROWS;
    }
    // The rest as one block: a GQA group of three query heads (Llama-3.2-3B) is a block
    // of three, not three blocks of one, whose two FMA chains wait on each FMA's latency
    // and which load and widen every key three times.
    match rows - r {
        // SAFETY: rows `r..r + 5` exist; pages checked by the wrapper.
        5 => unsafe { scores_block::<5, V>(q, hd, k, pages, bs, scale, out, r) },
        // SAFETY: rows `r..r + 4` exist; pages checked by the wrapper.
        4 => unsafe { scores_block::<4, V>(q, hd, k, pages, bs, scale, out, r) },
        // SAFETY: rows `r..r + 3` exist; pages checked by the wrapper.
        3 => unsafe { scores_block::<3, V>(q, hd, k, pages, bs, scale, out, r) },
        // SAFETY: rows `r..r + 2` exist; pages checked by the wrapper.
        2 => unsafe { scores_block::<2, V>(q, hd, k, pages, bs, scale, out, r) },
        // SAFETY: row `r` exists; pages checked by the wrapper.
        1 => unsafe { scores_block::<1, V>(q, hd, k, pages, bs, scale, out, r) },
        _ => {}
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn scores_rows_f16(
    q: &[f32],
    hd: usize,
    k: &[f16],
    pages: &[usize],
    bs: usize,
    scale: f32,
    out: &mut [f32],
) {
    scores_rows(q, hd, k, pages, bs, scale, out)
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn scores_rows_f32(
    q: &[f32],
    hd: usize,
    k: &[f32],
    pages: &[usize],
    bs: usize,
    scale: f32,
    out: &mut [f32],
) {
    scores_rows(q, hd, k, pages, bs, scale, out)
}

/// `a + b`, register by register.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn add_rows<const R: usize>(a: [__m256; R], b: [__m256; R]) -> [__m256; R] {
    let mut c = a;
    for (c, b) in c.iter_mut().zip(b) {
        *c = _mm256_add_ps(*c, b);
    }
    c
}

/// Dimensions a group of eight keys is widened to, at most, before its scores are summed
/// (head sizes up to 256 — every architecture Kiln runs; larger ones take the oracle's steps).
const SPLIT_MAX: usize = 4 * SPLIT_STEP;

/// A group of eight keys widened to f32, dimension by dimension (`kw[d]` holds the eight
/// keys' dimension `d`).
type Widened = [__m256; SPLIT_MAX];

/// Lane sum `l` of [`super::scalar::dot_f16_split`] for rows `0..R` of `qp` (rows of `hd`)
/// against a widened group: dimensions `l, l + 64, …` (`NB` of them), fused from `+0.0`.
///
/// # Safety
/// Rows `0..R` of `qp` hold `hd ≥ 64·NB` floats.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn split_lane<const R: usize, const NB: usize>(
    qp: *const f32,
    hd: usize,
    kw: &Widened,
    l: usize,
) -> [__m256; R] {
    let mut a = [_mm256_setzero_ps(); R];
    for b in 0..NB {
        let d = l + b * SPLIT_STEP;
        for (i, a) in a.iter_mut().enumerate() {
            // SAFETY: the caller's contract.
            let qd = unsafe { *qp.add(i * hd + d) };
            *a = _mm256_fmadd_ps(_mm256_set1_ps(qd), kw[d], *a);
        }
    }
    a
}

/// One level of [`super::scalar::dot_f16_split`]'s tree: `(f(x) + f(x + 2s)) + (f(x + s) +
/// f(x + 3s))`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn fold4<const R: usize>(f: impl Fn(usize) -> [__m256; R], x: usize, s: usize) -> [__m256; R] {
    add_rows(
        add_rows(f(x), f(x + 2 * s)),
        add_rows(f(x + s), f(x + 3 * s)),
    )
}

/// The folded lane sums of [`super::scalar::dot_f16_split`] (its tree, fixed) of rows `0..R`
/// against a widened group: one register per row, one key per lane. The lanes fold by 32
/// and 16, the sixteen results by 8 and 4, the four by 2 and 1.
///
/// # Safety
/// As [`split_lane`].
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn split_group<const R: usize, const NB: usize>(
    qp: *const f32,
    hd: usize,
    kw: &Widened,
) -> [__m256; R] {
    // SAFETY: the caller's contract, passed on.
    let lane = |l: usize| unsafe { split_lane::<R, NB>(qp, hd, kw, l) };
    fold4(|i| fold4(|l| fold4(lane, l, 16), i, 4), 0, 1)
}

/// Query rows summed together against a widened group (each broadcast query value and each
/// widened key vector loaded serves [`SPLIT_ROWS`] fused multiply-adds).
const SPLIT_ROWS: usize = 2;

/// Rows `r0..r0 + R` against a widened group whose scores go to `out[r·n + at..][..8]`; the
/// f64 tail of head sizes not a multiple of 64 by the oracle's steps.
///
/// # Safety
/// Rows `r0..r0 + R` exist in `q` (rows of `hd ≥ 64·NB`); `src` is the group's offset in
/// `k`, inside a checked page.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
unsafe fn split_store<const R: usize, const NB: usize>(
    q: &[f32],
    hd: usize,
    kw: &Widened,
    k: &[f16],
    (src, bs): (usize, usize),
    scale: f32,
    (out, n, at): (&mut [f32], usize, usize),
    r0: usize,
) {
    let np = NB * SPLIT_STEP;
    // SAFETY: row `r0` exists in `q`; the caller's contract otherwise.
    let sums = unsafe { split_group::<R, NB>(q.as_ptr().add(r0 * hd), hd, kw) };
    for (i, sum) in sums.into_iter().enumerate() {
        let r = r0 + i;
        let o8 = &mut out[r * n + at..r * n + at + 8];
        if np == hd {
            // SAFETY: `o8` holds exactly 8 floats.
            unsafe { _mm256_storeu_ps(o8.as_mut_ptr(), _mm256_mul_ps(sum, _mm256_set1_ps(scale))) };
        } else {
            let mut lanes = [0.0f32; 8];
            // SAFETY: `lanes` holds eight floats.
            unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), sum) };
            let qr = &q[r * hd..(r + 1) * hd];
            for (j, (o, &l)) in o8.iter_mut().zip(&lanes).enumerate() {
                let mut s = f64::from(l);
                for (d, &qd) in qr.iter().enumerate().skip(np) {
                    s += f64::from(qd * k[src + d * bs + j].to_f32());
                }
                *o = s as f32 * scale;
            }
        }
    }
}

/// Every row against every whole group of eight keys: the group widened once (`NB` slabs
/// of 64 dimensions), then its scores for [`SPLIT_ROWS`] rows at a time.
///
/// # Safety
/// `hd ≥ 64·NB`, `q` holds rows of `hd` and `out` as many rows of `pages.len()·bs`, and every
/// page lies inside `k` (checked by the wrapper).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn split_groups<const NB: usize>(
    q: &[f32],
    hd: usize,
    k: &[f16],
    pages: &[usize],
    bs: usize,
    scale: f32,
    out: &mut [f32],
) {
    let n = pages.len() * bs;
    let gpp = bs / 8;
    let rows = q.len() / hd;
    let mut kw: Widened = [_mm256_setzero_ps(); SPLIT_MAX];
    for g in 0..pages.len() * gpp {
        if g % gpp == 0
            && let Some(&next) = pages.get(g / gpp + 1)
        {
            prefetch_bytes(k.as_ptr().wrapping_add(next), bs * hd * size_of::<f16>());
        }
        let (src, at) = group(pages, bs, gpp, g);
        for (d, w) in kw[..NB * SPLIT_STEP].iter_mut().enumerate() {
            // SAFETY: dimension row `d < hd` of the group lies in its checked page.
            *w = unsafe { load_f16x8(k.as_ptr().add(src + d * bs)) };
        }
        let mut r = 0;
        while r + SPLIT_ROWS <= rows {
            // SAFETY: rows `r..r + SPLIT_ROWS` exist; the caller's contract otherwise.
            unsafe {
                split_store::<SPLIT_ROWS, NB>(q, hd, &kw, k, (src, bs), scale, (out, n, at), r)
            };
            r += SPLIT_ROWS;
        }
        if r < rows {
            // SAFETY: row `r` exists; the caller's contract otherwise.
            unsafe { split_store::<1, NB>(q, hd, &kw, k, (src, bs), scale, (out, n, at), r) };
        }
    }
}

/// [`super::scalar::scores_rows_f16_split`]: each group of eight keys widened once for every
/// row, each lane of a row's register the oracle's tree of lane sums over one key; the f64
/// tail (head sizes not a multiple of 64), slots past the last whole group of eight and head
/// sizes above 256 go key by key through the oracle's steps.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn scores_rows_f16_split(
    q: &[f32],
    hd: usize,
    k: &[f16],
    pages: &[usize],
    bs: usize,
    scale: f32,
    out: &mut [f32],
) {
    let n = pages.len() * bs;
    let gpp = bs / 8;
    let nb = hd / SPLIT_STEP;
    match nb {
        // SAFETY: `hd ≥ 64`; rows and pages checked by the wrapper.
        1 => unsafe { split_groups::<1>(q, hd, k, pages, bs, scale, out) },
        // SAFETY: `hd ≥ 128`; rows and pages checked by the wrapper.
        2 => unsafe { split_groups::<2>(q, hd, k, pages, bs, scale, out) },
        // SAFETY: `hd ≥ 192`; rows and pages checked by the wrapper.
        3 => unsafe { split_groups::<3>(q, hd, k, pages, bs, scale, out) },
        // SAFETY: `hd ≥ 256`; rows and pages checked by the wrapper.
        4 => unsafe { split_groups::<4>(q, hd, k, pages, bs, scale, out) },
        _ => {}
    }
    // Slots the groups above did not score.
    let skip = if (1..=4).contains(&nb) { gpp * 8 } else { 0 };
    for (qr, o) in q.chunks_exact(hd).zip(out.chunks_exact_mut(n)) {
        for (&page, o) in pages.iter().zip(o.chunks_exact_mut(bs)) {
            for (slot, o) in o.iter_mut().enumerate().skip(skip) {
                *o = super::scalar::dot_f16_split(qr, |d| k[page + d * bs + slot].to_f32()) * scale;
            }
        }
    }
}

/// Accumulator rows per block of the many-row accumulators: each value register loaded
/// (and widened) serves this many rows.
const ACC_ROWS: usize = 6;

/// The weights of many rows over one key range: row `r`, key `i` at `r·stride + i`.
#[derive(Clone, Copy)]
struct RowWeights<'a> {
    ms: &'a [f32],
    vs: &'a [f32],
    stride: usize,
    n: usize,
}

/// The first key in `from..n` whose rescale factor `m[key]` is not exactly 1 (NaN
/// included, as `!=` has it), or `n`: eight keys a compare.
///
/// # Safety
/// `m..m + n` must be readable, and the CPU must have AVX2, FMA and F16C.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn next_rescale(m: *const f32, from: usize, n: usize) -> usize {
    let one = _mm256_set1_ps(1.0);
    let mut k = from;
    while k + 8 <= n {
        // SAFETY: `k + 8 ≤ n`, inside the caller's readable range.
        let x = unsafe { _mm256_loadu_ps(m.add(k)) };
        let ne = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_NEQ_UQ>(x, one));
        if ne != 0 {
            return k + ne.trailing_zeros() as usize;
        }
        k += 8;
    }
    // SAFETY: `k < n`, inside the caller's readable range.
    while k < n && unsafe { *m.add(k) } == 1.0 {
        k += 1;
    }
    k
}

/// `N` registers (8·N dimensions from `d0`) of accumulator rows `r0..r0 + R` through keys
/// `first..first + n`: per key, `N` value loads serve `R·N` steps. Each element takes exactly
/// the one-row kernel's steps in the same order.
///
/// The keys at which some row rescales (`ms ≠ 1`: in the prompt arithmetic only a row's
/// first key of a chunk) are found ahead, eight weights a compare, so the keys between them
/// run as one branch-free loop within a page: per key `N` loads, `R` broadcasts, `R·N`
/// fused multiply-adds, the weights read through one pointer per row.
///
/// # Safety
/// Rows `r0..r0 + R` of `acc` (rows of `dv`) exist, `d0 + 8N ≤ dv`, the weights hold every
/// row's `n` keys, and every key row lies in a checked page.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
unsafe fn accum_rows_regs<const R: usize, const N: usize, A: Acc8, V: Value8>(
    acc: &mut [A],
    dv: usize,
    v: &[V],
    pages: &[usize],
    bs: usize,
    first: usize,
    w: RowWeights<'_>,
    r0: usize,
    d0: usize,
) {
    let ap = acc.as_mut_ptr();
    let mut a = [[_mm256_setzero_ps(); N]; R];
    for (i, ai) in a.iter_mut().enumerate() {
        for (j, aj) in ai.iter_mut().enumerate() {
            // SAFETY: row `r0 + i` holds dimensions `d0..d0 + 8N`; this function's features.
            *aj = unsafe { A::load8(ap.add((r0 + i) * dv + d0 + 8 * j)) };
        }
    }
    let n = w.n;
    // Row `i`'s weights of key `k` at `wp[i] + k` (`mp[i] + k`): inside the checked slices.
    let wp: [*const f32; R] = std::array::from_fn(|i| w.vs[(r0 + i) * w.stride..].as_ptr());
    let mp: [*const f32; R] = std::array::from_fn(|i| w.ms[(r0 + i) * w.stride..].as_ptr());
    // SAFETY: each row's `n` rescale factors are readable (checked by the wrapper).
    let mut next: [usize; R] = std::array::from_fn(|i| unsafe { next_rescale(mp[i], 0, n) });
    let vp = v.as_ptr();
    let (mut page, mut slot) = (first / bs, first % bs);
    let mut key = 0;
    while key < n {
        for i in 0..R {
            if next[i] == key {
                // SAFETY: `key < n`, inside row `i`'s checked weights.
                let mv = _mm256_set1_ps(unsafe { *mp[i].add(key) });
                for aj in a[i].iter_mut() {
                    // SAFETY: this function's target features.
                    *aj = unsafe { A::round8(_mm256_mul_ps(*aj, mv)) };
                }
                // SAFETY: as for the first search.
                next[i] = unsafe { next_rescale(mp[i], key + 1, n) };
            }
        }
        // Up to the next rescale (every `next` is past `key` now), the page's end (`slot <
        // bs`) or the last key: at least this key.
        let stop = next.iter().fold(n, |s, &k| s.min(k)).min(key + bs - slot);
        let mut vr = vp.wrapping_add(pages[page] + slot * dv + d0);
        for k in key..stop {
            let mut x = [_mm256_setzero_ps(); N];
            for (j, xj) in x.iter_mut().enumerate() {
                // SAFETY: key `k`'s row lies in page `page` (`slot + k - key < bs`), a checked
                // page, and holds `dv ≥ d0 + 8N` values from `vr`.
                *xj = unsafe { V::load8(vr.add(8 * j)) };
            }
            for (ai, &wpi) in a.iter_mut().zip(&wp) {
                // SAFETY: `k < n`, inside the row's checked weights.
                let wv = _mm256_set1_ps(unsafe { *wpi.add(k) });
                for (aj, &xj) in ai.iter_mut().zip(&x) {
                    // SAFETY: this function's target features.
                    *aj = unsafe { A::round8(_mm256_fmadd_ps(xj, wv, *aj)) };
                }
            }
            vr = vr.wrapping_add(dv);
        }
        slot += stop - key;
        if slot == bs {
            slot = 0;
            page += 1;
        }
        key = stop;
    }
    for (i, ai) in a.iter().enumerate() {
        for (j, aj) in ai.iter().enumerate() {
            // SAFETY: as for the loads.
            unsafe { A::store8(ap.add((r0 + i) * dv + d0 + 8 * j), *aj) };
        }
    }
}

/// Rows `r0..r0 + R` over every dimension: 16 at a time, then 8, then the tail one element
/// at a time with the scalar oracle's step.
///
/// # Safety
/// As [`accum_rows_regs`], for every dimension.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
unsafe fn accum_rows_block<const R: usize, A: Acc8, V: Value8>(
    acc: &mut [A],
    dv: usize,
    v: &[V],
    pages: &[usize],
    bs: usize,
    first: usize,
    w: RowWeights<'_>,
    r0: usize,
) {
    let mut d0 = 0;
    while d0 + 16 <= dv {
        // SAFETY: `d0 + 16 ≤ dv`; the caller's contract otherwise.
        unsafe { accum_rows_regs::<R, 2, A, V>(acc, dv, v, pages, bs, first, w, r0, d0) };
        d0 += 16;
    }
    while d0 + 8 <= dv {
        // SAFETY: `d0 + 8 ≤ dv`; the caller's contract otherwise.
        unsafe { accum_rows_regs::<R, 1, A, V>(acc, dv, v, pages, bs, first, w, r0, d0) };
        d0 += 8;
    }
    if d0 < dv {
        for r in r0..r0 + R {
            let mut rows = Rows::new(pages, bs, dv, first);
            for key in 0..w.n {
                let row = rows.next_row();
                let (m, x) = (w.ms[r * w.stride + key], w.vs[r * w.stride + key]);
                for d in d0..dv {
                    step(&mut acc[r * dv + d], v[row + d], m, x);
                }
            }
        }
    }
}

/// Many accumulator rows over the same keys: blocks of [`ACC_ROWS`] rows, one of four, then
/// one at a time (the one-row kernel's 64-dimension blocks).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
fn accum_rows<A: Acc8, V: Value8>(
    acc: &mut [A],
    dv: usize,
    v: &[V],
    pages: &[usize],
    bs: usize,
    first: usize,
    n: usize,
    ms: &[f32],
    vs: &[f32],
    stride: usize,
) {
    let rows = acc.len() / dv;
    let w = RowWeights { ms, vs, stride, n };
    let mut r = 0;
    while r + ACC_ROWS <= rows {
        // SAFETY: rows `r..r + ACC_ROWS` exist; weights and pages checked by the wrapper.
        unsafe { accum_rows_block::<ACC_ROWS, A, V>(acc, dv, v, pages, bs, first, w, r) };
        r += ACC_ROWS;
    }
    if r + 4 <= rows {
        // SAFETY: rows `r..r + 4` exist; weights and pages checked by the wrapper.
        unsafe { accum_rows_block::<4, A, V>(acc, dv, v, pages, bs, first, w, r) };
        r += 4;
    }
    // One to three rows left: the one-row kernel each (its 64 dimensions in registers); a
    // block of three over 16-dimension passes measured no faster for Llama-3.2-3B's groups
    // of three query heads at depth 4096.
    while r < rows {
        let at = r * stride;
        accum::<A, V>(
            &mut acc[r * dv..(r + 1) * dv],
            v,
            pages,
            bs,
            first,
            &ms[at..at + n],
            &vs[at..at + n],
        );
        r += 1;
    }
}

/// `N` registers (8·N dimensions from `d0`) of every f16 accumulator row through keys
/// `first..first + n`, key after key: the key's value vectors are widened once and serve
/// every row, whose accumulator stays in memory as f16, so each step is a widening load, the
/// fused multiply-add and a rounding store — the oracle's store and reload made literal.
/// Rows × `N` independent steps per key hide the latency of the two conversions (about 14
/// cycles a step on Zen 3), which eight register-resident chains per key wait on.
///
/// # Safety
/// `acc` holds rows of `dv`, `d0 + 8N ≤ dv`, the weights hold every row's `n` keys, and
/// every key row lies in a checked page.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
unsafe fn accum_rows_f16_keys<const N: usize>(
    acc: &mut [f16],
    dv: usize,
    v: &[f16],
    pages: &[usize],
    bs: usize,
    first: usize,
    w: RowWeights<'_>,
    d0: usize,
) {
    let rows = acc.len() / dv;
    let (ap, vp) = (acc.as_mut_ptr(), v.as_ptr());
    let mut keys = Rows::new(pages, bs, dv, first);
    for key in 0..w.n {
        if keys.slot == 0
            && let Some(&next) = pages.get(keys.page + 1)
        {
            prefetch_bytes(vp.wrapping_add(next + d0), bs * dv * size_of::<f16>());
        }
        let row = keys.next_row() + d0;
        let mut x = [_mm256_setzero_ps(); N];
        for (j, xj) in x.iter_mut().enumerate() {
            // SAFETY: the key's row holds `dv ≥ d0 + 8N` values inside a checked page.
            *xj = unsafe { load_f16x8(vp.add(row + 8 * j)) };
        }
        for r in 0..rows {
            let at = r * w.stride + key;
            let (m, wv) = (w.ms[at], _mm256_set1_ps(w.vs[at]));
            // SAFETY: row `r` of `acc` holds dimensions `d0..d0 + 8N`.
            let p = unsafe { ap.add(r * dv + d0) };
            for (j, &xj) in x.iter().enumerate() {
                // SAFETY: `p + 8j .. p + 8j + 8` lies in row `r`; this function's features.
                unsafe {
                    let mut a = load_f16x8(p.add(8 * j));
                    if m != 1.0 {
                        a = r16(_mm256_mul_ps(a, _mm256_set1_ps(m)));
                    }
                    f16::store8(p.add(8 * j), _mm256_fmadd_ps(xj, wv, a));
                }
            }
        }
    }
}

/// Many f16 accumulator rows over the same keys (the one-row arithmetic's values): one row
/// by the one-row kernel (its 64 dimensions in registers), more key by key
/// ([`accum_rows_f16_keys`], 64 dimensions at a time, then 8), the dimensions past whole
/// registers with the scalar oracle's step.
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
pub(super) fn accum_rows_f16(
    acc: &mut [f16],
    dv: usize,
    v: &[f16],
    pages: &[usize],
    bs: usize,
    first: usize,
    n: usize,
    ms: &[f32],
    vs: &[f32],
    stride: usize,
) {
    let rows = acc.len() / dv;
    if rows == 1 {
        return accum::<f16, f16>(acc, v, pages, bs, first, &ms[..n], &vs[..n]);
    }
    let w = RowWeights { ms, vs, stride, n };
    let mut d0 = 0;
    while d0 + 64 <= dv {
        // SAFETY: `d0 + 64 ≤ dv`; weights and pages checked by the wrapper.
        unsafe { accum_rows_f16_keys::<8>(acc, dv, v, pages, bs, first, w, d0) };
        d0 += 64;
    }
    while d0 + 8 <= dv {
        // SAFETY: `d0 + 8 ≤ dv`; weights and pages checked by the wrapper.
        unsafe { accum_rows_f16_keys::<1>(acc, dv, v, pages, bs, first, w, d0) };
        d0 += 8;
    }
    if d0 < dv {
        for r in 0..rows {
            let mut keys = Rows::new(pages, bs, dv, first);
            for key in 0..n {
                let row = keys.next_row();
                let (m, x) = (ms[r * stride + key], vs[r * stride + key]);
                for d in d0..dv {
                    step(&mut acc[r * dv + d], v[row + d], m, x);
                }
            }
        }
    }
}

macro_rules! accum_rows_kernel {
    ($name:ident, $acc:ty, $val:ty) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        #[allow(clippy::too_many_arguments)]
        pub(super) fn $name(
            acc: &mut [$acc],
            dv: usize,
            v: &[$val],
            pages: &[usize],
            bs: usize,
            first: usize,
            n: usize,
            ms: &[f32],
            vs: &[f32],
            stride: usize,
        ) {
            accum_rows::<$acc, $val>(acc, dv, v, pages, bs, first, n, ms, vs, stride)
        }
    };
}

accum_rows_kernel!(accum_rows_f32, f32, f32);
accum_rows_kernel!(accum_rows_f16_f32, f32, f16);

/// [`super::scalar::exp`] on eight lanes, the same operations in the same order.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn exp8(x: __m256) -> __m256 {
    use super::scalar::{EXP_HI, EXP_LO, EXP_POLY, LN2_HI, LN2_LO, LOG2E};
    // In range for the arithmetic (a NaN lane becomes `EXP_HI`; its result is replaced).
    let xs = _mm256_max_ps(
        _mm256_min_ps(x, _mm256_set1_ps(EXP_HI)),
        _mm256_set1_ps(EXP_LO),
    );
    let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(
        xs,
        _mm256_set1_ps(LOG2E),
    ));
    let r = _mm256_fmadd_ps(n, _mm256_set1_ps(-LN2_HI), xs);
    let r = _mm256_fmadd_ps(n, _mm256_set1_ps(-LN2_LO), r);
    let mut p = _mm256_set1_ps(EXP_POLY[0]);
    for &c in &EXP_POLY[1..] {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
    }
    let one = _mm256_set1_ps(1.0);
    p = _mm256_fmadd_ps(p, r, one);
    p = _mm256_fmadd_ps(p, r, one);
    let e = _mm256_slli_epi32::<23>(_mm256_add_epi32(
        _mm256_cvtps_epi32(n),
        _mm256_set1_epi32(127),
    ));
    let y = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
    let lo = _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_set1_ps(EXP_LO));
    let hi = _mm256_cmp_ps::<_CMP_GT_OQ>(x, _mm256_set1_ps(EXP_HI));
    let nan = _mm256_cmp_ps::<_CMP_UNORD_Q>(x, x);
    let y = _mm256_blendv_ps(y, _mm256_setzero_ps(), lo);
    let y = _mm256_blendv_ps(y, _mm256_set1_ps(f32::INFINITY), hi);
    _mm256_blendv_ps(y, x, nan)
}

/// [`super::scalar::softmax_weights`]: sixteen scores a step in two registers (lanes 0–7
/// and 8–15 of the oracle's partial sums), then eight, then the rest one at a time.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn softmax_weights(s: &[f32], m: f32, out: &mut [f32]) -> (f32, f32) {
    let m = super::scalar::max_of(s, m);
    let n = s.len();
    let (sp, op) = (s.as_ptr(), out.as_mut_ptr());
    let mv = _mm256_set1_ps(m);
    let (mut a0, mut a1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let mut j = 0;
    while j + 16 <= n {
        // SAFETY: `j + 16 ≤ n ≤ out.len()` (the wrapper's check).
        unsafe {
            let e0 = exp8(_mm256_sub_ps(_mm256_loadu_ps(sp.add(j)), mv));
            let e1 = exp8(_mm256_sub_ps(_mm256_loadu_ps(sp.add(j + 8)), mv));
            _mm256_storeu_ps(op.add(j), e0);
            _mm256_storeu_ps(op.add(j + 8), e1);
            a0 = _mm256_add_ps(a0, e0);
            a1 = _mm256_add_ps(a1, e1);
        }
        j += 16;
    }
    if j + 8 <= n {
        // SAFETY: as above.
        unsafe {
            let e0 = exp8(_mm256_sub_ps(_mm256_loadu_ps(sp.add(j)), mv));
            _mm256_storeu_ps(op.add(j), e0);
            a0 = _mm256_add_ps(a0, e0);
        }
        j += 8;
    }
    let mut lanes = [0.0f32; 16];
    // SAFETY: `lanes` holds sixteen floats.
    unsafe {
        _mm256_storeu_ps(lanes.as_mut_ptr(), a0);
        _mm256_storeu_ps(lanes.as_mut_ptr().add(8), a1);
    }
    for (j, (&x, o)) in s.iter().zip(out.iter_mut()).enumerate().skip(j) {
        *o = super::scalar::exp(x - m);
        lanes[j % 16] += *o;
    }
    (m, super::scalar::fold_lanes(lanes))
}

/// [`super::scalar::expf`]'s common path on four `f64` lanes (arguments `|x| < 80`): the same
/// operations in the same order, the table entry by a gather.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn expf4(x: __m128) -> __m128 {
    use super::scalar::{EXPF_C, EXPF_INVLN2N, EXPF_SHIFT, EXPF_TAB};
    let xd = _mm256_cvtps_pd(x);
    let inv = _mm256_set1_pd(f64::from_bits(EXPF_INVLN2N));
    let shift = _mm256_set1_pd(f64::from_bits(EXPF_SHIFT));
    let z = _mm256_fmadd_pd(inv, xd, shift);
    let ki = _mm256_castpd_si256(z);
    let kd = _mm256_sub_pd(z, shift);
    let r = _mm256_fmsub_pd(inv, xd, kd);
    let at = _mm256_and_si256(ki, _mm256_set1_epi64x(31));
    // SAFETY: every index is below 32, the table's length.
    let t = unsafe { _mm256_i64gather_epi64::<8>(EXPF_TAB.as_ptr().cast(), at) };
    let s = _mm256_castsi256_pd(_mm256_add_epi64(t, _mm256_slli_epi64::<47>(ki)));
    let p = _mm256_fmadd_pd(
        r,
        _mm256_set1_pd(f64::from_bits(EXPF_C[0])),
        _mm256_set1_pd(f64::from_bits(EXPF_C[1])),
    );
    let r2 = _mm256_mul_pd(r, r);
    let y = _mm256_fmadd_pd(
        r,
        _mm256_set1_pd(f64::from_bits(EXPF_C[2])),
        _mm256_set1_pd(1.0),
    );
    let y = _mm256_fmadd_pd(p, r2, y);
    _mm256_cvtpd_ps(_mm256_mul_pd(y, s))
}

/// [`expf4`] on eight lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn expf8(x: __m256) -> __m256 {
    let lo = expf4(_mm256_castps256_ps128(x));
    let hi = expf4(_mm256_extractf128_ps::<1>(x));
    _mm256_insertf128_ps::<1>(_mm256_castps128_ps256(lo), hi)
}

/// Whether any lane of `x` is outside [`expf4`]'s range (`|x| ≥ 80`, infinite or NaN):
/// [`super::scalar::expf`]'s test on the exponent's top bits.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn expf_special(x: __m256) -> bool {
    use super::scalar::EXPF_SPECIAL_TOP;
    let top = _mm256_and_si256(
        _mm256_srli_epi32::<20>(_mm256_castps_si256(x)),
        _mm256_set1_epi32(0x7ff),
    );
    // `top ≤ 0x7ff`, so the signed compare is the unsigned one.
    _mm256_movemask_epi8(_mm256_cmpgt_epi32(
        top,
        _mm256_set1_epi32(EXPF_SPECIAL_TOP as i32),
    )) != 0
}

/// [`super::scalar::softmax_online`]: eight keys at a time when none of them raises the
/// running maximum (after a row's first keys, nearly always) — their weights by [`expf8`],
/// the sum taken lane by lane in key order as the oracle takes it; a block with a new
/// maximum or with an argument outside [`expf4`]'s range, and the tail, through the
/// oracle's steps.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn softmax_online(
    s: &[f32],
    mut max: f32,
    mut sum: f32,
    ms: &mut [f32],
    vs: &mut [f32],
) -> (f32, f32) {
    let n = s.len().min(ms.len()).min(vs.len());
    let (sp, msp, vsp) = (s.as_ptr(), ms.as_mut_ptr(), vs.as_mut_ptr());
    let mut j = 0;
    while j + 8 <= n {
        // SAFETY: `j + 8 ≤ n ≤ s.len()`.
        let x = unsafe { _mm256_loadu_ps(sp.add(j)) };
        let mv = _mm256_set1_ps(max);
        let a = _mm256_sub_ps(x, mv);
        if _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_GT_OQ>(x, mv)) != 0 || expf_special(a) {
            (max, sum) = super::scalar::softmax_online(
                &s[j..j + 8],
                max,
                sum,
                &mut ms[j..j + 8],
                &mut vs[j..j + 8],
            );
            j += 8;
            continue;
        }
        let w = expf8(a);
        let mut wl = [0.0f32; 8];
        // SAFETY: `wl` holds eight floats; `j + 8 ≤ n ≤ ms.len(), vs.len()`.
        unsafe {
            _mm256_storeu_ps(wl.as_mut_ptr(), w);
            _mm256_storeu_ps(msp.add(j), _mm256_set1_ps(1.0));
            _mm256_storeu_ps(vsp.add(j), w);
        }
        for &w in &wl {
            sum += w;
        }
        j += 8;
    }
    super::scalar::softmax_online(&s[j..n], max, sum, &mut ms[j..n], &mut vs[j..n])
}

/// [`super::scalar::silu_mul`]: eight values a step, `expf(−g)` by [`expf8`], then the
/// oracle's add, division and product; a step with an argument outside [`expf4`]'s range,
/// and the tail, by the oracle.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn silu_mul(g: &mut [f32], u: &[f32]) {
    let n = g.len().min(u.len());
    let one = _mm256_set1_ps(1.0);
    let (gp, up) = (g.as_mut_ptr(), u.as_ptr());
    let mut j = 0;
    while j + 8 <= n {
        // SAFETY: `j + 8 ≤ n ≤ g.len(), u.len()`.
        let (x, uv) = unsafe { (_mm256_loadu_ps(gp.add(j)), _mm256_loadu_ps(up.add(j))) };
        if expf_special(x) {
            super::scalar::silu_mul(&mut g[j..j + 8], &u[j..j + 8]);
        } else {
            let e = expf8(_mm256_xor_ps(x, _mm256_set1_ps(-0.0)));
            let y = _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(one, e)), uv);
            // SAFETY: as above.
            unsafe { _mm256_storeu_ps(gp.add(j), y) };
        }
        j += 8;
    }
    super::scalar::silu_mul(&mut g[j..n], &u[j..n]);
}
