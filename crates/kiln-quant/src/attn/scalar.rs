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
