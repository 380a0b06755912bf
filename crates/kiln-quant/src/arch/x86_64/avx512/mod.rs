//! Kernels for x86-64 with AVX-512 F/BW/VL and VNNI (on top of AVX2 + FMA + F16C, which
//! every such CPU has and the table's inherited entries need). Every function here is
//! `#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]` and
//! reachable only through the [`AVX512`](super::AVX512) table, which is the AVX2 table with
//! the entries of [`table`] replaced.

pub(crate) mod float;
pub(crate) mod gemv;
pub(crate) mod kquants;
pub(crate) mod legacy;
pub(crate) mod util;

use crate::isa::Isa;
use crate::table::Kernels;
use crate::types::WType::*;

/// The AVX-512 table: `parent` (the AVX2 table) with the kernels that have an AVX-512 version
/// replaced. Entries not replaced keep their parent's ISA in the coverage table.
pub(crate) const fn table(parent: Kernels) -> Kernels {
    let mut k = Kernels::inherit(parent, Isa::Avx512);
    // Two or three tokens take the wider kernels over padding here, as measured on an
    // AVX-512 machine (the AVX2 two- and three-token kernels were not).
    k.clear_dot23();
    // Only kernels measured faster than the AVX2 ones they replace (docs/kernels.md).
    k.set_dots(Q4_K, gemv::dot_q4_k, gemv::dotr4_q4_k, kquants::dot4_q4_k);
    k.set_dot8(Q4_K, kquants::dot8_q4_k);
    k.set_dot8r2_unpacked(
        Q4_K,
        kquants::unpack_pair_q4_k,
        kquants::dot8r2u_q4_k,
        kquants::Q4K_PAIR_BLOCK_BYTES,
    );
    k.set_dot4(Q5_K, kquants::dot4_q5_k);
    k.set_dot8(Q5_K, kquants::dot8_q5_k);
    k.set_dots(
        Q6_K,
        kquants::dot_q6_k,
        kquants::dotr4_q6_k,
        kquants::dot4_q6_k,
    );
    k.set_dot8(Q6_K, kquants::dot8_q6_k);
    k.set_dot8r2(Q6_K, kquants::dot8r2_q6_k);
    // The signed-weight GEMVs read the weights as unsigned bytes plus an offset.
    k.set_dotr4(Q4_0, legacy::dotr4_q4_0);
    k.set_dotr4(Q5_0, legacy::dotr4_q5_0);
    k.set_dotr4(Q8_0, legacy::dotr4_q8_0);
    k.set_dotr4(Q4_1, legacy::dotr4_q4_1);
    k.set_dot8r4_grouped(
        Q4_1,
        legacy::unpack_quad_q4_1,
        legacy::dot8r4_quad_q4_1,
        legacy::QUAD_Q4_1_BLOCK_BYTES,
    );
    // The signed-weight GEMMs: the four-row tile with the tokens across the lanes, over
    // rows laid out once per row block.
    k.set_dot8r4_grouped(
        Q8_0,
        legacy::unpack_quad_q8_0,
        legacy::dot8r4_quad_q8_0,
        legacy::QUAD_BLOCK_BYTES,
    );
    // Q8_0 also reads its rows as stored, for tasks of few tokens (`PACKED_MAX_TOKENS`).
    k.set_dot8r4(Q8_0, legacy::dot8r4_q8_0);
    k.set_dot8r4_grouped(
        Q4_0,
        legacy::unpack_quad_q4_0,
        legacy::dot8r4_quad_q4_0,
        legacy::QUAD_BLOCK_BYTES,
    );
    k.set_dot8r4_grouped(
        Q5_0,
        legacy::unpack_quad_q5_0,
        legacy::dot8r4_quad_q5_0,
        legacy::QUAD_BLOCK_BYTES,
    );
    // 16-bit floats: the weights widened once per step for four or eight tokens.
    k.set_dot4(F16, float::dot4_f16);
    k.set_dot8(F16, float::dot8_f16);
    k.set_dot8r4(F16, float::dot8r4_f16);
    k.set_dot4(BF16, float::dot4_bf16);
    k.set_dot8(BF16, float::dot8_bf16);
    k.set_dot8r4(BF16, float::dot8r4_bf16);
    k
}
