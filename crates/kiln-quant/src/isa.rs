//! Which instruction set the kernels use: detected once, overridable with `KILN_ISA`.

use std::fmt;

/// An instruction-set level Kiln has (or will have) kernels for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Isa {
    /// Portable Rust; the oracle every other implementation is tested against.
    Scalar,
    /// x86-64 with AVX2, FMA and F16C.
    Avx2,
    /// x86-64 with AVX-512 F/BW/VL and VNNI (and AVX2, FMA, F16C, which such CPUs have and
    /// the kernels it shares with [`Isa::Avx2`] need). Chosen over AVX2 when present.
    Avx512,
    /// aarch64 Advanced SIMD. Its integer dots use `sdot` when the CPU also has the Armv8.2
    /// dot-product extension (`dotprod`, detected once when the table is built) and widening
    /// multiplies otherwise; both give the scalar bits. Kernels NEON lacks run the scalar
    /// code (see `Kernels::implementations`).
    Neon,
}

impl Isa {
    /// Every level, from the most portable.
    pub const ALL: [Isa; 4] = [Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Neon];

    /// The name `KILN_ISA` accepts.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
            Isa::Neon => "neon",
        }
    }

    /// Parses a name (case-insensitive, surrounding blanks ignored).
    pub fn from_name(name: &str) -> Option<Isa> {
        let name = name.trim();
        Isa::ALL
            .into_iter()
            .find(|i| i.name().eq_ignore_ascii_case(name))
    }

    /// Whether this CPU can run code for this level (runtime detection).
    pub fn cpu_has(self) -> bool {
        match self {
            Isa::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => {
                std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
                    && std::arch::is_x86_feature_detected!("f16c")
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => {
                Isa::Avx2.cpu_has()
                    && std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512bw")
                    && std::arch::is_x86_feature_detected!("avx512vl")
                    && std::arch::is_x86_feature_detected!("avx512vnni")
            }
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => std::arch::is_aarch64_feature_detected!("neon"),
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// The CPU features this level needs, for error messages.
    pub fn required_features(self) -> &'static str {
        match self {
            Isa::Scalar => "nothing",
            Isa::Avx2 => "x86-64 avx2 + fma + f16c",
            Isa::Avx512 => {
                "x86-64 avx512f + avx512bw + avx512vl + avx512vnni (+ avx2 + fma + f16c)"
            }
            Isa::Neon => "aarch64 neon",
        }
    }
}

impl fmt::Display for Isa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why the requested instruction set cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IsaError {
    #[error(
        "KILN_ISA={value:?} is not an instruction set Kiln knows (expected one of: scalar, avx2, avx512, neon)"
    )]
    UnknownName { value: String },
    #[error("KILN_ISA={isa} was requested but this CPU lacks it (needs {needs})")]
    NotOnThisCpu { isa: Isa, needs: &'static str },
    #[error(
        "KILN_ISA={isa} was requested; this CPU has it but Kiln has no {isa} kernels yet (available here: {available})"
    )]
    NoKernels { isa: Isa, available: String },
}
