//! Kernels for x86-64 with AVX2 + FMA + F16C. Every function here is
//! `#[target_feature(enable = "avx2,fma,f16c")]` and reachable only through the
//! [`AVX2`](super::AVX2) table.

pub(crate) mod act;
pub(crate) mod float;
pub(crate) mod iquants;
pub(crate) mod kquants;
pub(crate) mod legacy;
pub(crate) mod util;
