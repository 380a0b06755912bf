//! x86-64 kernels: AVX2 (+ FMA + F16C), the level ggml's default x86 build uses, and
//! AVX-512 (F/BW/VL + VNNI), the AVX2 table with its hot kernels replaced.

mod avx2;
mod avx512;

use avx2::{dequant, dot_k, dot_k2, float, legacy, legacy2};

use crate::isa::Isa;
use crate::kernels::{
    ActFn, DequantFn, Dot4Fn, Dot8Fn, DotFn, DotRowsFn, Imp, Kernels, UnpackFn, WeightKernels,
};
use crate::scalar;

const fn v(f: ActFn) -> Imp<ActFn> {
    Imp { isa: Isa::Avx2, f }
}

/// A weight type whose kernels are all AVX2.
const fn w(dequant: DequantFn, dot: DotFn, dotr4: DotRowsFn, dot4: Dot4Fn) -> WeightKernels {
    WeightKernels {
        dequant: Imp {
            isa: Isa::Avx2,
            f: dequant,
        },
        dot: Imp {
            isa: Isa::Avx2,
            f: dot,
        },
        dotr4: Imp {
            isa: Isa::Avx2,
            f: dotr4,
        },
        dot4: Imp {
            isa: Isa::Avx2,
            f: dot4,
        },
        dot8: None,
        dot8_unpacked: None,
    }
}

/// [`w`] with an eight-token GEMM micro-kernel over rows unpacked once per token tile.
const fn w8u(
    dequant: DequantFn,
    dot: DotFn,
    dotr4: DotRowsFn,
    dot4: Dot4Fn,
    unpack: UnpackFn,
    dot8: Dot8Fn,
) -> WeightKernels {
    let mut k = w(dequant, dot, dotr4, dot4);
    k.dot8_unpacked = Some((a(unpack), a(dot8)));
    k
}

/// [`w`] with an eight-token GEMM micro-kernel.
const fn w8(
    dequant: DequantFn,
    dot: DotFn,
    dotr4: DotRowsFn,
    dot4: Dot4Fn,
    dot8: Dot8Fn,
) -> WeightKernels {
    let mut k = w(dequant, dot, dotr4, dot4);
    k.dot8 = Some(a(dot8));
    k
}

/// An AVX2 kernel.
const fn a<F>(f: F) -> Imp<F> {
    Imp { isa: Isa::Avx2, f }
}

/// A kernel reused from the scalar table (the coverage table says so).
const fn s<F>(f: F) -> Imp<F> {
    Imp {
        isa: Isa::Scalar,
        f,
    }
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
        // ggml's x86 build runs its scalar reference here; this gives the same bytes.
        v(avx2::act::quantize_q8_k),
    ],
    weights: [
        WeightKernels {
            dequant: s(scalar::dequant::dequant_f32),
            dot: Imp {
                isa: Isa::Avx2,
                f: float::dot_f32,
            },
            dotr4: Imp {
                isa: Isa::Avx2,
                f: float::dotr4_f32,
            },
            dot4: Imp {
                isa: Isa::Avx2,
                f: float::dot4_f32,
            },
            dot8: None,
            dot8_unpacked: None,
        },
        w(
            dequant::dequant_f16,
            float::dot_f16,
            float::dotr4_f16,
            float::dot4_f16,
        ),
        w(
            dequant::dequant_bf16,
            float::dot_bf16,
            float::dotr4_bf16,
            float::dot4_bf16,
        ),
        w8u(
            dequant::dequant_q4_0,
            legacy::dot_q4_0,
            legacy::dotr4_q4_0,
            legacy::dot4_q4_0,
            legacy::unpack_q4_0,
            legacy::dot8_i8,
        ),
        w8(
            dequant::dequant_q4_1,
            legacy::dot_q4_1,
            legacy::dotr4_q4_1,
            legacy::dot4_q4_1,
            legacy::dot8_q4_1,
        ),
        w8u(
            dequant::dequant_q5_0,
            legacy::dot_q5_0,
            legacy::dotr4_q5_0,
            legacy::dot4_q5_0,
            legacy::unpack_q5_0,
            legacy::dot8_i8,
        ),
        w8(
            dequant::dequant_q8_0,
            legacy::dot_q8_0,
            legacy::dotr4_q8_0,
            legacy::dot4_q8_0,
            legacy::dot8_q8_0,
        ),
        w8(
            dequant::dequant_q4_k,
            dot_k::dot_q4_k,
            dot_k::dotr4_q4_k,
            dot_k::dot4_q4_k,
            dot_k::dot8_q4_k,
        ),
        w8(
            dequant::dequant_q6_k,
            dot_k::dot_q6_k,
            dot_k::dotr4_q6_k,
            dot_k::dot4_q6_k,
            dot_k::dot8_q6_k,
        ),
        // Dequantization: the scalar kernel (not on a hot path for this type).
        WeightKernels {
            dequant: s(scalar::dequant::dequant_q5_1),
            dot: a(legacy2::dot_q5_1),
            dotr4: a(legacy2::dotr4_q5_1),
            dot4: a(legacy2::dot4_q5_1),
            dot8: None,
            dot8_unpacked: None,
        },
        // Dequantization: the scalar kernel (not on a hot path for this type).
        WeightKernels {
            dequant: s(scalar::dequant::dequant_q2_k),
            dot: a(dot_k2::dot_q2_k),
            dotr4: a(dot_k2::dotr4_q2_k),
            dot4: a(dot_k2::dot4_q2_k),
            dot8: None,
            dot8_unpacked: None,
        },
        // Dequantization: the scalar kernel (not on a hot path for this type).
        WeightKernels {
            dequant: s(scalar::dequant::dequant_q3_k),
            dot: a(dot_k2::dot_q3_k),
            dotr4: a(dot_k2::dotr4_q3_k),
            dot4: a(dot_k2::dot4_q3_k),
            dot8: None,
            dot8_unpacked: None,
        },
        // Dequantization: the scalar kernel (not on a hot path for this type).
        WeightKernels {
            dequant: s(scalar::dequant::dequant_q5_k),
            dot: a(dot_k2::dot_q5_k),
            dotr4: a(dot_k2::dotr4_q5_k),
            dot4: a(dot_k2::dot4_q5_k),
            dot8: None,
            dot8_unpacked: None,
        },
        // Dequantization: the scalar kernel (not on a hot path for this type).
        WeightKernels {
            dequant: s(scalar::dequant::dequant_iq4_nl),
            dot: a(legacy2::dot_iq4_nl),
            dotr4: a(legacy2::dotr4_iq4_nl),
            dot4: a(legacy2::dot4_iq4_nl),
            dot8: None,
            dot8_unpacked: None,
        },
        // Dequantization: the scalar kernel (not on a hot path for this type).
        WeightKernels {
            dequant: s(scalar::dequant::dequant_iq4_xs),
            dot: a(dot_k2::dot_iq4_xs),
            dotr4: a(dot_k2::dotr4_iq4_xs),
            dot4: a(dot_k2::dot4_iq4_xs),
            dot8: None,
            dot8_unpacked: None,
        },
    ],
};

/// The AVX-512 table: [`AVX2`] with the kernels `avx512::table` replaces. Its `unsafe fn`
/// entries need AVX-512 F/BW/VL/VNNI and AVX2/FMA/F16C, which `kernels_for(Isa::Avx512)`
/// checks before handing it out.
pub(crate) static AVX512: Kernels = avx512::table(&AVX2);
