//! AVX-512 many-row attention kernels (the prompt tiles and the query heads of a KV group),
//! bit-identical to `scalar.rs` like the AVX2 ones: the same roundings in the same order,
//! sixteen lanes a register.
//!
//! - Scores: sixteen keys per register (a page of 16 slots is one register per dimension),
//!   each lane one key's sequential sum over the dimensions; a block of query rows × key
//!   groups shares every key load (and its f16 widening): up to four rows × four groups (a
//!   decode step's query heads of one KV group: twelve independent chains of fused
//!   multiply-adds), five to eight rows × two groups.
//! - Values: a block of up to four accumulator rows × 64 dimensions (sixteen registers)
//!   stays in registers across the keys of a call; each value row is loaded and widened once
//!   per block. An f16 accumulator is rounded to f16 after every step in the register, as a
//!   store and reload would.
//! - Both prefetch what they read next (the next step's key groups; value rows a page
//!   ahead): a long context's pages are scattered through the cache arena, so the hardware
//!   prefetchers lose the stream at every page boundary.
//!
//! Shapes these kernels do not cover (page sizes not a multiple of 16, value rows not a
//! multiple of 16) go to the AVX2 kernels, which give the same bits. Every function here
//! requires AVX-512 F/BW/VL and AVX2, FMA and F16C (its `target_feature`s), which the table
//! in `mod.rs` guarantees, and the page bounds its safe wrapper checks.

use std::arch::x86_64::*;

use half::f16;

use super::avx2;

/// Values a 16-lane register takes, widened exactly to f32.
trait Value16: Copy {
    /// Sixteen values at `p` as f32.
    ///
    /// # Safety
    /// `p..p + 16` must be readable, and the CPU must have AVX-512 F.
    unsafe fn load16(p: *const Self) -> __m512;
}

impl Value16 for f32 {
    #[inline(always)]
    unsafe fn load16(p: *const f32) -> __m512 {
        // SAFETY: the caller's contract.
        unsafe { _mm512_loadu_ps(p) }
    }
}

impl Value16 for f16 {
    #[inline(always)]
    unsafe fn load16(p: *const f16) -> __m512 {
        // SAFETY: the caller's contract (32 readable bytes; AVX-512 F).
        unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p.cast())) }
    }
}

/// An accumulator element (see the AVX2 kernels' `Acc8`): f32 keeps every step's result,
/// f16 rounds it to f16 after every step.
trait Acc16: Value16 {
    /// Rounds sixteen lanes to the accumulator's precision.
    ///
    /// # Safety
    /// The CPU must have AVX-512 F.
    unsafe fn round16(x: __m512) -> __m512;
    /// Writes sixteen lanes already rounded by [`Acc16::round16`] to `p`.
    ///
    /// # Safety
    /// `p..p + 16` must be writable, and the CPU must have AVX-512 F.
    unsafe fn store16(p: *mut Self, x: __m512);
}

impl Acc16 for f32 {
    #[inline(always)]
    unsafe fn round16(x: __m512) -> __m512 {
        x
    }
    #[inline(always)]
    unsafe fn store16(p: *mut f32, x: __m512) {
        // SAFETY: the caller's contract.
        unsafe { _mm512_storeu_ps(p, x) }
    }
}

impl Acc16 for f16 {
    #[inline(always)]
    unsafe fn round16(x: __m512) -> __m512 {
        // SAFETY: the caller's contract (AVX-512 F).
        unsafe { _mm512_cvtph_ps(_mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(x)) }
    }
    #[inline(always)]
    unsafe fn store16(p: *mut f16, x: __m512) {
        // SAFETY: the caller's contract (32 writable bytes).
        unsafe { _mm256_storeu_si256(p.cast(), _mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(x)) }
    }
}

