//! aarch64. NEON kernels are not written yet, so there is no NEON table: the scalar kernels
//! run here, and `KILN_ISA=neon` is refused with [`crate::IsaError::NoKernels`] rather than
//! silently running scalar code. When NEON kernels land, build a `Kernels` table here (as
//! `arch/x86_64` does for AVX2) and return it.

use crate::kernels::Kernels;

/// The NEON table, once it exists.
pub(crate) fn neon_kernels() -> Option<&'static Kernels> {
    None
}
