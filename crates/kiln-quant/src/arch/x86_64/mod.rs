//! x86-64 kernels. Today: AVX2 (+ FMA + F16C), the level ggml's default x86 build uses.
//! AVX-512 / VNNI tables will sit beside it.

mod avx2;

use crate::isa::Isa;
use crate::kernels::{ActFn, DequantFn, Dot4Fn, DotFn, Imp, Kernels, WeightKernels};
use crate::scalar;

const fn v(f: ActFn) -> Imp<ActFn> {
    Imp { isa: Isa::Avx2, f }
}

/// A weight type whose dequantize, dot and dot4 kernels are all AVX2.
const fn w(dequant: DequantFn, dot: DotFn, dot4: Dot4Fn) -> WeightKernels {
    WeightKernels {
        dequant: Imp { isa: Isa::Avx2, f: dequant },
        dot: Imp { isa: Isa::Avx2, f: dot },
        dot4: Imp { isa: Isa::Avx2, f: dot4 },
    }
}

/// A kernel reused from the scalar table (the coverage table says so).
const fn s<F>(f: F) -> Imp<F> {
    Imp { isa: Isa::Scalar, f }
}

/// The AVX2 table. Indexed like `AType::ALL` / `WType::ALL`. Its `unsafe fn` entries need
/// AVX2, FMA and F16C, which `kernels_for(Isa::Avx2)` checks before handing it out.
pub(crate) static AVX2: Kernels = Kernels {
    isa: Isa::Avx2,
    act: [
        s(scalar::act::convert_f32),
        v(avx2::act::convert_f16),
        s(scalar::act::convert_bf16),
        v(avx2::act::quantize_q8_0),
        v(avx2::act::quantize_q8_1),
        // ggml's x86 build quantizes Q8_K with its scalar reference too.
        s(scalar::act::quantize_q8_k),
    ],
    weights: [
        WeightKernels {
            dequant: s(scalar::dequant::dequant_f32),
            dot: Imp { isa: Isa::Avx2, f: avx2::dot::dot_f32 },
            dot4: Imp { isa: Isa::Avx2, f: avx2::dot::dot4_f32 },
        },
        w(avx2::dequant::dequant_f16, avx2::dot::dot_f16, avx2::dot::dot4_f16),
        w(avx2::dequant::dequant_bf16, avx2::dot::dot_bf16, avx2::dot::dot4_bf16),
        w(avx2::dequant::dequant_q4_0, avx2::dot::dot_q4_0, avx2::dot::dot4_q4_0),
        w(avx2::dequant::dequant_q4_1, avx2::dot::dot_q4_1, avx2::dot::dot4_q4_1),
        w(avx2::dequant::dequant_q5_0, avx2::dot::dot_q5_0, avx2::dot::dot4_q5_0),
        w(avx2::dequant::dequant_q8_0, avx2::dot::dot_q8_0, avx2::dot::dot4_q8_0),
        w(avx2::dequant::dequant_q4_k, avx2::dot_k::dot_q4_k, avx2::dot_k::dot4_q4_k),
        w(avx2::dequant::dequant_q6_k, avx2::dot_k::dot_q6_k, avx2::dot_k::dot4_q6_k),
    ],
};
