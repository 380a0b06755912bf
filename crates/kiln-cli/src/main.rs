//! The `kiln` command. Thin: parses arguments and composes the crates.

mod args;
mod bench;
mod chat;
mod error;
mod generate;
mod inspect;
mod perplexity;
mod quantize;
mod samples;
mod serve;
mod threads;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::error::CliError;

/// Kiln: run large language models from GGUF files on CPUs.
#[derive(Parser, Debug)]
#[command(name = "kiln", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Generate text from a prompt, streaming it to stdout.
    Generate(generate::GenerateArgs),
    /// Print a GGUF file's metadata and tensor table.
    Inspect {
        /// The GGUF file, or a known model name.
        file: String,
        /// Print long values (chat templates, arrays) in full.
        #[arg(long)]
        full: bool,
    },
    /// Prompt-processing and generation speed, printed like llama-bench (`-o md|json`).
    Bench(bench::BenchArgs),
    /// Perplexity of a text file (as llama-perplexity), and KL divergence against saved
    /// reference logits.
    Perplexity(perplexity::PerplexityArgs),
    /// Chat with the model: reads messages line by line from stdin (a terminal or a
    /// pipe), streams each reply, and keeps the conversation within the context.
    Chat(chat::ChatCommandArgs),
    /// Write a GGUF with its weight matrices quantized to another type (Q4_0 … Q8_0,
    /// Q2_K … Q6_K, IQ4_NL, IQ4_XS, F16, BF16, F32), keeping metadata and tokenizer.
    Quantize(quantize::QuantizeArgs),
    /// Serve the model over HTTP with an OpenAI-compatible API (`/v1/completions`,
    /// `/v1/chat/completions`, SSE streaming, `/metrics`); see docs/serving.md.
    Serve(serve::ServeArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result: Result<(), CliError> = match cli.command {
        Command::Generate(args) => generate::run(args),
        Command::Perplexity(args) => perplexity::run(args),
        Command::Chat(args) => chat::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Quantize(args) => quantize::run(args),
        Command::Inspect { file, full } => (|| {
            let path = kiln_hub::resolve(&file)?;
            let stdout = std::io::stdout();
            inspect::run(&path, full, &mut stdout.lock())?;
            Ok(())
        })(),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
