//! The scalar attention kernels: the readable definition every SIMD kernel must equal bit
//! for bit (see the module docs for the arithmetic).

use half::f16;

pub(super) fn round_f16(x: &[f32], out: &mut [f32]) {
    for (o, &v) in out.iter_mut().zip(x) {
        *o = f16::from_f32(v).to_f32();
    }
}

/// Offset of key `key` (counted across `pages`) in its arena, for rows of `row` elements.
#[inline(always)]
pub(super) fn row_start(pages: &[usize], bs: usize, key: usize, row: usize) -> usize {
    pages[key / bs] + (key % bs) * row
}

pub(super) fn scores_f16(
    q: &[f32],
    k: &[f16],
    pages: &[usize],
    bs: usize,
    scale: f32,
    out: &mut [f32],
) {
    for (&page, out) in pages.iter().zip(out.chunks_exact_mut(bs)) {
        for (slot, o) in out.iter_mut().enumerate() {
            // Fused steps (for an f16-rounded query the products are exact in f32, and the
            // fused step is also the plain `acc + q·k`).
            let mut acc = -0.0f32;
            for (d, &qd) in q.iter().enumerate() {
                acc = qd.mul_add(k[page + d * bs + slot].to_f32(), acc);
            }
            *o = acc * scale;
        }
    }
}

/// Dimensions per step of [`dot_f16_split`]: four accumulators of sixteen lanes.
pub(super) const SPLIT_STEP: usize = 64;

/// One score of the one-row arithmetic (f16-rounded query, f16 key `k(d)` widened): the sum
/// in the order of ggml's `ggml_vec_dot_f16` as built for AVX-512 (`F32Cx16`, no
/// `avx512fp16`), the build the llama.cpp references come from. Dimension `d` of the first
/// `np = hd − hd mod 64` goes to lane sum `d mod 64` (from `+0.0`, in dimension order); the
/// 64 lane sums are combined by a fixed tree — accumulators `j` and `j + 2`, then the two
/// results, then the sixteen lanes as `_mm512_reduce_add_ps` folds them (upper eight onto
/// lower eight, upper four onto lower four, lanes `i` and `i + 2`, the last two) — and the
/// remaining dimensions are added in f64, in order, before the one rounding to f32. Every
/// product is exact in f32 (two f16 values), so each step is a single rounding.
#[inline(always)]
pub(super) fn dot_f16_split(q: &[f32], k: impl Fn(usize) -> f32) -> f32 {
    let np = q.len() / SPLIT_STEP * SPLIT_STEP;
    let lane = |r: usize| {
        let mut a = 0.0f32;
        for d in (r..np).step_by(SPLIT_STEP) {
            a = q[d].mul_add(k(d), a);
        }
        a
    };
    // Lane `l` of the folded accumulators: ((acc0 + acc2) + (acc1 + acc3))[l].
    let acc = |l: usize| (lane(l) + lane(l + 32)) + (lane(l + 16) + lane(l + 48));
    // Lane `i < 4` after the eight- and four-lane folds.
    let quarter = |i: usize| (acc(i) + acc(i + 8)) + (acc(i + 4) + acc(i + 12));
    let mut sum = f64::from((quarter(0) + quarter(2)) + (quarter(1) + quarter(3)));
    for (d, &qd) in q.iter().enumerate().skip(np) {
        sum += f64::from(qd * k(d));
    }
    sum as f32
}

/// Row after row, key after key, [`dot_f16_split`]: the definition of the one-row score
/// kernels.
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
    for (qr, o) in q.chunks_exact(hd).zip(out.chunks_exact_mut(n)) {
        for (&page, o) in pages.iter().zip(o.chunks_exact_mut(bs)) {
            for (slot, o) in o.iter_mut().enumerate() {
                *o = dot_f16_split(qr, |d| k[page + d * bs + slot].to_f32()) * scale;
            }
        }
    }
}

