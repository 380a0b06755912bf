//! Portable kernels: the reference every SIMD implementation is tested against, and what runs
//! where no SIMD kernel exists.

pub(crate) mod act;
pub(crate) mod float;
pub(crate) mod iquants;
pub(crate) mod kquants;
pub(crate) mod legacy;
pub(crate) mod util;

use crate::isa::Isa;
use crate::kernels::{ActRows, Imp, Kernels, WeightKernels};

/// A four-row dot made of four single dots (bit-identical to them by construction).
macro_rules! dot4_of {
    ($name:ident, $dot:path) => {
        pub(crate) fn $name(w: &[u8], a: ActRows<'_>, out: &mut [f32; 4]) {
            let len = a.a.len() - 3 * a.stride;
            for (t, o) in out.iter_mut().enumerate() {
                *o = $dot(w, a.row(t, len));
            }
        }
    };
}

/// Four weight rows against one activation row: four single dots.
macro_rules! dotr4_of {
    ($name:ident, $dot:path) => {
        pub(crate) fn $name(w: &[u8], row_bytes: usize, a: &[u8], out: &mut [f32; 4]) {
            for (r, o) in out.iter_mut().enumerate() {
                *o = $dot(&w[r * row_bytes..(r + 1) * row_bytes], a);
            }
        }
    };
}

dotr4_of!(dotr4_f32, float::dot_f32);
dotr4_of!(dotr4_f16, float::dot_f16);
dotr4_of!(dotr4_bf16, float::dot_bf16);
dotr4_of!(dotr4_q4_0, legacy::dot_q4_0);
dotr4_of!(dotr4_q4_1, legacy::dot_q4_1);
dotr4_of!(dotr4_q5_0, legacy::dot_q5_0);
dotr4_of!(dotr4_q8_0, legacy::dot_q8_0);
dotr4_of!(dotr4_q4_k, kquants::dot_q4_k);
dotr4_of!(dotr4_q6_k, kquants::dot_q6_k);
dotr4_of!(dotr4_q5_1, legacy::dot_q5_1);
dotr4_of!(dotr4_q2_k, kquants::dot_q2_k);
dotr4_of!(dotr4_q3_k, kquants::dot_q3_k);
dotr4_of!(dotr4_q5_k, kquants::dot_q5_k);
dotr4_of!(dotr4_iq4_nl, iquants::dot_iq4_nl);
dotr4_of!(dotr4_iq4_xs, iquants::dot_iq4_xs);

dot4_of!(dot4_f32, float::dot_f32);
dot4_of!(dot4_f16, float::dot_f16);
dot4_of!(dot4_bf16, float::dot_bf16);
dot4_of!(dot4_q4_0, legacy::dot_q4_0);
dot4_of!(dot4_q4_1, legacy::dot_q4_1);
dot4_of!(dot4_q5_0, legacy::dot_q5_0);
dot4_of!(dot4_q8_0, legacy::dot_q8_0);
dot4_of!(dot4_q4_k, kquants::dot_q4_k);
dot4_of!(dot4_q6_k, kquants::dot_q6_k);
dot4_of!(dot4_q5_1, legacy::dot_q5_1);
dot4_of!(dot4_q2_k, kquants::dot_q2_k);
dot4_of!(dot4_q3_k, kquants::dot_q3_k);
dot4_of!(dot4_q5_k, kquants::dot_q5_k);
dot4_of!(dot4_iq4_nl, iquants::dot_iq4_nl);
dot4_of!(dot4_iq4_xs, iquants::dot_iq4_xs);

const fn s<F>(f: F) -> Imp<F> {
    Imp {
        isa: Isa::Scalar,
        f,
    }
}