/// Scores of rows `r0..r0 + R` (rows of `hd` in `q`, of `n = pages.len()·bs` in `out`)
/// against every page, in groups of sixteen slots (`bs` a multiple of 16): `G` groups at a
/// time, so each dimension step is `G` key loads, `R` broadcasts and `G·R` independent fused
/// multiply-adds. Every lane is one key's sequential sum over the dimensions. While a step
/// of `G` groups runs, the next `G` groups' cache lines are prefetched (pages of a long
/// context are scattered in memory, out of the hardware prefetchers' reach).
///
/// # Safety
/// Rows `r0..r0 + R` exist in `q` and `out`, `bs` is a multiple of 16, and every page lies
/// inside `k` (checked by the wrapper).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
#[allow(clippy::too_many_arguments)]
unsafe fn scores_block<const R: usize, const G: usize, V: Value16>(
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
    let gpp = bs / 16;
    let n_groups = pages.len() * gpp;
    let sc = _mm512_set1_ps(scale);
    let kp = k.as_ptr();
    let qs = &q[r0 * hd..(r0 + R) * hd];
    let qp = qs.as_ptr();
    let os = &mut out[r0 * n..(r0 + R) * n];
    let op = os.as_mut_ptr();
    // Where group `g` starts in the arena, and where its scores go in a row of `out`.
    let at = |g: usize| {
        let (p, r) = (g / gpp, g % gpp);
        (pages[p] + r * 16, p * bs + r * 16)
    };
    // A dimension row of a group is 16 keys; prefetch once per 64-byte line.
    let pf_every = (64 / (16 * size_of::<V>())).max(1);
    let mut g = 0;
    while g < n_groups {
        // `G` groups when there are that many left, else as many as there are (the others
        // repeat the last one and are not stored).
        let live = G.min(n_groups - g);
        let mut gs = [(0, 0); G];
        for (i, gi) in gs.iter_mut().enumerate() {
            *gi = at(g + i.min(live - 1));
        }
        // The next step's groups, if any.
        let ahead = n_groups.saturating_sub(g + G).min(G);
        let mut pf = [0usize; G];
        for (i, p) in pf.iter_mut().enumerate().take(ahead) {
            *p = at(g + G + i).0;
        }
        let mut a = [[_mm512_set1_ps(-0.0); G]; R];
        for d in 0..hd {
            if d % pf_every == 0 {
                for &p in &pf[..ahead] {
                    // A prefetch never faults, whatever the address.
                    _mm_prefetch::<_MM_HINT_T0>(kp.wrapping_add(p + d * bs).cast());
                }
            }
            let mut kv = [_mm512_setzero_ps(); G];
            for (x, &(src, _)) in kv.iter_mut().zip(&gs) {
                // SAFETY: slot group `src..src + 16` of dimension row `d < hd` lies in its
                // page, which the wrapper checked is inside `k`.
                *x = unsafe { V::load16(kp.add(src + d * bs)) };
            }
            for (i, ai) in a.iter_mut().enumerate() {
                // SAFETY: `i < R` and `d < hd`: inside `qs`.
                let qv = _mm512_set1_ps(unsafe { *qp.add(i * hd + d) });
                for (aj, &x) in ai.iter_mut().zip(&kv) {
                    *aj = _mm512_fmadd_ps(qv, x, *aj);
                }
            }
        }
        for (i, ai) in a.iter().enumerate() {
            for (aj, &(_, dst)) in ai.iter().zip(&gs).take(live) {
                // SAFETY: `i < R` rows of `n` in `os`; each group's 16 slots lie in its row.
                unsafe { _mm512_storeu_ps(op.add(i * n + dst), _mm512_mul_ps(*aj, sc)) };
            }
        }
        g += live;
    }
}

