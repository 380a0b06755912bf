//! `cargo xtask fuzz [--target T]... [--seconds N] [--rss-mb N] [-- LIBFUZZER_ARGS]`: runs each cargo-fuzz
//! target of `fuzz/` under libFuzzer for a bounded time and prints a table of executions,
//! coverage and crashes (the figures docs/fuzzing.md records).
//!
//! Each target reads its committed seeds (`fuzz/corpus/<t>/`, never written) and grows a
//! scratch corpus in `fuzz/work/<t>/` (git-ignored), so runs add up across invocations
//! without touching the committed files. A crash leaves its input in
//! `fuzz/artifacts/<t>/`; copy it to `fuzz/regressions/<t>/` once fixed, and
//! `cargo test -p kiln-fuzz` replays it from then on.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::XtaskError;

const HOW_TO_INSTALL: &str = "cargo-fuzz needs the nightly toolchain and the cargo-fuzz \
     subcommand: `rustup toolchain install nightly` then `cargo install cargo-fuzz`";

/// `cargo xtask fuzz`: run the cargo-fuzz targets for a bounded time each.
#[derive(clap::Args, Debug)]
pub struct FuzzArgs {
    /// Targets to run, comma-separated or repeated (default: all).
    #[arg(long = "target", short = 't', value_delimiter = ',')]
    targets: Vec<String>,
    /// Seconds per target.
    #[arg(long, short = 's', default_value_t = 60)]
    seconds: u64,
    /// libFuzzer's RSS limit, MB.
    #[arg(long, default_value_t = 2048)]
    rss_mb: u64,
    /// Passed to libFuzzer as they are (after `--`).
    #[arg(last = true)]
    extra: Vec<String>,
}

/// What one run found.
struct Outcome {
    target: String,
    execs: Option<u64>,
    cov: Option<u64>,
    features: Option<u64>,
    corpus: Option<String>,
    crashed: bool,
    artifact: Option<String>,
    wall_s: f64,
}

/// The targets to run: the named ones (each must exist) or all of them.
fn chosen(a: &FuzzArgs, all: &[String]) -> Result<Vec<String>, XtaskError> {
    if a.targets.is_empty() {
        return Ok(all.to_vec());
    }
    for t in &a.targets {
        if !all.iter().any(|x| x == t) {
            return Err(XtaskError::BadArguments {
                command: "fuzz",
                message: format!("unknown target '{t}'; the targets are {}", all.join(", ")),
            });
        }
    }
    Ok(a.targets.clone())
}

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

/// The targets: one `fuzz/fuzz_targets/<name>.rs` each.
fn targets() -> Result<Vec<String>, XtaskError> {
    let dir = fuzz_dir().join("fuzz_targets");
    let entries = std::fs::read_dir(&dir).map_err(|e| XtaskError::StepFailed {
        step: "fuzz",
        detail: format!("cannot list {}: {e}", dir.display()),
    })?;
    let mut v: Vec<String> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_suffix(".rs").map(str::to_owned)
        })
        .collect();
    v.sort();
    Ok(v)
}

