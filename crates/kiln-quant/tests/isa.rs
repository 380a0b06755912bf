//! ISA selection: `KILN_ISA` parsing, refusals (never a silent fallback), and the coverage
//! table that says which ISA implements each kernel.

use kiln_quant::{GgmlType, Isa, IsaError, kernels_for, select_isa};

#[test]
fn no_request_picks_the_most_capable_isa_with_kernels() {
    let isa = select_isa(None).expect("auto");
    assert!(kernels_for(isa).is_some());
    if Isa::Avx2.cpu_has() {
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
        // AVX-512: refused either because the CPU lacks it or because Kiln has no kernels.
        match select_isa(Some("avx512")) {
            Err(IsaError::NotOnThisCpu {
                isa: Isa::Avx512, ..
            }) => assert!(!Isa::Avx512.cpu_has()),
            Err(IsaError::NoKernels {
                isa: Isa::Avx512, ..
            }) => assert!(Isa::Avx512.cpu_has()),
            other => panic!("avx512: {other:?}"),
        }
        assert!(kernels_for(Isa::Neon).is_none());
    }
}

#[test]
fn this_x86_machine_runs_the_avx2_kernels_in_tests() {
    // The brief's machine has AVX2; if it ever does not, the agreement tests would only
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
    for ty in kiln_quant::supported_types() {
        assert_eq!(isa_of("dot", ty), Isa::Avx2, "dot {ty}");
        assert_eq!(isa_of("dot4", ty), Isa::Avx2, "dot4 {ty}");
        assert_eq!(isa_of("dotr4", ty), Isa::Avx2, "dotr4 {ty}");
        let want = if ty == GgmlType::F32 {
            Isa::Scalar
        } else {
            Isa::Avx2
        };
        assert_eq!(isa_of("dequantize", ty), want, "dequantize {ty}");
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
    let exe = std::env::current_exe().expect("test binary");
    let out = std::process::Command::new(exe)
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
