//! `cargo xtask test-aarch64`: kiln-quant's tests built for aarch64 and run under qemu-user,
//! twice: on a CPU model with the dot-product extension (`-cpu max`: the `sdot` kernels) and
//! on one without (`-cpu cortex-a53`: the widening-multiply kernels). Each run checks every
//! NEON kernel against the scalar oracle bit for bit (tests/kernels_agree.rs) and that the
//! CPU model gave the expected `dotprod` detection (tests/isa.rs).
//!
//! Needs the Rust target, the cross linker `aarch64-linux-gnu-gcc` (its sysroot in
//! `/usr/aarch64-linux-gnu`) and `qemu-aarch64`. `cargo xtask ci` runs it when all are
//! present and prints why it skipped it otherwise; `test-aarch64` itself fails without them.
//! Only kiln-quant's kernel-level tests run (model-level tests are not emulated).

use std::path::Path;
use std::process::Command;

use crate::XtaskError;

const TARGET: &str = "aarch64-unknown-linux-gnu";
const LINKER: &str = "aarch64-linux-gnu-gcc";
const QEMU: &str = "qemu-aarch64";
const SYSROOT: &str = "/usr/aarch64-linux-gnu";

/// (qemu CPU model, whether it has `dotprod`).
const CPUS: [(&str, bool); 2] = [("max", true), ("cortex-a53", false)];

/// The test targets run under emulation: the unit tests and the kernel-level suites.
const TESTS: &[&str] = &[
    "--lib",
    "--test",
    "kernels_agree",
    "--test",
    "isa",
    "--test",
    "matmul",
];

pub fn run(args: &[String]) -> Result<(), XtaskError> {
    if let Some(a) = args.first() {
        return Err(XtaskError::BadArguments {
            command: "test-aarch64",
            message: format!("unknown argument '{a}' (it takes none)"),
        });
    }
    missing_tool().map_or(Ok(()), |why| {
        Err(XtaskError::StepFailed {
            step: "test-aarch64",
            detail: why,
        })
    })?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    test_under_qemu(&cargo)
}

/// The `cargo xtask ci` step: the qemu tests, or a "skipped: …" line saying what is missing.
pub fn ci_step(cargo: &str) -> Result<(), XtaskError> {
    if let Some(why) = missing_tool() {
        eprintln!("xtask ci: test-aarch64 skipped: {why}");
        return Ok(());
    }
    test_under_qemu(cargo)
}

/// What is missing to build and emulate aarch64 tests, if anything.
fn missing_tool() -> Option<String> {
    let on_path = |prog: &str| {
        Command::new(prog)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    let target_installed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .is_some_and(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .any(|l| l.trim() == TARGET)
        });
    if !target_installed {
        Some(format!(
            "the Rust target {TARGET} is not installed (rustup target add {TARGET})"
        ))
    } else if !on_path(LINKER) {
        Some(format!(
            "no cross linker {LINKER} on PATH (apt install gcc-aarch64-linux-gnu)"
        ))
    } else if !Path::new(SYSROOT).is_dir() {
        Some(format!("no aarch64 sysroot at {SYSROOT}"))
    } else if !on_path(QEMU) {
        Some(format!("no {QEMU} on PATH (apt install qemu-user)"))
    } else {
        None
    }
}

fn test_under_qemu(cargo: &str) -> Result<(), XtaskError> {
    let var = |what: &str| {
        format!(
            "CARGO_TARGET_{}_{what}",
            TARGET.replace('-', "_").to_uppercase()
        )
    };
    for (cpu, dotprod) in CPUS {
        let runner = format!("{QEMU} -L {SYSROOT} -cpu {cpu}");
        eprintln!(
            "xtask: test-aarch64 on qemu -cpu {cpu} (dotprod {}): cargo test --profile ci \
             -p kiln-quant --target {TARGET} {}",
            if dotprod { "yes" } else { "no" },
            TESTS.join(" ")
        );
        crate::ci::run_step(
            "test-aarch64",
            &format!("test-aarch64 on qemu -cpu {cpu}"),
            Command::new(cargo)
                .args(["test", "--profile", "ci", "--package", "kiln-quant"])
                .args(["--target", TARGET])
                .args(TESTS)
                .env(var("LINKER"), LINKER)
                .env(var("RUNNER"), &runner)
                .env("KILN_EXPECT_DOTPROD", if dotprod { "1" } else { "0" }),
        )?;
    }
    Ok(())
}
