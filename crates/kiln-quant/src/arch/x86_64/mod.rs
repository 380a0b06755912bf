//! x86-64 kernels: AVX2 (+ FMA + F16C), the level ggml's default x86 build uses, and
//! AVX-512 (F/BW/VL + VNNI), the AVX2 table with its hot kernels replaced.

mod avx2;
mod avx512;

use avx2::{act, float, iquants, kquants, legacy};

use crate::isa::Isa;
use crate::scalar;
use crate::table::Kernels;
use crate::types::AType;
use crate::types::WType::*;

/// The AVX2 table: the scalar table with the entries AVX2 code implements replaced (the
/// others stay scalar and say so). Its `unsafe fn` entries need AVX2, FMA and F16C, which
/// `kernels_for(Isa::Avx2)` checks before handing it out.
pub(crate) const fn avx2_table() -> Kernels {
    let mut k = Kernels::inherit(scalar::table(), Isa::Avx2);

    // Activations. F32 and BF16 stay scalar (a copy, a conversion; not hot). For Q8_K
    // ggml's x86 build runs its scalar reference; this gives the same bytes.
    k.set_quantize(AType::F16, act::convert_f16);
    k.set_quantize(AType::Q8_0, act::quantize_q8_0);
    k.set_quantize(AType::Q8_1, act::quantize_q8_1);
    k.set_quantize(AType::Q8_K, act::quantize_q8_k);

    // Float types (F32 dequantization stays the scalar copy).
    k.set_dots(F32, float::dot_f32, float::dotr4_f32, float::dot4_f32);
    k.set_dequant(F16, float::dequant_f16);
    k.set_dots(F16, float::dot_f16, float::dotr4_f16, float::dot4_f16);
    k.set_dot23(F16, float::dot2_f16, float::dot3_f16);
    k.set_dequant(BF16, float::dequant_bf16);
    k.set_dots(BF16, float::dot_bf16, float::dotr4_bf16, float::dot4_bf16);
    k.set_dot23(BF16, float::dot2_bf16, float::dot3_bf16);

    // Legacy types (Q5_1 dequantizes with the scalar kernel: not on a hot path).
    k.set_dequant(Q4_0, legacy::dequant_q4_0);
    k.set_dots(
        Q4_0,
        legacy::dot_q4_0,
        legacy::dotr4_q4_0,
        legacy::dot4_q4_0,
    );
    k.set_dot23(Q4_0, legacy::dot2_q4_0, legacy::dot3_q4_0);
    k.set_dot8(Q4_0, legacy::dot8_q4_0);
    k.set_dot8_unpacked(Q4_0, legacy::unpack_q4_0, legacy::dot8_i8);
    k.set_dequant(Q4_1, legacy::dequant_q4_1);
    k.set_dots(
        Q4_1,
        legacy::dot_q4_1,
        legacy::dotr4_q4_1,
        legacy::dot4_q4_1,
    );
    k.set_dot23(Q4_1, legacy::dot2_q4_1, legacy::dot3_q4_1);
    k.set_dot8(Q4_1, legacy::dot8_q4_1);
    k.set_dequant(Q5_0, legacy::dequant_q5_0);
    k.set_dots(
        Q5_0,
        legacy::dot_q5_0,
        legacy::dotr4_q5_0,
        legacy::dot4_q5_0,
    );
    k.set_dot23(Q5_0, legacy::dot2_q5_0, legacy::dot3_q5_0);
    k.set_dot8(Q5_0, legacy::dot8_q5_0);
    k.set_dot8_unpacked(Q5_0, legacy::unpack_q5_0, legacy::dot8_i8);
    k.set_dots(
        Q5_1,
        legacy::dot_q5_1,
        legacy::dotr4_q5_1,
        legacy::dot4_q5_1,
    );
    k.set_dequant(Q8_0, legacy::dequant_q8_0);
    k.set_dots(
        Q8_0,
        legacy::dot_q8_0,
        legacy::dotr4_q8_0,
        legacy::dot4_q8_0,
    );
    k.set_dot23(Q8_0, legacy::dot2_q8_0, legacy::dot3_q8_0);
    k.set_dot8(Q8_0, legacy::dot8_q8_0);

    // K-quants (Q2_K, Q3_K, Q5_K dequantize with the scalar kernels: not on a hot path).
    k.set_dots(
        Q2_K,
        kquants::dot_q2_k,
        kquants::dotr4_q2_k,
        kquants::dot4_q2_k,
    );
    k.set_dots(
        Q3_K,
        kquants::dot_q3_k,
        kquants::dotr4_q3_k,
        kquants::dot4_q3_k,
    );
    k.set_dequant(Q4_K, kquants::dequant_q4_k);
    k.set_dots(
        Q4_K,
        kquants::dot_q4_k,
        kquants::dotr4_q4_k,
        kquants::dot4_q4_k,
    );
    k.set_dot23(Q4_K, kquants::dot2_q4_k, kquants::dot3_q4_k);
    k.set_dot8_reading_lay8(Q4_K, kquants::dot8_q4_k);
    k.set_dots(
        Q5_K,
        kquants::dot_q5_k,
        kquants::dotr4_q5_k,
        kquants::dot4_q5_k,
    );
    k.set_dequant(Q6_K, kquants::dequant_q6_k);
    k.set_dots(
        Q6_K,
        kquants::dot_q6_k,
        kquants::dotr4_q6_k,
        kquants::dot4_q6_k,
    );
    k.set_dot23(Q6_K, kquants::dot2_q6_k, kquants::dot3_q6_k);
    k.set_dot8(Q6_K, kquants::dot8_q6_k);

    // IQ4 types (dequantized with the scalar kernels: not on a hot path).
    k.set_dots(
        IQ4_NL,
        iquants::dot_iq4_nl,
        iquants::dotr4_iq4_nl,
        iquants::dot4_iq4_nl,
    );
    k.set_dots(
        IQ4_XS,
        iquants::dot_iq4_xs,
        iquants::dotr4_iq4_xs,
        iquants::dot4_iq4_xs,
    );
    k
}

pub(crate) static AVX2: Kernels = avx2_table();

/// The AVX-512 table: [`AVX2`] with the kernels `avx512::table` replaces. Its `unsafe fn`
/// entries need AVX-512 F/BW/VL/VNNI and AVX2/FMA/F16C, which `kernels_for(Isa::Avx512)`
/// checks before handing it out.
pub(crate) static AVX512: Kernels = avx512::table(avx2_table());
