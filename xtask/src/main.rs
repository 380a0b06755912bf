//! `cargo xtask`: the project's single gate and home of its suites.
//!
//! Each subcommand lives in its own module with a `run(args)` entry point; `main` only
//! dispatches on the first argument.

mod aarch64;
mod bench;
mod bench_convoy;
mod bench_kl;
mod bench_latency;
mod bench_perf;
mod bench_soak;
mod ci;
mod fuzz;
mod models;
mod soak_driver;

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
  ci [--skip STEP]...          the gate: neon (aarch64 check, skipped if the target is
                               absent), test-aarch64 (skipped without qemu and the cross
                               linker), format, lint, models, test (release)
  test-aarch64                 kiln-quant's tests for aarch64 under qemu-user, with and
                               without the dotprod extension (NEON kernels == scalar)
  models [--quiet] [NAME...]   fetch the known models (all when no NAME) into the cache
  bench perf [--models A,B] [--threads 1,2] [--reps N] [-p N] [-n N] [--llama-bench PATH]
             [--no-latency]    pp/tg tokens/s table (mean ± sd) and streaming latency
  bench kl [--model M] [--chunks N] [--types T,..] [--kv T,..] [--threads N] [--text FILE]
           [--keep-files]      quality: KL divergence per weight type and KV type vs f32,
                               thresholds = llama.cpp's figures on the same files × margin
  bench convoy [--model M] [--scale F] [--shorts N] [--longs N] [--clients N] [--threads N]
             [--kv-memory SIZE] serving: short requests alone vs mixed with long ones
                               through `kiln serve` (TTFT/ITL p50/p99, HOL, KV fragmentation)
  bench soak [--clients 64] [--mixed 16] [--seconds 120] [--warmup 15] [--model M]
             [--threads N] [--seed S]
                               serving under load and faults through `kiln serve`: lost
                               requests (must be 0), greedy answers vs lone references,
                               refusals by limit, RSS, KV blocks at the end, TTFT/ITL
  (bench reports: JSON, Markdown and SVG plots under <target>/kiln-bench/)
  fuzz [--target T,..] [--seconds N] [--rss-mb N] [-- LIBFUZZER_ARGS]
                               run the cargo-fuzz targets (nightly) N s each (default 60)";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((command, rest)) = args.split_first() else {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    };
    let result = match command.as_str() {
        "ci" => ci::run(rest),
        "models" => models::run(rest),
        "bench" => bench::run(rest),
        "fuzz" => fuzz::run(rest),
        "test-aarch64" => aarch64::run(rest),
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
