//! `cargo xtask`: the project's single gate and home of its suites.
//!
//! Each subcommand lives in its own module with a `run(args)` entry point; `main` only
//! dispatches on the first argument.

mod ci;
mod models;

use std::process::ExitCode;

/// What went wrong in a task; printed once by `main`.
#[derive(Debug, thiserror::Error)]
pub enum XtaskError {
    #[error("unknown command '{command}'\n\n{USAGE}")]
    UnknownCommand { command: String },
    #[error("{command}: {message}\n\n{USAGE}")]
    BadArguments {
        command: &'static str,
        message: String,
    },
    #[error("step '{step}' failed: {detail}")]
    StepFailed { step: &'static str, detail: String },
    #[error("could not fetch: {}", names.join(", "))]
    ModelsFailed { names: Vec<String> },
}

const USAGE: &str = "\
usage: cargo xtask <command> [args]

commands:
  ci [--skip STEP]...          the gate: format, lint, models, test (release)
  models [--quiet] [NAME...]   fetch the known models (all when no NAME) into the cache";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((command, rest)) = args.split_first() else {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    };
    let result = match command.as_str() {
        "ci" => ci::run(rest),
        "models" => models::run(rest),
        "help" | "-h" | "--help" => {
            println!("{USAGE}");
            Ok(())
        }
        other => Err(XtaskError::UnknownCommand {
            command: other.to_string(),
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}
