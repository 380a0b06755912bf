//! Kernels for x86-64 with AVX-512 F/BW/VL and VNNI (on top of AVX2 + FMA + F16C, which
//! every such CPU has and the table's inherited entries need). Every function here is
//! `#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]` and
//! reachable only through the [`AVX512`](super::AVX512) table, which is the AVX2 table with
//! the entries of [`table`] replaced.

pub(crate) mod kquants;
pub(crate) mod legacy;
pub(crate) mod util;

use crate::isa::Isa;
use crate::kernels::{Dot8Fn, Imp, Kernels, UnpackFn};
use crate::types::WType;

/// An AVX-512 kernel.
const fn x<F>(f: F) -> Imp<F> {
    Imp {
        isa: Isa::Avx512,
        f,
    }
}

/// The base table's row unpacker with the AVX-512 eight-token kernel over unpacked rows.
const fn unpacked8(
    base: Option<(Imp<UnpackFn>, Imp<Dot8Fn>)>,
) -> Option<(Imp<UnpackFn>, Imp<Dot8Fn>)> {
    match base {
        Some((unpack, _)) => Some((unpack, x(legacy::dot8_i8))),
        None => None,
    }
}

/// The AVX-512 table: `base` (the AVX2 table) with the kernels that have an AVX-512 version
/// replaced. Entries not replaced keep their own ISA in the coverage table.
pub(crate) const fn table(base: &Kernels) -> Kernels {
    let mut weights = base.weights;
    // Only kernels measured faster than the AVX2 ones they replace (docs/kernels.md).
    let k = &mut weights[WType::Q4K as usize];
    k.dot4 = x(kquants::dot4_q4_k);
    k.dot8 = Some(x(kquants::dot8_q4_k));
    let k = &mut weights[WType::Q5K as usize];
    k.dot4 = x(kquants::dot4_q5_k);
    k.dot8 = Some(x(kquants::dot8_q5_k));
    let k = &mut weights[WType::Q6K as usize];
    k.dot = x(kquants::dot_q6_k);
    k.dotr4 = x(kquants::dotr4_q6_k);
    k.dot4 = x(kquants::dot4_q6_k);
    k.dot8 = Some(x(kquants::dot8_q6_k));
    let k = &mut weights[WType::Q8_0 as usize];
    k.dot8 = Some(x(legacy::dot8_q8_0));
    let k = &mut weights[WType::Q4_1 as usize];
    k.dot8 = Some(x(legacy::dot8_q4_1));
    let k = &mut weights[WType::Q4_0 as usize];
    k.dot8_unpacked = unpacked8(k.dot8_unpacked);
    let k = &mut weights[WType::Q5_0 as usize];
    k.dot8_unpacked = unpacked8(k.dot8_unpacked);
    Kernels {
        isa: Isa::Avx512,
        act: base.act,
        weights,
    }
}