/// Many query rows against the same pages: blocks of eight rows, then one block of the
/// rest (so the three or four query heads of a decode step share every key load).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
fn scores_rows<V: Value16>(
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
    while r + 8 <= rows {
        // SAFETY: rows `r..r + 8` exist; `bs` is a multiple of 16 (the callers check);
        // pages checked by the wrapper.
        unsafe { scores_block::<8, 2, V>(q, hd, k, pages, bs, scale, out, r) };
        r += 8;
    }
    // SAFETY: rows `r..rows` exist; otherwise as above.
    unsafe {
        match rows - r {
            0 => {}
            1 => scores_block::<1, 4, V>(q, hd, k, pages, bs, scale, out, r),
            2 => scores_block::<2, 4, V>(q, hd, k, pages, bs, scale, out, r),
            3 => scores_block::<3, 4, V>(q, hd, k, pages, bs, scale, out, r),
            4 => scores_block::<4, 4, V>(q, hd, k, pages, bs, scale, out, r),
            5 => scores_block::<5, 2, V>(q, hd, k, pages, bs, scale, out, r),
            6 => scores_block::<6, 2, V>(q, hd, k, pages, bs, scale, out, r),
            _ => scores_block::<7, 2, V>(q, hd, k, pages, bs, scale, out, r),
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
pub(super) fn scores_rows_f16(
    q: &[f32],
    hd: usize,
    k: &[f16],
    pages: &[usize],
    bs: usize,
    scale: f32,
    out: &mut [f32],
) {
    if bs.is_multiple_of(16) {
        scores_rows(q, hd, k, pages, bs, scale, out)
    } else {
        avx2::scores_rows_f16(q, hd, k, pages, bs, scale, out)
    }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
pub(super) fn scores_rows_f32(
    q: &[f32],
    hd: usize,
    k: &[f32],
    pages: &[usize],
    bs: usize,
    scale: f32,
    out: &mut [f32],
) {
    if bs.is_multiple_of(16) {
        scores_rows(q, hd, k, pages, bs, scale, out)
    } else {
        avx2::scores_rows_f32(q, hd, k, pages, bs, scale, out)
    }
}

/// The weights of many rows over one key range: row `r`, key `i` at `r·stride + i`.
#[derive(Clone, Copy)]
struct RowWeights<'a> {
    ms: &'a [f32],
    vs: &'a [f32],
    stride: usize,
    n: usize,
}

/// How far ahead (in keys) the value kernels prefetch value rows: a page of the default
/// size, enough to cover a memory latency at the speed keys are consumed.
const PREFETCH_KEYS: usize = 16;

/// `N` registers (16·N dimensions from `d0`) of accumulator rows `r0..r0 + R` through keys
/// `first..first + n`: per key, `N` value loads serve `R·N` steps. Each element takes exactly
/// the one-row oracle's steps in the same order.
///
/// # Safety
/// Rows `r0..r0 + R` of `acc` (rows of `dv`) exist, `d0 + 16N ≤ dv`, the weights hold every
/// row's `n` keys, and every key row lies in a checked page.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
#[allow(clippy::too_many_arguments)]
unsafe fn accum_regs<const R: usize, const N: usize, A: Acc16, V: Value16>(
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
    let mut a = [[_mm512_setzero_ps(); N]; R];
    for (i, ai) in a.iter_mut().enumerate() {
        for (j, aj) in ai.iter_mut().enumerate() {
            // SAFETY: row `r0 + i` holds dimensions `d0..d0 + 16N`.
            *aj = unsafe { A::load16(ap.add((r0 + i) * dv + d0 + 16 * j)) };
        }
    }
    let vp = v.as_ptr();
    let (msp, vsp) = (w.ms.as_ptr(), w.vs.as_ptr());
    let (mut page, mut slot) = (first / bs, first % bs);
    // The first pass over the dimensions prefetches whole value rows `PREFETCH_KEYS` keys
    // ahead (the later passes find them in cache).
    let row_bytes = dv * size_of::<V>();
    let (mut pf_key, mut pf_page, mut pf_slot) = if d0 == 0 {
        let k = first + PREFETCH_KEYS;
        (PREFETCH_KEYS, k / bs, k % bs)
    } else {
        (usize::MAX, 0, 0)
    };
    for key in 0..w.n {
        if pf_key < w.n {
            let at = vp.wrapping_add(pages[pf_page] + pf_slot * dv).cast::<u8>();
            let mut b = 0;
            while b < row_bytes {
                // A prefetch never faults, whatever the address.
                _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(b).cast());
                b += 64;
            }
            pf_key += 1;
            pf_slot += 1;
            if pf_slot == bs {
                pf_slot = 0;
                pf_page += 1;
            }
        }
        let row = pages[page] + slot * dv + d0;
        slot += 1;
        if slot == bs {
            slot = 0;
            page += 1;
        }
        let mut x = [_mm512_setzero_ps(); N];
        for (j, xj) in x.iter_mut().enumerate() {
            // SAFETY: the key's row holds `dv ≥ d0 + 16N` values inside a checked page.
            *xj = unsafe { V::load16(vp.add(row + 16 * j)) };
        }
        for (i, ai) in a.iter_mut().enumerate() {
            let at = (r0 + i) * w.stride + key;
            // SAFETY: the weights hold row `r0 + i`'s `n` keys (the wrapper's check).
            let (m, wt) = unsafe { (*msp.add(at), *vsp.add(at)) };
            if m != 1.0 {
                let mv = _mm512_set1_ps(m);
                for aj in ai.iter_mut() {
                    // SAFETY: this function's target features.
                    *aj = unsafe { A::round16(_mm512_mul_ps(*aj, mv)) };
                }
            }
            let wv = _mm512_set1_ps(wt);
            for (aj, &xj) in ai.iter_mut().zip(&x) {
                // SAFETY: this function's target features.
                *aj = unsafe { A::round16(_mm512_fmadd_ps(xj, wv, *aj)) };
            }
        }
    }
    for (i, ai) in a.iter().enumerate() {
        for (j, aj) in ai.iter().enumerate() {
            // SAFETY: as for the loads.
            unsafe { A::store16(ap.add((r0 + i) * dv + d0 + 16 * j), *aj) };
        }
    }
}

/// Rows `r0..r0 + R` over every dimension (`dv` a multiple of 16): 64 at a time (128 for a
/// lone row, so a one-row f16 accumulator has eight rounding chains in flight), then 16.
///
/// # Safety
/// As [`accum_regs`], for every dimension.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
#[allow(clippy::too_many_arguments)]
unsafe fn accum_block<const R: usize, A: Acc16, V: Value16>(
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
    if R <= 2 {
        while d0 + 128 <= dv {
            // SAFETY: `d0 + 128 ≤ dv`; the caller's contract otherwise.
            unsafe { accum_regs::<R, 8, A, V>(acc, dv, v, pages, bs, first, w, r0, d0) };
            d0 += 128;
        }
    }
    while d0 + 64 <= dv {
        // SAFETY: `d0 + 64 ≤ dv`; the caller's contract otherwise.
        unsafe { accum_regs::<R, 4, A, V>(acc, dv, v, pages, bs, first, w, r0, d0) };
        d0 += 64;
    }
    while d0 + 32 <= dv {
        // SAFETY: `d0 + 32 ≤ dv`; the caller's contract otherwise.
        unsafe { accum_regs::<R, 2, A, V>(acc, dv, v, pages, bs, first, w, r0, d0) };
        d0 += 32;
    }
    while d0 + 16 <= dv {
        // SAFETY: `d0 + 16 ≤ dv`; the caller's contract otherwise.
        unsafe { accum_regs::<R, 1, A, V>(acc, dv, v, pages, bs, first, w, r0, d0) };
        d0 += 16;
    }
}

/// Many accumulator rows over the same keys: blocks of four rows, then one block of the
/// rest (`dv` a multiple of 16).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
#[allow(clippy::too_many_arguments)]
fn accum_rows<A: Acc16, V: Value16>(
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
    while r + 4 <= rows {
        // SAFETY: rows `r..r + 4` exist; weights and pages checked by the wrapper.
        unsafe { accum_block::<4, A, V>(acc, dv, v, pages, bs, first, w, r) };
        r += 4;
    }
    // SAFETY: rows `r..rows` exist; otherwise as above.
    unsafe {
        match rows - r {
            0 => {}
            1 => accum_block::<1, A, V>(acc, dv, v, pages, bs, first, w, r),
            2 => accum_block::<2, A, V>(acc, dv, v, pages, bs, first, w, r),
            _ => accum_block::<3, A, V>(acc, dv, v, pages, bs, first, w, r),
        }
    }
}

macro_rules! accum_rows_kernel {
    ($name:ident, $acc:ty, $val:ty) => {
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
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
            if dv.is_multiple_of(16) {
                accum_rows::<$acc, $val>(acc, dv, v, pages, bs, first, n, ms, vs, stride)
            } else {
                avx2::$name(acc, dv, v, pages, bs, first, n, ms, vs, stride)
            }
        }
    };
}

accum_rows_kernel!(accum_rows_f16, f16, f16);
accum_rows_kernel!(accum_rows_f32, f32, f32);
accum_rows_kernel!(accum_rows_f16_f32, f32, f16);

/// [`super::scalar::exp`] on sixteen lanes, the same operations in the same order.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
fn exp16(x: __m512) -> __m512 {
    use super::scalar::{EXP_HI, EXP_LO, EXP_POLY, LN2_HI, LN2_LO, LOG2E};
    // In range for the arithmetic (a NaN lane becomes `EXP_HI`; its result is replaced).
    let xs = _mm512_max_ps(
        _mm512_min_ps(x, _mm512_set1_ps(EXP_HI)),
        _mm512_set1_ps(EXP_LO),
    );
    let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
        _mm512_mul_ps(xs, _mm512_set1_ps(LOG2E)),
    );
    let r = _mm512_fmadd_ps(n, _mm512_set1_ps(-LN2_HI), xs);
    let r = _mm512_fmadd_ps(n, _mm512_set1_ps(-LN2_LO), r);
    let mut p = _mm512_set1_ps(EXP_POLY[0]);
    for &c in &EXP_POLY[1..] {
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
    }
    let one = _mm512_set1_ps(1.0);
    p = _mm512_fmadd_ps(p, r, one);
    p = _mm512_fmadd_ps(p, r, one);
    let e = _mm512_slli_epi32::<23>(_mm512_add_epi32(
        _mm512_cvtps_epi32(n),
        _mm512_set1_epi32(127),
    ));
    let y = _mm512_mul_ps(p, _mm512_castsi512_ps(e));
    let lo = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, _mm512_set1_ps(EXP_LO));
    let hi = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(x, _mm512_set1_ps(EXP_HI));
    let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(x, x);
    let y = _mm512_mask_mov_ps(y, lo, _mm512_setzero_ps());
    let y = _mm512_mask_mov_ps(y, hi, _mm512_set1_ps(f32::INFINITY));
    _mm512_mask_mov_ps(y, nan, x)
}