pub(super) fn scores_f32(
    q: &[f32],
    k: &[f32],
    pages: &[usize],
    bs: usize,
    scale: f32,
    out: &mut [f32],
) {
    for (&page, out) in pages.iter().zip(out.chunks_exact_mut(bs)) {
        for (slot, o) in out.iter_mut().enumerate() {
            let mut acc = -0.0f32;
            for (d, &qd) in q.iter().enumerate() {
                acc = qd.mul_add(k[page + d * bs + slot], acc);
            }
            *o = acc * scale;
        }
    }
}

pub(super) fn accum_f16(
    acc: &mut [f16],
    v: &[f16],
    pages: &[usize],
    bs: usize,
    first: usize,
    ms: &[f32],
    vs: &[f32],
) {
    let dv = acc.len();
    for (i, (&m, &w)) in ms.iter().zip(vs).enumerate() {
        let row = row_start(pages, bs, first + i, dv);
        if m != 1.0 {
            for a in acc.iter_mut() {
                *a = f16::from_f32(a.to_f32() * m);
            }
        }
        for (a, x) in acc.iter_mut().zip(&v[row..row + dv]) {
            *a = f16::from_f32(x.to_f32().mul_add(w, a.to_f32()));
        }
    }
}

pub(super) fn accum_f16_f32(
    acc: &mut [f32],
    v: &[f16],
    pages: &[usize],
    bs: usize,
    first: usize,
    ms: &[f32],
    vs: &[f32],
) {
    accum_into_f32(acc, v, f16::to_f32, pages, bs, first, ms, vs);
}

pub(super) fn accum_f32(
    acc: &mut [f32],
    v: &[f32],
    pages: &[usize],
    bs: usize,
    first: usize,
    ms: &[f32],
    vs: &[f32],
) {
    accum_into_f32(acc, v, |x| x, pages, bs, first, ms, vs);
}

/// The f32 accumulator over values widened exactly by `widen`.
#[allow(clippy::too_many_arguments)]
fn accum_into_f32<V: Copy>(
    acc: &mut [f32],
    v: &[V],
    widen: impl Fn(V) -> f32,
    pages: &[usize],
    bs: usize,
    first: usize,
    ms: &[f32],
    vs: &[f32],
) {
    let dv = acc.len();
    for (i, (&m, &w)) in ms.iter().zip(vs).enumerate() {
        let row = row_start(pages, bs, first + i, dv);
        if m != 1.0 {
            for a in acc.iter_mut() {
                *a *= m;
            }
        }
        for (a, &x) in acc.iter_mut().zip(&v[row..row + dv]) {
            *a = widen(x).mul_add(w, *a);
        }
    }
}

/// Row after row, the one-row kernel: the definition of the many-row score kernels.
pub(super) fn scores_rows_f16(
    q: &[f32],
    hd: usize,
    k: &[f16],
    pages: &[usize],
    bs: usize,
    scale: f32,
    out: &mut [f32],
) {
    let n = pages.len() * bs;
    for (qr, o) in q.chunks_exact(hd).zip(out.chunks_exact_mut(n)) {
        scores_f16(qr, k, pages, bs, scale, o);
    }
}

pub(super) fn scores_rows_f32(
    q: &[f32],
    hd: usize,
    k: &[f32],
    pages: &[usize],
    bs: usize,
    scale: f32,
    out: &mut [f32],
) {
    let n = pages.len() * bs;
    for (qr, o) in q.chunks_exact(hd).zip(out.chunks_exact_mut(n)) {
        scores_f32(qr, k, pages, bs, scale, o);
    }
}

