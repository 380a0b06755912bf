//! ISA selection: `KILN_ISA` parsing, refusals (never a silent fallback), and the coverage
//! table that says which ISA implements each kernel.

use kiln_quant::{GgmlType, Isa, IsaError, kernels_for, select_isa};

#[test]
fn no_request_picks_the_most_capable_isa_with_kernels() {
    let isa = select_isa(None).expect("auto");
    assert!(kernels_for(isa).is_some());
    if Isa::Avx512.cpu_has() {
        assert_eq!(isa, Isa::Avx512);
    } else if Isa::Avx2.cpu_has() {
        assert_eq!(isa, Isa::Avx2);
    }
    assert_eq!(select_isa(Some("  ")), Ok(isa), "blank means auto");
}

#[test]
fn names_round_trip_and_parse_case_insensitively() {
    for isa in Isa::ALL {
        assert_eq!(Isa::from_name(isa.name()), Some(isa));
        assert_eq!(Isa::from_name(&isa.name().to_uppercase()), Some(isa));
    }
    assert_eq!(select_isa(Some("scalar")), Ok(Isa::Scalar));
}

#[test]
fn an_unknown_name_is_an_error_that_lists_the_choices() {
    let e = select_isa(Some("sse9")).expect_err("unknown");
    assert_eq!(
        e,
        IsaError::UnknownName {
            value: "sse9".into()
        }
    );
    assert!(e.to_string().contains("scalar, avx2, avx512, neon"));
}

#[test]
fn an_isa_the_cpu_lacks_is_refused_not_replaced() {
    #[cfg(target_arch = "x86_64")]
    {
        let e = select_isa(Some("neon")).expect_err("no neon on x86");
        assert!(
            matches!(e, IsaError::NotOnThisCpu { isa: Isa::Neon, .. }),
            "{e}"
        );
        assert!(e.to_string().contains("lacks"));
        // AVX-512: chosen when the CPU has it, refused (not replaced by AVX2) otherwise.
        match select_isa(Some("avx512")) {
            Ok(Isa::Avx512) => assert!(Isa::Avx512.cpu_has()),
            Err(IsaError::NotOnThisCpu {
                isa: Isa::Avx512, ..
            }) => assert!(!Isa::Avx512.cpu_has()),
            other => panic!("avx512: {other:?}"),
        }
        // A lower level can always be forced on a CPU that has a higher one.
        if Isa::Avx512.cpu_has() {
            assert_eq!(select_isa(Some("avx2")), Ok(Isa::Avx2));
        }
        assert!(kernels_for(Isa::Neon).is_none());
    }
}

#[test]
fn this_x86_machine_runs_the_avx2_kernels_in_tests() {
    // The development machine has AVX2; if it ever does not, the agreement tests would only
    // compare scalar with itself, so say so loudly.
    #[cfg(target_arch = "x86_64")]
    assert!(
        kernels_for(Isa::Avx2).is_some(),
        "AVX2 kernels unavailable: SIMD paths untested"
    );
}

#[test]
fn coverage_table_matches_the_crate_docs() {
    let scalar = kernels_for(Isa::Scalar).expect("scalar");
    assert!(
        scalar
            .implementations()
            .iter()
            .all(|i| i.isa == Isa::Scalar)
    );
    let Some(avx2) = kernels_for(Isa::Avx2) else {
        return;
    };
    let imps = avx2.implementations();
    let isa_of = |kernel: &str, ty: GgmlType| {
        imps.iter()
            .find(|i| i.kernel == kernel && i.ty == ty)
            .map(|i| i.isa)
            .expect("listed")
    };
    for ty in [
        GgmlType::Q8_0,
        GgmlType::Q8_1,
        GgmlType::Q8_K,
        GgmlType::F16,
    ] {
        assert_eq!(isa_of("quantize", ty), Isa::Avx2, "quantize {ty}");
    }
    for ty in [GgmlType::BF16, GgmlType::F32] {
        assert_eq!(isa_of("quantize", ty), Isa::Scalar, "quantize {ty}");
    }
    // The AVX2 coverage table: the types whose dots (dot, dotr4, dot4) and whose
    // dequantization have AVX2 code. Every other entry is the scalar kernel and must say so,
    // so a type with scalar kernels only needs no line here. (F32 dequantization is a copy;
    // Q5_1, Q2_K, Q3_K, Q5_K and the IQ4 types dequantize with the scalar kernel: off the hot
    // path, only dots run per token.)
    use GgmlType::*;
    let avx2_dots = [
        F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS,
    ];
    let avx2_dequant = [F16, BF16, Q4_0, Q4_1, Q5_0, Q8_0, Q4_K, Q6_K];
    let isa_if = |avx2: bool| if avx2 { Isa::Avx2 } else { Isa::Scalar };
    for ty in kiln_quant::supported_types() {
        let want = isa_if(avx2_dots.contains(&ty));
        assert_eq!(isa_of("dot", ty), want, "dot {ty}");
        assert_eq!(isa_of("dot4", ty), want, "dot4 {ty}");
        assert_eq!(isa_of("dotr4", ty), want, "dotr4 {ty}");
        let want = isa_if(avx2_dequant.contains(&ty));
        assert_eq!(isa_of("dequantize", ty), want, "dequantize {ty}");
    }
}

