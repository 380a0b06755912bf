//! `cargo xtask test-aarch64`: kiln-quant's tests built for aarch64 and run under qemu-user,
//! twice: on a CPU model with the dot-product extension (`-cpu max`: the `sdot` kernels) and
//! on one without (`-cpu cortex-a53`: the widening-multiply kernels). Each run checks every
//! NEON kernel against the scalar oracle bit for bit (tests/kernels_agree.rs) and that the
//! CPU model gave the expected `dotprod` detection (tests/isa.rs).
//!
//! Needs the Rust target, the cross linker `aarch64-linux-gnu-gcc` with its sysroot's C
//! headers and startup files in `/usr/aarch64-linux-gnu` (dependencies build C for the
//! target: `ring`) and `qemu-aarch64`. [`ensure_tools`] installs whichever is missing
//! (`rustup target add`; Debian's `gcc-aarch64-linux-gnu`, `libc6-dev-arm64-cross` — only
//! recommended by the compiler's package, so not installed with it here — and `qemu-user`
//! through `apt-get`, with `sudo` when not root) and says what it installed; both `cargo xtask ci`
//! and `test-aarch64` fail, never skip, when that is not possible — a fresh machine checks
//! the NEON kernels like any other. Only kiln-quant's kernel-level tests run (model-level
//! tests are not emulated).

use std::path::Path;
use std::process::Command;

use crate::XtaskError;

const TARGET: &str = "aarch64-unknown-linux-gnu";
const LINKER: &str = "aarch64-linux-gnu-gcc";
const QEMU: &str = "qemu-aarch64";
const SYSROOT: &str = "/usr/aarch64-linux-gnu";
/// A file of the sysroot's C library headers (`libc6-dev-arm64-cross`).
const SYSROOT_HEADER: &str = "/usr/aarch64-linux-gnu/include/stdio.h";

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
    ensure_tools()?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    test_under_qemu(&cargo)
}

/// The `cargo xtask ci` step: installs what is missing, then runs the NEON kernel tests
/// under qemu-user; fails when the tools cannot be had.
pub fn ci_step(cargo: &str) -> Result<(), XtaskError> {
    ensure_tools()?;
    eprintln!(
        "xtask ci: test-aarch64: kiln-quant's NEON kernel tests built for {TARGET} and run \
         under qemu-user ({QEMU}), with and without dotprod"
    );
    test_under_qemu(cargo)
}

/// Whether `rustup` lists the aarch64 target as installed.
pub fn target_installed() -> bool {
    Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .is_some_and(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .any(|l| l.trim() == TARGET)
        })
}

fn on_path(prog: &str) -> bool {
    Command::new(prog)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Installs whatever the aarch64 steps lack — the Rust target with `rustup target add`, the
/// cross linker and its sysroot (`gcc-aarch64-linux-gnu`, `libc6-dev-arm64-cross`) and
/// `qemu-aarch64` (`qemu-user`) with `apt-get install -y` (through `sudo -n` when not
/// root) — and prints what it
/// installed. Fails with [`XtaskError::StepFailed`] naming what is still missing when an
/// install is impossible or did not provide the tool. Does nothing when all are present.
pub fn ensure_tools() -> Result<(), XtaskError> {
    let fail = |detail: String| XtaskError::StepFailed {
        step: "aarch64-tools",
        detail,
    };
    let mut installed = Vec::new();
    if !target_installed() {
        eprintln!("xtask ci: the Rust target {TARGET} is missing: rustup target add {TARGET}");
        let status = Command::new("rustup")
            .args(["target", "add", TARGET])
            .status()
            .map_err(|e| fail(format!("cannot run rustup to add {TARGET}: {e}")))?;
        if !status.success() {
            return Err(fail(format!(
                "rustup target add {TARGET} exited with {status}"
            )));
        }
        installed.push(format!("the Rust target {TARGET} (rustup)"));
    }
    let mut packages = Vec::new();
    if !on_path(LINKER) || !Path::new(SYSROOT).is_dir() {
        packages.push("gcc-aarch64-linux-gnu");
    }
    if !Path::new(SYSROOT_HEADER).is_file() {
        packages.push("libc6-dev-arm64-cross");
    }
    if !on_path(QEMU) {
        packages.push("qemu-user");
    }
    if !packages.is_empty() {
        apt_install(&packages).map_err(fail)?;
        installed.push(format!("{} (apt-get)", packages.join(", ")));
    }
    if let Some(why) = missing_tool() {
        return Err(fail(format!("{why}; installing did not provide it")));
    }
    if !installed.is_empty() {
        eprintln!("xtask ci: installed {}", installed.join("; "));
    }
    Ok(())
}

/// `apt-get install -y PACKAGES` (after `apt-get update` when the first try fails: a fresh
/// machine may have no package lists), as root or through `sudo -n`.
fn apt_install(packages: &[&str]) -> Result<(), String> {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    let apt = |args: &[&str]| -> Result<(), String> {
        let mut cmd = if root {
            Command::new("apt-get")
        } else {
            let mut c = Command::new("sudo");
            c.args(["-n", "apt-get"]);
            c
        };
        cmd.args(args).env("DEBIAN_FRONTEND", "noninteractive");
        let shown = format!(
            "{}apt-get {}",
            if root { "" } else { "sudo -n " },
            args.join(" ")
        );
        eprintln!("xtask ci: {shown}");
        let status = cmd
            .status()
            .map_err(|e| format!("cannot run {shown}: {e}"))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("{shown} exited with {status}"))
        }
    };
    let mut install = vec!["install", "-y", "--no-install-recommends"];
    install.extend_from_slice(packages);
    if apt(&install).is_ok() {
        return Ok(());
    }
    apt(&["update"])?;
    apt(&install)
}

/// What is missing to build and emulate aarch64 tests, if anything.
fn missing_tool() -> Option<String> {
    if !target_installed() {
        Some(format!(
            "the Rust target {TARGET} is not installed (rustup target add {TARGET})"
        ))
    } else if !on_path(LINKER) {
        Some(format!(
            "no cross linker {LINKER} on PATH (apt install gcc-aarch64-linux-gnu)"
        ))
    } else if !Path::new(SYSROOT).is_dir() {
        Some(format!("no aarch64 sysroot at {SYSROOT}"))
    } else if !Path::new(SYSROOT_HEADER).is_file() {
        Some(format!(
            "no aarch64 C library headers ({SYSROOT_HEADER}; apt install libc6-dev-arm64-cross)"
        ))
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
        crate::step::run_step(
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