/// [`super::scalar::softmax_weights`]: sixteen scores a step, the tail under a mask; lane
/// `i` of the accumulator is the oracle's partial sum `i`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
pub(super) fn softmax_weights(s: &[f32], m: f32, out: &mut [f32]) -> (f32, f32) {
    let n = s.len();
    let (sp, op) = (s.as_ptr(), out.as_mut_ptr());
    let tail = n % 16;
    let tmask: __mmask16 = ((1u32 << tail) - 1) as __mmask16;
    let ninf = _mm512_set1_ps(f32::NEG_INFINITY);
    let mut mv = _mm512_set1_ps(m);
    let mut j = 0;
    while j + 16 <= n {
        // SAFETY: `j + 16 ≤ n = s.len()`.
        mv = _mm512_max_ps(mv, unsafe { _mm512_loadu_ps(sp.add(j)) });
        j += 16;
    }
    if tail > 0 {
        // SAFETY: the masked lanes `j..n` lie in `s`.
        mv = _mm512_max_ps(mv, unsafe { _mm512_mask_loadu_ps(ninf, tmask, sp.add(j)) });
    }
    let m = _mm512_reduce_max_ps(mv) + 0.0;
    let mv = _mm512_set1_ps(m);
    let mut acc = _mm512_setzero_ps();
    let mut j = 0;
    while j + 16 <= n {
        // SAFETY: `j + 16 ≤ n ≤ out.len()` (the wrapper's check).
        unsafe {
            let e = exp16(_mm512_sub_ps(_mm512_loadu_ps(sp.add(j)), mv));
            _mm512_storeu_ps(op.add(j), e);
            acc = _mm512_add_ps(acc, e);
        }
        j += 16;
    }
    if tail > 0 {
        // SAFETY: the masked lanes `j..n` lie in `s` and `out`.
        unsafe {
            let x = _mm512_mask_loadu_ps(ninf, tmask, sp.add(j));
            let e = exp16(_mm512_sub_ps(x, mv));
            _mm512_mask_storeu_ps(op.add(j), tmask, e);
            acc = _mm512_mask_add_ps(acc, tmask, acc, e);
        }
    }
    let mut lanes = [0.0f32; 16];
    // SAFETY: `lanes` holds sixteen floats.
    unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), acc) };
    (m, super::scalar::fold_lanes(lanes))
}