/// Row after row, the one-row kernel: the definition of the many-row accumulators. Row `r`
/// of `acc` (`dv` elements) takes key `first + i` with weights `ms[r·stride + i]`,
/// `vs[r·stride + i]`, for `i < n`.
macro_rules! accum_rows_scalar {
    ($name:ident, $one:ident, $acc:ty, $val:ty) => {
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
            for (r, a) in acc.chunks_exact_mut(dv).enumerate() {
                let w = r * stride;
                $one(a, v, pages, bs, first, &ms[w..w + n], &vs[w..w + n]);
            }
        }
    };
}

accum_rows_scalar!(accum_rows_f16, accum_f16, f16, f16);
accum_rows_scalar!(accum_rows_f32, accum_f32, f32, f32);
accum_rows_scalar!(accum_rows_f16_f32, accum_f16_f32, f32, f16);

/// Arguments below this give 0 (true `exp` is below 2^-125 there: no softmax weight that
/// small changes a sum of at least 1).
pub(super) const EXP_LO: f32 = -87.0;
/// Arguments above this give +∞ (so `2^n` below stays a normal float).
pub(super) const EXP_HI: f32 = 88.0;
pub(super) const LOG2E: f32 = std::f32::consts::LOG2_E;
/// `ln 2` split so `n · LN2_HI` is exact for `|n| ≤ 127`.
pub(super) const LN2_HI: f32 = 0.693_359_4;
pub(super) const LN2_LO: f32 = -2.121_944_4e-4;
/// Taylor coefficients `1/k!`, `k = 7 … 2`.
pub(super) const EXP_POLY: [f32; 6] = [
    1.0 / 5040.0,
    1.0 / 720.0,
    1.0 / 120.0,
    1.0 / 24.0,
    1.0 / 6.0,
    0.5,
];

