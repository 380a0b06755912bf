//! `cargo xtask`: the project's single gate and home of its suites.
//!
//! Each subcommand lives in its own module with a `run` entry point taking its parsed
//! options; `main` only parses the command line (clap) and dispatches.

mod aarch64;
mod bench;
mod ci;
mod fuzz;
mod layers;
mod models;
mod soak_driver;
mod step;
mod synth;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// What went wrong in a task; printed once by `main`.
#[derive(Debug, thiserror::Error)]
pub enum XtaskError {
    #[error("{command}: {message}")]
    BadArguments {
        command: &'static str,
        message: String,
    },
    #[error("step '{step}' failed: {detail}")]
    StepFailed { step: &'static str, detail: String },
    #[error("could not fetch: {}", names.join(", "))]
    ModelsFailed { names: Vec<String> },
}

/// Project automation: the gate, the models, the benchmark suites, fuzzing.
#[derive(Parser, Debug)]
#[command(
    name = "cargo xtask",
    after_help = "bench reports: JSON, Markdown and SVG plots under <target>/kiln-bench/"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// The gate: neon (aarch64 check; the target is installed when missing), test-aarch64
    /// (NEON tests under qemu-user; qemu and the cross linker are installed when missing),
    /// format, lint, models, test (release).
    Ci {
        /// A step to leave out (repeatable).
        #[arg(long = "skip", value_name = "STEP")]
        skip: Vec<String>,
    },
    /// kiln-quant's tests for aarch64 under qemu-user, with and without the dotprod
    /// extension (NEON kernels == scalar).
    #[command(name = "test-aarch64")]
    TestAarch64,
    /// Fetch the known models (all when no NAME) into the cache.
    Models(models::ModelsArgs),
    /// The benchmark suites.
    Bench {
        #[command(subcommand)]
        suite: bench::Suite,
    },
    /// Run the cargo-fuzz targets (nightly) for a bounded time each.
    Fuzz(fuzz::FuzzArgs),
    /// Write a random-weight GGUF in the exact shape of a real model, with the tokenizer of
    /// a shipped model of its family (for speed work at 1B–8B; loads in llama.cpp too).
    Synth(synth::SynthArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Ci { skip } => ci::run(skip),
        Command::TestAarch64 => aarch64::run(&[]),
        Command::Models(a) => models::run(a),
        Command::Bench { suite } => bench::run(suite),
        Command::Fuzz(a) => fuzz::run(a),
        Command::Synth(a) => synth::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_definition_is_consistent() {
        <Cli as clap::CommandFactory>::command().debug_assert();
    }
}
