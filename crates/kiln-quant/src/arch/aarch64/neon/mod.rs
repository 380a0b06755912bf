//! NEON (Advanced SIMD) kernels, each generic over `DP`: `true` computes the integer quad
//! sums with `sdot` (Armv8.2 `dotprod`), `false` with widening multiplies. Both give the
//! same lanes, hence the scalar oracle's bits.

pub(crate) mod act;
pub(crate) mod float;
pub(crate) mod kquants;
pub(crate) mod legacy;
pub(crate) mod util;
