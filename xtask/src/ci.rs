//! `cargo xtask ci`: the single gate. Formatting, lints, the real models, then every test
//! in release (model-level tests need optimised code).

use std::process::Command;

use crate::XtaskError;

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
            "--release",
            "--",
            "-D",
            "warnings",
        ],
    },
    Step {
        name: "models",
        args: &[
            "run",
            "--release",
            "--quiet",
            "--package",
            "xtask",
            "--",
            "models",
        ],
    },
    Step {
        name: "test",
        args: &["test", "--workspace", "--release"],
    },
];

pub fn run(args: &[String]) -> Result<(), XtaskError> {
    let mut skip: Vec<&str> = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--skip" => match it.next() {
                Some(s) => skip.push(s.as_str()),
                None => {
                    return Err(XtaskError::BadArguments {
                        command: "ci",
                        message: "--skip needs a step name".into(),
                    });
                }
            },
            other => {
                return Err(XtaskError::BadArguments {
                    command: "ci",
                    message: format!("unknown argument '{other}'"),
                });
            }
        }
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    for step in STEPS {
        if skip.contains(&step.name) {
            eprintln!("xtask ci: skipping {}", step.name);
            continue;
        }
        eprintln!("xtask ci: {} (cargo {})", step.name, step.args.join(" "));
        let started = std::time::Instant::now();
        let status =
            Command::new(&cargo)
                .args(step.args)
                .status()
                .map_err(|e| XtaskError::StepFailed {
                    step: step.name,
                    detail: format!("cannot run cargo: {e}"),
                })?;
        if !status.success() {
            return Err(XtaskError::StepFailed {
                step: step.name,
                detail: format!("exited with {status}"),
            });
        }
        eprintln!(
            "xtask ci: {} passed in {:.0} s",
            step.name,
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}