/// [`super::scalar::expf`] on eight lanes of `f64` (the widened arguments), the same
/// operations in the same order, rounded to `f32` at the end. Lanes with `|x| ≥ 80`, an
/// infinity or NaN are the caller's to redo with the scalar function.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
fn expf8(x: __m256, tab: &[__m512d; 4]) -> __m256 {
    use super::scalar::{EXPF_C, EXPF_INVLN2N, EXPF_SHIFT};
    let xd = _mm512_cvtps_pd(x);
    let inv = _mm512_set1_pd(f64::from_bits(EXPF_INVLN2N));
    let shift = _mm512_set1_pd(f64::from_bits(EXPF_SHIFT));
    let z = _mm512_fmadd_pd(inv, xd, shift);
    let ki = _mm512_castpd_si512(z);
    let kd = _mm512_sub_pd(z, shift);
    let r = _mm512_fmsub_pd(inv, xd, kd);
    // Table entry `ki mod 32`: two 16-entry permutes, the fifth bit picks one.
    let lo = _mm512_permutex2var_pd(tab[0], ki, tab[1]);
    let hi = _mm512_permutex2var_pd(tab[2], ki, tab[3]);
    let t = _mm512_mask_blend_pd(_mm512_test_epi64_mask(ki, _mm512_set1_epi64(16)), lo, hi);
    let s = _mm512_castsi512_pd(_mm512_add_epi64(
        _mm512_castpd_si512(t),
        _mm512_slli_epi64::<47>(ki),
    ));
    let p = _mm512_fmadd_pd(
        r,
        _mm512_set1_pd(f64::from_bits(EXPF_C[0])),
        _mm512_set1_pd(f64::from_bits(EXPF_C[1])),
    );
    let r2 = _mm512_mul_pd(r, r);
    let y = _mm512_fmadd_pd(
        r,
        _mm512_set1_pd(f64::from_bits(EXPF_C[2])),
        _mm512_set1_pd(1.0),
    );
    let y = _mm512_fmadd_pd(p, r2, y);
    _mm512_cvtpd_ps(_mm512_mul_pd(y, s))
}