/// `e^x` within about 2 ulp (the definition every SIMD form reproduces bit for bit):
/// `x = n·ln 2 + r` with `n = round(x·log2 e)` (ties to even) and `r` by two fused steps,
/// `e^r` by its degree-7 Taylor polynomial (Horner, fused), times `2^n` built in the
/// exponent bits. Below [`EXP_LO`] 0, above [`EXP_HI`] +∞, NaN stays NaN.
pub fn exp(x: f32) -> f32 {
    if x.is_nan() {
        return x;
    }
    if x < EXP_LO {
        return 0.0;
    }
    if x > EXP_HI {
        return f32::INFINITY;
    }
    let n = (x * LOG2E).round_ties_even();
    let r = n.mul_add(-LN2_HI, x);
    let r = n.mul_add(-LN2_LO, r);
    let mut p = EXP_POLY[0];
    for c in &EXP_POLY[1..] {
        p = p.mul_add(r, *c);
    }
    p = p.mul_add(r, 1.0);
    p = p.mul_add(r, 1.0);
    // `n` is an integer in -126..=127 here.
    p * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

/// The larger of `m` and every element of `s`, with `-0.0` turned to `+0.0` (so which of
/// two equal zeros a SIMD maximum keeps does not matter). Scores are NaN-free.
pub(super) fn max_of(s: &[f32], m: f32) -> f32 {
    let mut m = m;
    for &x in s {
        if x > m {
            m = x;
        }
    }
    m + 0.0
}

/// Lanes of the fixed-order sum of [`softmax_weights`]: element `j` goes to partial sum
/// `j mod 16`, and the partial sums are folded pairwise (`i + 8`, then `+ 4`, `+ 2`, `+ 1`).
pub(super) const SUM_LANES: usize = 16;

/// Folds the partial sums of [`softmax_weights`] in their fixed order.
pub(super) fn fold_lanes(mut acc: [f32; SUM_LANES]) -> f32 {
    let mut w = SUM_LANES / 2;
    while w > 0 {
        for i in 0..w {
            acc[i] += acc[i + w];
        }
        w /= 2;
    }
    acc[0]
}

/// One row's softmax step over a tile of scores: the new running maximum
/// `m' = max(m, max s)` ([`max_of`]), `out[j] = exp(s[j] - m')`, and their sum in the fixed
/// order of [`SUM_LANES`]. Returns `(m', sum)`.
pub(super) fn softmax_weights(s: &[f32], m: f32, out: &mut [f32]) -> (f32, f32) {
    let m = max_of(s, m);
    let mut acc = [0.0f32; SUM_LANES];
    for (j, (&x, o)) in s.iter().zip(out.iter_mut()).enumerate() {
        *o = exp(x - m);
        acc[j % SUM_LANES] += *o;
    }
    (m, fold_lanes(acc))
}

/// The table of `2^(i/32)` (as `f64` bits, the exponent's low bits folded in by the caller)
/// of [`expf`]'s reduction.
pub(super) const EXPF_TAB: [u64; 32] = [
    0x3ff0000000000000,
    0x3fefd9b0d3158574,
    0x3fefb5586cf9890f,
    0x3fef9301d0125b51,
    0x3fef72b83c7d517b,
    0x3fef54873168b9aa,
    0x3fef387a6e756238,
    0x3fef1e9df51fdee1,
    0x3fef06fe0a31b715,
    0x3feef1a7373aa9cb,
    0x3feedea64c123422,
    0x3feece086061892d,
    0x3feebfdad5362a27,
    0x3feeb42b569d4f82,
    0x3feeab07dd485429,
    0x3feea47eb03a5585,
    0x3feea09e667f3bcd,
    0x3fee9f75e8ec5f74,
    0x3feea11473eb0187,
    0x3feea589994cce13,
    0x3feeace5422aa0db,
    0x3feeb737b0cdc5e5,
    0x3feec49182a3f090,
    0x3feed503b23e255d,
    0x3feee89f995ad3ad,
    0x3feeff76f2fb5e47,
    0x3fef199bdd85529c,
    0x3fef3720dcef9069,
    0x3fef5818dcfba487,
    0x3fef7c97337b9b5f,
    0x3fefa4afa2a490da,
    0x3fefd0765b6e4540,
];
/// `32 / ln 2`.
pub(super) const EXPF_INVLN2N: u64 = 0x40471547652b82fe;
/// `1.5 · 2^52`: adding it rounds to an integer, ties to even.
pub(super) const EXPF_SHIFT: u64 = 0x4338000000000000;
/// The polynomial of `2^(r/32)`: `C0·r³ + C1·r² + C2·r + 1` as `(C0·r + C1)·r² + (C2·r + 1)`.
pub(super) const EXPF_C: [u64; 3] = [0x3ebc6af84b912394, 0x3f2ebfce50fac4f3, 0x3f962e42ff0c52d6];
/// `(x bits >> 20) & 0x7ff` above this: `|x| ≥ 80`, the arguments [`expf`] checks first.
pub(super) const EXPF_SPECIAL_TOP: u32 = 0x42a;

/// `e^x` for the key-by-key online softmax of the one-row arithmetic: the algorithm of
/// glibc's `expf` (since 2.27; the same one llama.cpp's one-row flash attention calls; the
/// algorithm and its constants come from Arm's optimized-routines, MIT OR Apache-2.0), in
/// the operation order of its FMA build (`__expf_fma`, chosen on every x86-64 CPU with FMA):
/// `x` widened to `f64`, `k = round(x·32/ln 2)` by the `1.5·2^52` shift (one fused step),
/// `r = x·32/ln 2 − k` (fused), `2^(k/32)` from a 32-entry table with `k/32`'s integer part
/// added to the exponent bits, a cubic in `r` with three fused steps, one product, one
/// rounding to `f32`. Checked bit for bit against glibc 2.36's `expf` on all 2^32 inputs.
/// Writing it down makes the results the same on every platform (another libm, or an x86
/// CPU without FMA, where glibc takes its unfused build) and lets a SIMD kernel equal it.
#[inline(always)]
pub fn expf(x: f32) -> f32 {
    let ix = x.to_bits();
    if (ix >> 20) & 0x7ff > EXPF_SPECIAL_TOP {
        return expf_special(x);
    }
    expf_core(x)
}

/// [`expf`]'s common path (`|x| < 80`, or in range).
#[inline(always)]
fn expf_core(x: f32) -> f32 {
    let xd = f64::from(x);
    let inv = f64::from_bits(EXPF_INVLN2N);
    let shift = f64::from_bits(EXPF_SHIFT);
    let z = inv.mul_add(xd, shift);
    let ki = z.to_bits();
    let kd = z - shift;
    let r = inv.mul_add(xd, -kd);
    let s = f64::from_bits(EXPF_TAB[(ki & 31) as usize].wrapping_add(ki << 47));
    let [c0, c1, c2] = EXPF_C.map(f64::from_bits);
    let p = r.mul_add(c0, c1);
    let r2 = r * r;
    let y = r.mul_add(c2, 1.0);
    let y = p.mul_add(r2, y);
    (y * s) as f32
}

/// [`expf`] for `|x| ≥ 80`, infinities and NaN: glibc's checks, then the common path.
#[cold]
pub(super) fn expf_special(x: f32) -> f32 {
    let ix = x.to_bits();
    if ix == f32::NEG_INFINITY.to_bits() {
        return 0.0;
    }
    if (ix >> 20) & 0x7ff >= 0x7f8 {
        // +∞ stays +∞, NaN stays NaN (quieted).
        return x + x;
    }
    if x > f32::from_bits(0x42b1_7217) {
        // Above ln(2^128).
        return f32::INFINITY;
    }
    if x < f32::from_bits(0xc2cf_f1b4) {
        // Below ln(2^-150).
        return 0.0;
    }
    if x < f32::from_bits(0xc2ce_8ecf) {
        // Below ln(2^-149): glibc returns the smallest subnormal there.
        return f32::from_bits(1);
    }
    // `80 ≤ |x|` but in range: the common path.
    expf_core(x)
}

/// The key-by-key online softmax of the one-row arithmetic (llama.cpp's one-row flash
/// attention) over one row's scores `s`, from the running maximum `max` and sum `sum`: for
/// each key in order, when `s > max` the new maximum's rescale `ms = expf(max − s)`, weight
/// `vs = 1` and `sum = sum·ms + 1`; otherwise `ms = 1`, `vs = expf(s − max)` and
/// `sum += vs`. Returns the new `(max, sum)`.
#[inline(always)]
pub(super) fn softmax_online(
    s: &[f32],
    mut max: f32,
    mut sum: f32,
    ms: &mut [f32],
    vs: &mut [f32],
) -> (f32, f32) {
    for ((&x, m), v) in s.iter().zip(ms.iter_mut()).zip(vs.iter_mut()) {
        if x > max {
            // New maximum: rescale what was accumulated; this value's weight is 1. One
            // fused step, as ggml's `S = S*ms + vs` compiles (contracted to an FMA).
            let e = expf(max - x);
            max = x;
            sum = sum.mul_add(e, 1.0);
            *m = e;
            *v = 1.0;
        } else {
            let w = expf(x - max);
            sum += w;
            *m = 1.0;
            *v = w;
        }
    }
    (max, sum)
}

/// The gated SiLU, `g = g / (1 + expf(−g)) · u` elementwise (the oracle of
/// `AttnKernels::silu_mul`).
#[inline(always)]
pub(super) fn silu_mul(g: &mut [f32], u: &[f32]) {
    for (g, &u) in g.iter_mut().zip(u) {
        *g = *g / (1.0 + expf(-*g)) * u;
    }
}

/// [`softmax_online`] as a table entry (the oracle's).
pub(super) fn softmax_online_fn(
    s: &[f32],
    max: f32,
    sum: f32,
    ms: &mut [f32],
    vs: &mut [f32],
) -> (f32, f32) {
    softmax_online(s, max, sum, ms, vs)
}
