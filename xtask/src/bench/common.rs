//! What every benchmark suite shares: locating the workspace and its output directory,
//! building and driving the release `kiln` binary, and the small functions of reports and
//! errors. A leaf: it uses no suite.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::XtaskError;
pub fn bad(message: impl Into<String>) -> XtaskError {
    XtaskError::BadArguments {
        command: "bench",
        message: message.into(),
    }
}

pub fn failed(step: &'static str, detail: impl Into<String>) -> XtaskError {
    XtaskError::StepFailed {
        step,
        detail: detail.into(),
    }
}

/// The workspace root (the parent of `xtask/`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// Cargo's target directory: `CARGO_TARGET_DIR` or `<workspace>/target`.
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(d) => {
            let d = PathBuf::from(d);
            if d.is_absolute() {
                d
            } else {
                workspace_root().join(d)
            }
        }
        None => workspace_root().join("target"),
    }
}

/// `<target>/kiln-bench/<suite>`, created.
pub fn out_dir(suite: &str) -> Result<PathBuf, XtaskError> {
    let d = target_dir().join("kiln-bench").join(suite);
    std::fs::create_dir_all(&d)
        .map_err(|e| failed("output", format!("cannot create {}: {e}", d.display())))?;
    Ok(d)
}

/// Builds the release `kiln` binary and returns its path.
pub fn build_kiln() -> Result<Kiln, XtaskError> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    eprintln!("xtask bench: building kiln (release)");
    let status = Command::new(cargo)
        .args(["build", "--release", "--quiet", "--package", "kiln-cli"])
        .current_dir(workspace_root())
        .status()
        .map_err(|e| failed("build", format!("cannot run cargo: {e}")))?;
    if !status.success() {
        return Err(failed("build", format!("cargo build exited with {status}")));
    }
    let bin = target_dir().join("release").join("kiln");
    if !bin.is_file() {
        return Err(failed("build", format!("{} was not built", bin.display())));
    }
    Ok(Kiln { bin })
}

/// The `kiln` binary under test.
pub struct Kiln {
    pub bin: PathBuf,
}

impl Kiln {
    pub fn command(&self) -> Command {
        Command::new(&self.bin)
    }

    /// Whether `kiln <sub> --help` succeeds and mentions every one of `flags`: how the
    /// suites find out which pieces the binary has.
    pub fn supports(&self, sub: &str, flags: &[&str]) -> bool {
        match self.command().args([sub, "--help"]).output() {
            Ok(o) if o.status.success() => {
                let help = String::from_utf8_lossy(&o.stdout);
                flags.iter().all(|f| help.contains(f))
            }
            _ => false,
        }
    }

    /// Runs `kiln args…`, failing with its stderr when it fails.
    pub fn run(&self, step: &'static str, args: &[String]) -> Result<Output, XtaskError> {
        let out = self
            .command()
            .args(args)
            .output()
            .map_err(|e| failed(step, format!("cannot run {}: {e}", self.bin.display())))?;
        if !out.status.success() {
            return Err(failed(
                step,
                format!(
                    "kiln {} exited with {}:\n{}",
                    args.join(" "),
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim_end()
                ),
            ));
        }
        Ok(out)
    }

    /// Runs `kiln args…` and parses its stdout as one JSON value.
    pub fn json<T: serde::de::DeserializeOwned>(
        &self,
        step: &'static str,
        args: &[String],
    ) -> Result<T, XtaskError> {
        let out = self.run(step, args)?;
        serde_json::from_slice(&out.stdout).map_err(|e| {
            failed(
                step,
                format!(
                    "kiln {} printed no JSON ({e}):\n{}",
                    args.join(" "),
                    String::from_utf8_lossy(&out.stdout)
                ),
            )
        })
    }
}

/// Parses a count that must be at least 1 (a clap value parser).
pub fn positive(v: &str) -> Result<usize, String> {
    match v.parse::<usize>() {
        Ok(0) => Err("must be at least 1".to_string()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("'{v}' is not a whole number")),
    }
}

/// Every core the process may use (the default thread count of some suites).
pub fn all_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Writes a file, naming it in the error.
pub fn write(path: &Path, contents: impl AsRef<[u8]>) -> Result<(), XtaskError> {
    std::fs::write(path, contents)
        .map_err(|e| failed("output", format!("cannot write {}: {e}", path.display())))
}

/// The committed text slice the suites use (WikiText-2 test, CC BY-SA; see its SOURCE.md).
pub fn fixture_text() -> PathBuf {
    workspace_root().join("testdata/wikitext-2/wiki.test.head.raw")
}

/// Common header lines of a report.
pub fn report_header(machine: &kiln_bench::Machine) -> String {
    format!(
        "- machine: {}\n- kiln {} ({}), measured {}\n",
        machine.describe(),
        env!("CARGO_PKG_VERSION"),
        git_rev(),
        unix_now()
    )
}

fn git_rev() -> String {
    Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(workspace_root())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map_or_else(
            || "unknown revision".to_string(),
            |o| format!("git {}", String::from_utf8_lossy(&o.stdout).trim()),
        )
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Peak resident set size (`VmHWM`) of a running process, bytes.
pub fn vm_hwm(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines().find_map(|l| {
        let kb: u64 = l
            .strip_prefix("VmHWM:")?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()?;
        Some(kb * 1024)
    })
}

/// What [`run_measured`] saw of a process.
pub struct Measured {
    pub output: Output,
    /// Its peak RSS as last sampled before it exited (`VmHWM` only grows, so this is the
    /// peak unless it rose in the last sampling interval).
    pub peak_rss: Option<u64>,
}

/// Runs `cmd` to the end with its output captured, sampling its peak RSS every 20 ms.
pub fn run_measured(cmd: &mut Command) -> std::io::Result<Measured> {
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
    let pid = child.id();
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut v);
            }
            v
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let mut peak_rss = None;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        peak_rss = vm_hwm(pid).or(peak_rss);
        std::thread::sleep(Duration::from_millis(20));
    };
    let join = |h: std::thread::JoinHandle<Vec<u8>>| h.join().unwrap_or_default();
    Ok(Measured {
        output: Output {
            status,
            stdout: join(out),
            stderr: join(err),
        },
        peak_rss,
    })
}
