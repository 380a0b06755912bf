//! `cargo xtask ci`: the single gate. The aarch64 (NEON) build check and kiln-quant's tests
//! under qemu-user (installing the Rust target, the cross linker and qemu first when they
//! are missing, and failing when they cannot be had), formatting, lints, the real models,
//! then every test in the `ci` profile (release optimisation without LTO: model-level tests
//! need optimised code).

use std::process::Command;

use crate::XtaskError;
use crate::step::run_step;

/// One step of the gate: a cargo invocation with a name for the report.
struct Step {
    name: &'static str,
    args: &'static [&'static str],
}

const STEPS: &[Step] = &[
    Step {
        name: "format",
        args: &["fmt", "--all", "--", "--check"],
    },
    Step {
        name: "lint",
        args: &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--profile",
            "ci",
            "--",
            "-D",
            "warnings",
        ],
    },
    Step {
        name: "models",
        args: &[
            "run",
            "--profile",
            "ci",
            "--quiet",
            "--package",
            "xtask",
            "--",
            "models",
        ],
    },
    Step {
        name: "test",
        args: &["test", "--workspace", "--profile", "ci"],
    },
];

/// Runs the gate, leaving out the steps named in `skip`.
pub fn run(skip: &[String]) -> Result<(), XtaskError> {
    let skip: Vec<&str> = skip.iter().map(String::as_str).collect();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    if skip.contains(&"neon") {
        eprintln!("xtask ci: skipping neon");
    } else {
        neon_check(&cargo)?;
    }
    if skip.contains(&"test-aarch64") {
        eprintln!("xtask ci: skipping test-aarch64");
    } else {
        crate::aarch64::ci_step(&cargo)?;
    }
    for step in STEPS {
        if skip.contains(&step.name) {
            eprintln!("xtask ci: skipping {}", step.name);
            continue;
        }
        eprintln!("xtask ci: {} (cargo {})", step.name, step.args.join(" "));
        run_step(step.name, step.name, Command::new(&cargo).args(step.args))?;
    }
    Ok(())
}

/// The aarch64 target kiln-quant's NEON code is checked for.
const AARCH64: &str = "aarch64-unknown-linux-gnu";

/// `cargo check --target aarch64-unknown-linux-gnu -p kiln-quant`: that the kernels crate
/// (its `cfg(target_arch)` gates, the aarch64 dispatch) builds for ARM. Under a minute once
/// the dependencies are cached. What it needs is installed first when missing
/// ([`crate::aarch64::ensure_tools`]); the gate fails, not skips, when that cannot be done.
/// The kernel tests under qemu-user follow it (`crate::aarch64`, also
/// `cargo xtask test-aarch64`).
fn neon_check(cargo: &str) -> Result<(), XtaskError> {
    crate::aarch64::ensure_tools()?;
    eprintln!("xtask ci: neon (cargo check --target {AARCH64} -p kiln-quant)");
    run_step(
        "neon",
        "neon",
        Command::new(cargo).args(["check", "--target", AARCH64, "--package", "kiln-quant"]),
    )
}