/// The kernels the AVX-512 table implements itself; every other entry is the AVX2 table's.
const AVX512_KERNELS: &[(&str, GgmlType)] = &[
    ("dot", GgmlType::Q4_K),
    ("dotr4", GgmlType::Q4_K),
    ("dot4", GgmlType::Q4_K),
    ("dot8", GgmlType::Q4_K),
    ("dot8r2", GgmlType::Q4_K),
    ("dot4", GgmlType::Q5_K),
    ("dot8", GgmlType::Q5_K),
    ("dot", GgmlType::Q6_K),
    ("dotr4", GgmlType::Q6_K),
    ("dot4", GgmlType::Q6_K),
    ("dot8", GgmlType::Q6_K),
    ("dot8r2", GgmlType::Q6_K),
    ("dotr4", GgmlType::Q8_0),
    ("dotr4", GgmlType::Q4_0),
    ("dotr4", GgmlType::Q5_0),
    ("dotr4", GgmlType::Q4_1),
    ("dot8r4", GgmlType::Q4_0),
    ("dot8r4", GgmlType::Q8_0),
    ("dot8r4", GgmlType::Q5_0),
    ("dot8r4", GgmlType::Q4_1),
    ("dot4", GgmlType::F16),
    ("dot8", GgmlType::F16),
    ("dot8r4", GgmlType::F16),
    ("dot4", GgmlType::BF16),
    ("dot8", GgmlType::BF16),
    ("dot8r4", GgmlType::BF16),
];

#[test]
fn the_avx512_table_is_the_avx2_table_with_its_own_kernels_replaced() {
    let (Some(avx2), Some(avx512)) = (kernels_for(Isa::Avx2), kernels_for(Isa::Avx512)) else {
        assert!(
            !Isa::Avx512.cpu_has(),
            "AVX-512 CPU without an AVX-512 table"
        );
        return;
    };
    assert_eq!(avx512.isa(), Isa::Avx512);
    let base = avx2.implementations();
    let imps = avx512.implementations();
    for i in &imps {
        let own = AVX512_KERNELS.contains(&(i.kernel, i.ty));
        let inherited = base
            .iter()
            .find(|b| b.kernel == i.kernel && b.ty == i.ty)
            .map(|b| b.isa);
        if own {
            assert_eq!(i.isa, Isa::Avx512, "{} {}", i.kernel, i.ty);
        } else {
            assert_eq!(Some(i.isa), inherited, "{} {}", i.kernel, i.ty);
        }
    }
    for &(kernel, ty) in AVX512_KERNELS {
        assert!(
            imps.iter().any(|i| i.kernel == kernel && i.ty == ty),
            "{kernel} {ty} listed"
        );
    }
}

#[test]
fn a_bad_kiln_isa_fails_at_startup_with_a_message() {
    // Run this test binary again with KILN_ISA set: `try_active_isa` must report it.
    if let Ok(v) = std::env::var("KILN_ISA_CHILD") {
        let err = kiln_quant::try_active_isa().expect_err("bad KILN_ISA must be refused");
        assert!(err.to_string().contains(&v), "{err}");
        let panicked = std::panic::catch_unwind(kiln_quant::active_isa).is_err();
        assert!(panicked, "active_isa must panic on a bad KILN_ISA");
        return;
    }
    let out = self_command()
        .args([
            "--exact",
            "a_bad_kiln_isa_fails_at_startup_with_a_message",
            "--nocapture",
        ])
        .env("KILN_ISA", "mmx")
        .env("KILN_ISA_CHILD", "mmx")
        .output()
        .expect("run child");
    assert!(
        out.status.success(),
        "child: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A command that runs this test binary again. Under a cross runner (qemu-user, as
/// `cargo xtask test-aarch64` sets `CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER`), the
/// binary can only be started through that runner.
fn self_command() -> std::process::Command {
    let exe = std::env::current_exe().expect("test binary");
    let runner = if cfg!(target_arch = "aarch64") {
        std::env::var("CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER").ok()
    } else {
        None
    };
    let mut words = runner.as_deref().unwrap_or("").split_whitespace();
    match words.next() {
        Some(prog) => {
            let mut c = std::process::Command::new(prog);
            c.args(words).arg(exe);
            c
        }
        None => std::process::Command::new(exe),
    }
}

#[cfg(target_arch = "aarch64")]
#[test]
fn aarch64_has_a_neon_table_with_the_listed_kernels() {
    // Every aarch64 Linux CPU has NEON; the table (sdot build or not) must be there and be
    // the automatic choice, so the agreement tests compare it with scalar.
    let neon = kernels_for(Isa::Neon).expect("NEON kernels on aarch64");
    assert_eq!(neon.isa(), Isa::Neon);
    assert_eq!(select_isa(None), Ok(Isa::Neon));
    assert_eq!(select_isa(Some("neon")), Ok(Isa::Neon));
    // `cargo xtask test-aarch64` runs this under qemu CPU models with and without the
    // dot-product extension and says which one, so both kernel builds are known to be tested.
    let dotprod = std::arch::is_aarch64_feature_detected!("dotprod");
    eprintln!("dotprod detected: {dotprod}");
    if let Ok(want) = std::env::var("KILN_EXPECT_DOTPROD") {
        assert_eq!(dotprod, want == "1", "KILN_EXPECT_DOTPROD={want}");
    }
    let imps = neon.implementations();
    let isa_of = |kernel: &str, ty: GgmlType| {
        imps.iter()
            .find(|i| i.kernel == kernel && i.ty == ty)
            .map(|i| i.isa)
            .expect("listed")
    };
    for ty in [GgmlType::Q8_0, GgmlType::Q8_1] {
        assert_eq!(isa_of("quantize", ty), Isa::Neon, "quantize {ty}");
    }
    for ty in [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q8_0,
        GgmlType::Q4_K,
        GgmlType::Q6_K,
    ] {
        for kernel in ["dot", "dotr4", "dot4"] {
            assert_eq!(isa_of(kernel, ty), Isa::Neon, "{kernel} {ty}");
        }
    }
    // Whatever NEON does not implement is the scalar kernel, and says so.
    assert!(
        imps.iter()
            .all(|i| i.isa == Isa::Neon || i.isa == Isa::Scalar)
    );
}