fn cargo_fuzz_available() -> bool {
    Command::new("cargo")
        .args(["+nightly", "fuzz", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The last libFuzzer status line's `#N`, `cov:`, `ft:` and `corp:` fields.
fn stats(log: &str) -> (Option<u64>, Option<u64>, Option<u64>, Option<String>) {
    let mut out = (None, None, None, None);
    for line in log.lines().filter(|l| l.starts_with('#')) {
        let mut words = line.split_whitespace();
        let execs = words.next().and_then(|w| w[1..].parse().ok());
        if execs.is_none() {
            continue;
        }
        out.0 = execs;
        let rest: Vec<&str> = line.split_whitespace().collect();
        let after = |key: &str| {
            rest.iter()
                .position(|w| *w == key)
                .and_then(|i| rest.get(i + 1))
        };
        if let Some(c) = after("cov:").and_then(|w| w.parse().ok()) {
            out.1 = Some(c);
        }
        if let Some(f) = after("ft:").and_then(|w| w.parse().ok()) {
            out.2 = Some(f);
        }
        if let Some(c) = after("corp:") {
            out.3 = Some((*c).to_string());
        }
    }
    // "Done N runs in S second(s)" is the exact count when the run ends normally.
    if let Some(n) = log.lines().rev().find_map(|l| {
        l.strip_prefix("Done ")?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    }) {
        out.0 = Some(n);
    }
    out
}

fn run_one(target: &str, o: &FuzzArgs) -> Result<Outcome, XtaskError> {
    let dir = fuzz_dir();
    let work = dir.join("work").join(target);
    std::fs::create_dir_all(&work).map_err(|e| XtaskError::StepFailed {
        step: "fuzz",
        detail: format!("cannot create {}: {e}", work.display()),
    })?;
    let seeds = dir.join("corpus").join(target);
    let log_path = work.with_extension("log");
    println!(
        "== {target}: build, then {} s (seeds {}; libFuzzer's output goes to {})",
        o.seconds,
        seeds.display(),
        log_path.display()
    );
    let started = Instant::now();
    let output = Command::new("cargo")
        .current_dir(dir.join(".."))
        .args(["+nightly", "fuzz", "run", target])
        .arg(&work)
        .arg(&seeds)
        .arg("--")
        .arg(format!("-max_total_time={}", o.seconds))
        .arg(format!("-rss_limit_mb={}", o.rss_mb))
        .arg("-timeout=20")
        .arg("-print_final_stats=1")
        .args(&o.extra)
        .stdout(Stdio::inherit())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| XtaskError::StepFailed {
            step: "fuzz",
            detail: format!("cannot run cargo +nightly fuzz: {e}"),
        })?;
    let log = String::from_utf8_lossy(&output.stderr);
    // The full libFuzzer log stays beside the work corpus for reading after the table.
    let _ = std::fs::write(&log_path, log.as_bytes());
    let (execs, cov, features, corpus) = stats(&log);
    let artifact = log
        .lines()
        .find_map(|l| l.split("Test unit written to ").nth(1))
        .map(str::to_owned);
    let crashed = !output.status.success();
    if crashed {
        let tail: Vec<&str> = log.lines().rev().take(30).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        eprintln!(
            "{target}: the run failed; log {}\n{}",
            log_path.display(),
            tail.join("\n")
        );
    }
    Ok(Outcome {
        target: target.to_string(),
        execs,
        cov,
        features,
        corpus,
        crashed,
        artifact,
        wall_s: started.elapsed().as_secs_f64(),
    })
}

pub fn run(o: &FuzzArgs) -> Result<(), XtaskError> {
    let all = targets()?;
    let chosen = chosen(o, &all)?;
    if !cargo_fuzz_available() {
        return Err(XtaskError::StepFailed {
            step: "fuzz",
            detail: HOW_TO_INSTALL.to_string(),
        });
    }
    let mut outcomes = Vec::new();
    for t in &chosen {
        outcomes.push(run_one(t, o)?);
    }
    let show = |v: Option<u64>| v.map_or_else(|| "?".to_string(), |n| n.to_string());
    println!("\n| target | seconds | executions | cov | ft | corpus | result |");
    println!("|---|---:|---:|---:|---:|---|---|");
    for r in &outcomes {
        let result = match (&r.artifact, r.crashed) {
            (Some(a), _) => format!("CRASH: {a}"),
            (None, true) => "FAILED (see log)".to_string(),
            (None, false) => "no crash".to_string(),
        };
        println!(
            "| {} | {:.0} | {} | {} | {} | {} | {result} |",
            r.target,
            r.wall_s,
            show(r.execs),
            show(r.cov),
            show(r.features),
            r.corpus.as_deref().unwrap_or("?"),
        );
    }
    let failed: Vec<&str> = outcomes
        .iter()
        .filter(|r| r.crashed)
        .map(|r| r.target.as_str())
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(XtaskError::StepFailed {
            step: "fuzz",
            detail: format!(
                "{} crashed; fix, then keep each input in fuzz/regressions/<target>/",
                failed.join(", ")
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libfuzzer_final_stats_are_read_from_the_log() {
        let log = "INFO: Seed: 1\n#2\tINITED cov: 10 ft: 11 corp: 3/40b exec/s: 0 rss: 30Mb\n\
                   #4096\tpulse  cov: 812 ft: 2203 corp: 140/9Kb lim: 43 exec/s: 2048 rss: 40Mb\n\
                   #9000\tDONE   cov: 830 ft: 2301 corp: 150/10Kb lim: 43 exec/s: 3000 rss: 41Mb\n\
                   Done 9000 runs in 3 second(s)\n";
        let (execs, cov, ft, corp) = stats(log);
        assert_eq!(execs, Some(9000));
        assert_eq!(cov, Some(830));
        assert_eq!(ft, Some(2301));
        assert_eq!(corp.as_deref(), Some("150/10Kb"));
    }

    #[test]
    fn unknown_targets_are_refused_with_the_list() {
        let all = vec!["gguf".to_string(), "grammar".to_string()];
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            fuzz: FuzzArgs,
        }
        let a = <Cli as clap::Parser>::try_parse_from(["fuzz", "--target", "gguff"])
            .expect("the flags parse")
            .fuzz;
        let err = chosen(&a, &all)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains("gguff") && err.contains("gguf, grammar"),
            "{err}"
        );
    }
}
