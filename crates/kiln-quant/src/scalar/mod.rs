//! Portable kernels: the reference every SIMD implementation is tested against, and what runs
//! where no SIMD kernel exists.
//!
//! One file per type family, mirrored in every SIMD directory (`arch/x86_64/avx2/`,
//! `arch/aarch64/neon/`): `float` (F32, F16, BF16), `legacy` (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0),
//! `kquants` (Q2_K … Q6_K), `iquants` (IQ4_NL, IQ4_XS); `act` holds the activation
//! quantizers and `util` what the families share. Each family file holds, per type, the
//! dequantizer and the dot product with the type's activation row; the scalar table
//! ([`table`]) is generated from the type lists in `crate::types`.

pub(crate) mod act;
pub(crate) mod float;
pub(crate) mod iquants;
pub(crate) mod kquants;
pub(crate) mod legacy;
pub(crate) mod util;

use crate::isa::Isa;
use crate::table::{ActFn, ActRows, Imp, Kernels, WeightKernels};
use crate::types::{AType, WType, activation_types, weight_types};

const fn s<F>(f: F) -> Imp<F> {
    Imp {
        isa: Isa::Scalar,
        f,
    }
}

/// Four weight rows (`row_bytes` apart in `w`) against one activation row: four single dots.
#[inline(always)]
fn rows_by_dot(
    w: &[u8],
    row_bytes: usize,
    a: &[u8],
    out: &mut [f32; 4],
    dot: impl Fn(&[u8], &[u8]) -> f32,
) {
    for (r, o) in out.iter_mut().enumerate() {
        *o = dot(&w[r * row_bytes..(r + 1) * row_bytes], a);
    }
}

/// One weight row against four activation rows: four single dots.
#[inline(always)]
fn tokens_by_dot(w: &[u8], a: ActRows<'_>, out: &mut [f32; 4], dot: impl Fn(&[u8], &[u8]) -> f32) {
    let len = a.a.len() - 3 * a.stride;
    for (t, o) in out.iter_mut().enumerate() {
        *o = dot(w, a.row(t, len));
    }
}

/// The scalar kernels of one weight type: its dequantizer and dot, and the four-row kernels
/// made of the dot (bit-identical to it by construction).
macro_rules! weight_kernels {
    ($fam:ident::{$deq:ident, $dot:ident}) => {{
        fn dotr4(w: &[u8], row_bytes: usize, a: &[u8], out: &mut [f32; 4]) {
            rows_by_dot(w, row_bytes, a, out, $fam::$dot)
        }
        fn dot4(w: &[u8], a: ActRows<'_>, out: &mut [f32; 4]) {
            tokens_by_dot(w, a, out, $fam::$dot)
        }
        WeightKernels {
            dequant: s($fam::$deq),
            dot: s($fam::$dot),
            dotr4: s(dotr4),
            dot4: s(dot4),
            dot8: None,
            dot8_unpacked: None,
            dot23: None,
            dot8_reads_lay8: false,
            dot8r4_grouped: None,
            dot8r2: None,
            dot8r4: None,
            dot8r2_unpacked: None,
        }
    }};
}

macro_rules! weight_table {
    ($($w:ident => $a:ident, $fam:ident::{$deq:ident, $dot:ident};)*) => {
        /// The scalar kernels of every weight type, indexed by [`WType`] (the same list, in
        /// the same order, generates both).
        const fn weight_table() -> [WeightKernels; WType::COUNT] {
            [$(weight_kernels!($fam::{$deq, $dot})),*]
        }
    };
}
weight_types!(weight_table);

macro_rules! act_table {
    ($($a:ident => $quantize:ident;)*) => {
        /// The scalar activation converters, indexed by [`AType`] (the same list, in the same
        /// order, generates both).
        const fn act_table() -> [Imp<ActFn>; AType::COUNT] {
            [$(s(act::$quantize)),*]
        }
    };
}
activation_types!(act_table);

/// The scalar table: a kernel for every activation and weight type. Every SIMD table starts
/// from it (or from a table that did) and replaces the entries it has code for
/// ([`Kernels::inherit`]).
pub(crate) const fn table() -> Kernels {
    Kernels {
        isa: Isa::Scalar,
        act: act_table(),
        weights: weight_table(),
    }
}

pub(crate) static KERNELS: Kernels = table();
