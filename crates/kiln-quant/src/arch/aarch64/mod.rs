//! aarch64 kernels: the NEON table.
//!
//! The table starts as a copy of the scalar one and replaces the entries that have NEON
//! code, so a weight type without NEON kernels still works here (its entries say `scalar`
//! in [`crate::Kernels::implementations`]). The integer dots come in two builds, chosen
//! once when the table is built: with `sdot` when the CPU reports `dotprod`, with widening
//! multiplies otherwise. Both give the scalar oracle's bits.

mod neon;

use std::sync::LazyLock;

use neon::{act, float, kquants, legacy};

use crate::isa::Isa;
use crate::kernels::{ActFn, Dot4Fn, DotFn, DotRowsFn, Imp, Kernels};
use crate::scalar;
use crate::types::{AType, WType};

/// Whether the NEON table uses `sdot` (the CPU has the Armv8.2 dot-product extension).
pub(crate) fn has_dotprod() -> bool {
    std::arch::is_aarch64_feature_detected!("dotprod")
}

fn n<F>(f: F) -> Imp<F> {
    Imp { isa: Isa::Neon, f }
}

/// Replaces the three dot entries of `w`.
fn set_dots(k: &mut Kernels, w: WType, dot: DotFn, dotr4: DotRowsFn, dot4: Dot4Fn) {
    let e = &mut k.weights[w as usize];
    e.dot = n(dot);
    e.dotr4 = n(dotr4);
    e.dot4 = n(dot4);
}

/// The table for one quad-sum build (`DP`: `sdot` or not).
fn build<const DP: bool>() -> Kernels {
    let s = &scalar::KERNELS;
    let mut k = Kernels {
        isa: Isa::Neon,
        act: s.act,
        weights: s.weights,
    };
    let acts: [(AType, ActFn); 3] = [
        (AType::Q8_0, act::quantize_q8_0),
        (AType::Q8_1, act::quantize_q8_1),
        (AType::Q8K, act::quantize_q8_k),
    ];
    for (a, f) in acts {
        k.act[a as usize] = n(f);
    }
    set_dots(
        &mut k,
        WType::F32,
        float::dot_f32,
        float::dotr4_f32,
        float::dot4_f32,
    );
    set_dots(
        &mut k,
        WType::F16,
        float::dot_f16,
        float::dotr4_f16,
        float::dot4_f16,
    );
    set_dots(
        &mut k,
        WType::BF16,
        float::dot_bf16,
        float::dotr4_bf16,
        float::dot4_bf16,
    );
    set_dots(
        &mut k,
        WType::Q4_0,
        legacy::dot_q4_0::<DP>,
        legacy::dotr4_q4_0::<DP>,
        legacy::dot4_q4_0::<DP>,
    );
    set_dots(
        &mut k,
        WType::Q4_1,
        legacy::dot_q4_1::<DP>,
        legacy::dotr4_q4_1::<DP>,
        legacy::dot4_q4_1::<DP>,
    );
    set_dots(
        &mut k,
        WType::Q5_0,
        legacy::dot_q5_0::<DP>,
        legacy::dotr4_q5_0::<DP>,
        legacy::dot4_q5_0::<DP>,
    );
    set_dots(
        &mut k,
        WType::Q8_0,
        legacy::dot_q8_0::<DP>,
        legacy::dotr4_q8_0::<DP>,
        legacy::dot4_q8_0::<DP>,
    );
    set_dots(
        &mut k,
        WType::Q4K,
        kquants::dot_q4_k::<DP>,
        kquants::dotr4_q4_k::<DP>,
        kquants::dot4_q4_k::<DP>,
    );
    set_dots(
        &mut k,
        WType::Q6K,
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
        build::<true>()
    } else {
        build::<false>()
    }
});

/// The NEON table (the caller has checked that the CPU has NEON).
pub(crate) fn neon_kernels() -> Option<&'static Kernels> {
    Some(&NEON)
}
