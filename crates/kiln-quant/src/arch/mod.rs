//! Per-architecture SIMD kernels. Each module builds a [`crate::table::Kernels`] table for
//! the ISAs of its architecture; only `kernels_for` hands them out, after runtime detection.

#[cfg(target_arch = "aarch64")]
pub(crate) mod aarch64;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86_64;
