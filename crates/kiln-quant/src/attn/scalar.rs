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