/// [`super::scalar::silu_mul`]: eight values a step, `expf(−g)` by [`expf8`], then the
/// oracle's add, division and product; a step with an argument `|g| ≥ 80`, infinite or NaN,
/// and the tail, by the oracle.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
pub(super) fn silu_mul(g: &mut [f32], u: &[f32]) {
    use super::scalar::{EXPF_SPECIAL_TOP, EXPF_TAB};
    let n = g.len().min(u.len());
    let tab: [__m512d; 4] = std::array::from_fn(|i| {
        // SAFETY: eight `u64` of the 32-entry table.
        unsafe { _mm512_loadu_pd(EXPF_TAB[8 * i..].as_ptr().cast()) }
    });
    let one = _mm256_set1_ps(1.0);
    let (gp, up) = (g.as_mut_ptr(), u.as_ptr());
    let mut j = 0;
    while j + 8 <= n {
        // SAFETY: `j + 8 ≤ n ≤ g.len(), u.len()`.
        let (x, uv) = unsafe { (_mm256_loadu_ps(gp.add(j)), _mm256_loadu_ps(up.add(j))) };
        let top = _mm256_and_si256(
            _mm256_srli_epi32::<20>(_mm256_castps_si256(x)),
            _mm256_set1_epi32(0x7ff),
        );
        if _mm256_cmpgt_epu32_mask(top, _mm256_set1_epi32(EXPF_SPECIAL_TOP as i32)) != 0 {
            super::scalar::silu_mul(&mut g[j..j + 8], &u[j..j + 8]);
        } else {
            let e = expf8(_mm256_xor_ps(x, _mm256_set1_ps(-0.0)), &tab);
            let y = _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(one, e)), uv);
            // SAFETY: as above.
            unsafe { _mm256_storeu_ps(gp.add(j), y) };
        }
        j += 8;
    }
    super::scalar::silu_mul(&mut g[j..n], &u[j..n]);
}

