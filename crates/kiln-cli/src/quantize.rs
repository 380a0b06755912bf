//! `kiln quantize INPUT OUTPUT --type T`: writes a GGUF with every weight matrix converted
//! to `T` (any of `kiln_quant::quantize_types()` with ggml's quantizers, or F32/F16/BF16),
//! keeping the metadata and the tokenizer (see `kiln_bench::convert`); from a GGUF file or
//! a Hugging Face safetensors directory (`kiln_bench::convert::convert_hf_dir`).

use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use kiln_format::{GgmlType, GgufFile};

use crate::error::CliError;

#[derive(Args, Debug)]
pub struct QuantizeArgs {
    /// The source: a GGUF file (any weight types Kiln reads), a known model name, or a
    /// Hugging Face directory (config.json, *.safetensors, tokenizer.json) of a llama,
    /// mistral, qwen2 or gemma3 model, converted as llama.cpp's convert_hf_to_gguf.py does
    /// (tensor names, metadata, llama Q/K permutation, Gemma's 1 + w norms, the vocabulary).
    input: String,
    /// The GGUF file to write.
    output: PathBuf,
    /// Target type of the weight matrices: q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k,
    /// q5_k, q6_k, iq4_nl, iq4_xs (ggml's quantizers, blocks equal to llama-quantize's),
    /// f16, bf16 or f32.
    #[arg(long = "type", short = 't', value_parser = parse_type)]
    ty: GgmlType,
    /// Print one line per tensor (name, stored type → written type).
    #[arg(long, short = 'v')]
    verbose: bool,
}

fn parse_type(s: &str) -> Result<GgmlType, String> {
    let types = kiln_bench::convert::convert_types();
    types
        .iter()
        .copied()
        .find(|t| t.name().eq_ignore_ascii_case(s))
        .ok_or_else(|| {
            let names: Vec<String> = types
                .iter()
                .map(|t| t.name().to_ascii_lowercase())
                .collect();
            format!("cannot quantize to '{s}'; supported: {}", names.join(", "))
        })
}

pub fn run(args: QuantizeArgs) -> Result<(), CliError> {
    let input = kiln_hub::resolve(&args.input)?;
    let started = Instant::now();
    let (plan, bytes) = if input.is_dir() {
        let done = kiln_bench::convert::convert_hf_dir(&input, args.ty, &args.output)?;
        if !done.tokenizer {
            eprintln!(
                "warning: {} has no tokenizer.json: the GGUF has no tokenizer (Kiln runs it \
                 from token ids; llama.cpp does not load it)",
                input.display()
            );
        }
        (done.plan, done.bytes)
    } else {
        let src = GgufFile::open(&input)?;
        kiln_bench::convert::convert_model(&src, args.ty, &args.output)?
    };
    let mut counts: Vec<(GgmlType, usize)> = Vec::new();
    for t in &plan {
        if args.verbose {
            eprintln!("{:<40} {:>6} -> {}", t.name, t.from.name(), t.to.name());
        }
        match counts.iter_mut().find(|(ty, _)| *ty == t.to) {
            Some((_, n)) => *n += 1,
            None => counts.push((t.to, 1)),
        }
    }
    let summary: Vec<String> = counts
        .iter()
        .map(|(ty, n)| format!("{n} {}", ty.name()))
        .collect();
    eprintln!(
        "wrote {} ({:.1} MiB, {} tensors: {}) in {:.1} s",
        args.output.display(),
        bytes as f64 / (1024.0 * 1024.0),
        plan.len(),
        summary.join(", "),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_types_parse_case_insensitively_and_unknown_ones_list_the_choices() {
        assert_eq!(parse_type("Q4_K"), Ok(GgmlType::Q4_K));
        assert_eq!(parse_type("f16"), Ok(GgmlType::F16));
        assert_eq!(parse_type("iq4_xs"), Ok(GgmlType::IQ4_XS));
        let err = parse_type("iq2_xxs").unwrap_err();
        assert!(err.contains("q8_0") && err.contains("q4_k"), "{err}");
    }
}
