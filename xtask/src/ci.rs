//! `cargo xtask ci`: the single gate. The aarch64 (NEON) build check and kiln-quant's tests
//! under qemu-user (installing the Rust target, the cross linker and qemu first when they
//! are missing, and failing when they cannot be had), the Python modules of the tests'
//! independent clients (installed with pip when missing), formatting, lints, the real models,
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
    if skip.contains(&"python") {
        eprintln!("xtask ci: skipping python");
    } else {
        ensure_python_modules()?;
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

/// Python modules the tests run independent clients with (kiln-server's `tests/python/`
/// and `tests/clients/`, and `deploy/check_deploy.py`), and the router kiln-cli's cluster
/// test puts in front of replicas: import name, PyPI name.
const PYTHON_MODULES: &[(&str, &str)] = &[
    ("prometheus_client", "prometheus_client"),
    ("zmq", "pyzmq"),
    ("msgpack", "msgpack"),
    ("yaml", "pyyaml"),
    ("openai", "openai"),
    ("anthropic", "anthropic"),
    ("jsonschema", "jsonschema"),
    ("vllm_router.launch_router", "vllm-router"),
];

/// Installs with `python3 -m pip install` the modules of [`PYTHON_MODULES`] that do not
/// import; fails, naming them, when that cannot be done.
fn ensure_python_modules() -> Result<(), XtaskError> {
    let fail = |detail: String| XtaskError::StepFailed {
        step: "python",
        detail,
    };
    let imports = |m: &str| {
        Command::new("python3")
            .args(["-c", &format!("import {m}")])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    let missing: Vec<&str> = PYTHON_MODULES
        .iter()
        .filter(|(m, _)| !imports(m))
        .map(|(_, pkg)| *pkg)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    eprintln!("xtask ci: python3 -m pip install {}", missing.join(" "));
    let status = Command::new("python3")
        .args(["-m", "pip", "install", "--quiet"])
        .args(&missing)
        .status()
        .map_err(|e| fail(format!("cannot run python3 -m pip: {e}")))?;
    let still: Vec<&str> = PYTHON_MODULES
        .iter()
        .filter(|(m, _)| !imports(m))
        .map(|(_, pkg)| *pkg)
        .collect();
    if !status.success() || !still.is_empty() {
        return Err(fail(format!(
            "pip install exited with {status}; still missing: {}",
            still.join(", ")
        )));
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