/// [`super::scalar::softmax_online`]: sixteen keys at a time when none of them raises the
/// running maximum (after a row's first keys, nearly always) — their weights by [`expf8`],
/// the sum taken lane by lane in key order as the oracle takes it; a block with a new
/// maximum, lanes with `|s − max| ≥ 80`, and the tail go through the scalar steps.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
pub(super) fn softmax_online(
    s: &[f32],
    mut max: f32,
    mut sum: f32,
    ms: &mut [f32],
    vs: &mut [f32],
) -> (f32, f32) {
    use super::scalar::{EXPF_SPECIAL_TOP, EXPF_TAB, expf};
    let n = s.len().min(ms.len()).min(vs.len());
    let tab: [__m512d; 4] = std::array::from_fn(|i| {
        // SAFETY: eight `u64` of the 32-entry table.
        unsafe { _mm512_loadu_pd(EXPF_TAB[8 * i..].as_ptr().cast()) }
    });
    let (sp, msp, vsp) = (s.as_ptr(), ms.as_mut_ptr(), vs.as_mut_ptr());
    let one = _mm512_set1_ps(1.0);
    let mut j = 0;
    while j + 16 <= n {
        // SAFETY: `j + 16 ≤ n ≤ s.len()`.
        let x = unsafe { _mm512_loadu_ps(sp.add(j)) };
        let mv = _mm512_set1_ps(max);
        if _mm512_cmp_ps_mask::<_CMP_GT_OQ>(x, mv) != 0 {
            (max, sum) = super::scalar::softmax_online(
                &s[j..j + 16],
                max,
                sum,
                &mut ms[j..j + 16],
                &mut vs[j..j + 16],
            );
            j += 16;
            continue;
        }
        let a = _mm512_sub_ps(x, mv);
        let lo = expf8(_mm512_castps512_ps256(a), &tab);
        let hi = expf8(
            _mm256_castsi256_ps(_mm512_extracti64x4_epi64::<1>(_mm512_castps_si512(a))),
            &tab,
        );
        let mut w = [0.0f32; 16];
        // SAFETY: `w` holds sixteen floats.
        unsafe {
            _mm256_storeu_ps(w.as_mut_ptr(), lo);
            _mm256_storeu_ps(w.as_mut_ptr().add(8), hi);
        }
        // Arguments `|a| ≥ 80`, infinite or NaN: the scalar function's checks.
        let top = _mm512_and_si512(
            _mm512_srli_epi32::<20>(_mm512_castps_si512(a)),
            _mm512_set1_epi32(0x7ff),
        );
        let special = _mm512_cmpgt_epu32_mask(top, _mm512_set1_epi32(EXPF_SPECIAL_TOP as i32));
        if special != 0 {
            let mut av = [0.0f32; 16];
            // SAFETY: `av` holds sixteen floats.
            unsafe { _mm512_storeu_ps(av.as_mut_ptr(), a) };
            for (l, wl) in w.iter_mut().enumerate() {
                if special & (1 << l) != 0 {
                    *wl = expf(av[l]);
                }
            }
        }
        for &wl in &w {
            sum += wl;
        }
        // SAFETY: `j + 16 ≤ n ≤ ms.len(), vs.len()`.
        unsafe {
            _mm512_storeu_ps(msp.add(j), one);
            _mm512_storeu_ps(vsp.add(j), _mm512_loadu_ps(w.as_ptr()));
        }
        j += 16;
    }
    super::scalar::softmax_online(&s[j..n], max, sum, &mut ms[j..n], &mut vs[j..n])
}
