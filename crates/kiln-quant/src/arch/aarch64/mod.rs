//! aarch64 kernels: the NEON table.
//!
//! The table starts from the scalar one and replaces the entries that have NEON code, so a
//! weight type without NEON kernels still works here (its entries say `scalar` in
//! [`crate::Kernels::implementations`]). The integer dots come in two builds, chosen once
//! when the table is built: with `sdot` when the CPU reports `dotprod`, with widening
//! multiplies otherwise. Both give the scalar oracle's bits.

mod neon;

use std::sync::LazyLock;

use neon::{act, float, kquants, legacy};

use crate::isa::Isa;
use crate::scalar;
use crate::table::Kernels;
use crate::types::AType;
use crate::types::WType::*;

/// Whether the NEON table uses `sdot` (the CPU has the Armv8.2 dot-product extension).
pub(crate) fn has_dotprod() -> bool {
    std::arch::is_aarch64_feature_detected!("dotprod")
}

/// The table for one quad-sum build (`DP`: `sdot` or not): the scalar table with the
/// entries NEON code implements replaced.
fn neon_table<const DP: bool>() -> Kernels {
    let mut k = Kernels::inherit(scalar::table(), Isa::Neon);

    k.set_quantize(AType::Q8_0, act::quantize_q8_0);
    k.set_quantize(AType::Q8_1, act::quantize_q8_1);
    k.set_quantize(AType::Q8_K, act::quantize_q8_k);

    k.set_dots(F32, float::dot_f32, float::dotr4_f32, float::dot4_f32);
    k.set_dots(F16, float::dot_f16, float::dotr4_f16, float::dot4_f16);
    k.set_dots(BF16, float::dot_bf16, float::dotr4_bf16, float::dot4_bf16);

    k.set_dots(
        Q4_0,
        legacy::dot_q4_0::<DP>,
        legacy::dotr4_q4_0::<DP>,
        legacy::dot4_q4_0::<DP>,
    );
    k.set_dots(
        Q4_1,
        legacy::dot_q4_1::<DP>,
        legacy::dotr4_q4_1::<DP>,
        legacy::dot4_q4_1::<DP>,
    );
    k.set_dots(
        Q5_0,
        legacy::dot_q5_0::<DP>,
        legacy::dotr4_q5_0::<DP>,
        legacy::dot4_q5_0::<DP>,
    );
    k.set_dots(
        Q8_0,
        legacy::dot_q8_0::<DP>,
        legacy::dotr4_q8_0::<DP>,
        legacy::dot4_q8_0::<DP>,
    );

    k.set_dots(
        Q4_K,
        kquants::dot_q4_k::<DP>,
        kquants::dotr4_q4_k::<DP>,
        kquants::dot4_q4_k::<DP>,
    );
    k.set_dots(
        Q6_K,
        kquants::dot_q6_k::<DP>,
        kquants::dotr4_q6_k::<DP>,
        kquants::dot4_q6_k::<DP>,
    );
    k
}

/// Its `unsafe fn` entries need NEON (and, in the `sdot` build, `dotprod`), which
/// `kernels_for(Isa::Neon)` and [`has_dotprod`] check before it is built or handed out.
static NEON: LazyLock<Kernels> = LazyLock::new(|| {
    if has_dotprod() {
        neon_table::<true>()
    } else {
        neon_table::<false>()
    }
});

/// The NEON table (the caller has checked that the CPU has NEON).
pub(crate) fn neon_kernels() -> Option<&'static Kernels> {
    Some(&NEON)
}