/// Indexed like [`crate::types::AType::ALL`] / [`crate::types::WType::ALL`].
pub(crate) static KERNELS: Kernels = Kernels {
    isa: Isa::Scalar,
    act: [
        s(act::convert_f32),
        s(act::convert_f16),
        s(act::convert_bf16),
        s(act::quantize_q8_0),
        s(act::quantize_q8_1),
        s(act::quantize_q8_k),
    ],
    weights: [
        WeightKernels {
            dequant: s(float::dequant_f32),
            dot: s(float::dot_f32),
            dotr4: s(dotr4_f32),
            dot4: s(dot4_f32),
            dot8: None,
            dot8_unpacked: None,
        },
        WeightKernels {
            dequant: s(float::dequant_f16),
            dot: s(float::dot_f16),
            dotr4: s(dotr4_f16),
            dot4: s(dot4_f16),
            dot8: None,
            dot8_unpacked: None,
        },
        WeightKernels {
            dequant: s(float::dequant_bf16),
            dot: s(float::dot_bf16),
            dotr4: s(dotr4_bf16),
            dot4: s(dot4_bf16),
            dot8: None,
            dot8_unpacked: None,
        },
        WeightKernels {
            dequant: s(legacy::dequant_q4_0),
            dot: s(legacy::dot_q4_0),
            dotr4: s(dotr4_q4_0),
            dot4: s(dot4_q4_0),
            dot8: None,
            dot8_unpacked: None,
        },
        WeightKernels {
            dequant: s(legacy::dequant_q4_1),
            dot: s(legacy::dot_q4_1),
            dotr4: s(dotr4_q4_1),
            dot4: s(dot4_q4_1),
            dot8: None,
            dot8_unpacked: None,
        },
        WeightKernels {
            dequant: s(legacy::dequant_q5_0),
            dot: s(legacy::dot_q5_0),
            dotr4: s(dotr4_q5_0),
            dot4: s(dot4_q5_0),
            dot8: None,
            dot8_unpacked: None,
        },
        WeightKernels {
            dequant: s(legacy::dequant_q8_0),
            dot: s(legacy::dot_q8_0),
            dotr4: s(dotr4_q8_0),
            dot4: s(dot4_q8_0),
            dot8: None,
            dot8_unpacked: None,
        },
        WeightKernels {
            dequant: s(kquants::dequant_q4_k),
            dot: s(kquants::dot_q4_k),
            dotr4: s(dotr4_q4_k),
            dot4: s(dot4_q4_k),
            dot8: None,
            dot8_unpacked: None,
        },
        WeightKernels {
            dequant: s(kquants::dequant_q6_k),
            dot: s(kquants::dot_q6_k),
            dotr4: s(dotr4_q6_k),
            dot4: s(dot4_q6_k),
            dot8: None,
            dot8_unpacked: None,
        },
        WeightKernels {
            dequant: s(legacy::dequant_q5_1),
            dot: s(legacy::dot_q5_1),
            dotr4: s(dotr4_q5_1),
            dot4: s(dot4_q5_1),
            dot8: None,
            dot8_unpacked: None,
        },
        WeightKernels {
            dequant: s(kquants::dequant_q2_k),
            dot: s(kquants::dot_q2_k),
            dotr4: s(dotr4_q2_k),
            dot4: s(dot4_q2_k),
            dot8: None,
            dot8_unpacked: None,
        },
        WeightKernels {
            dequant: s(kquants::dequant_q3_k),
            dot: s(kquants::dot_q3_k),
            dotr4: s(dotr4_q3_k),
            dot4: s(dot4_q3_k),
            dot8: None,
            dot8_unpacked: None,
        },
        WeightKernels {
            dequant: s(kquants::dequant_q5_k),
            dot: s(kquants::dot_q5_k),
            dotr4: s(dotr4_q5_k),
            dot4: s(dot4_q5_k),
            dot8: None,
            dot8_unpacked: None,
        },
        WeightKernels {
            dequant: s(iquants::dequant_iq4_nl),
            dot: s(iquants::dot_iq4_nl),
            dotr4: s(dotr4_iq4_nl),
            dot4: s(dot4_iq4_nl),
            dot8: None,
            dot8_unpacked: None,
        },
        WeightKernels {
            dequant: s(iquants::dequant_iq4_xs),
            dot: s(iquants::dot_iq4_xs),
            dotr4: s(dotr4_iq4_xs),
            dot4: s(dot4_iq4_xs),
            dot8: None,
            dot8_unpacked: None,
        },
    ],
};
