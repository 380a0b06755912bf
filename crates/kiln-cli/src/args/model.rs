//! Model arguments: `--model PATH|DIR|NAME --quantize TYPE`, and loading what they name —
//! a GGUF file (weights and tokenizer from it) or a Hugging Face directory (`config.json`,
//! safetensors, `tokenizer.json`).

use std::sync::Arc;

use kiln_format::{GgmlType, GgufFile};
use kiln_model::{LoadOptions, Model, quantize_types};
use kiln_tokenizer::Tokenizer;

use crate::error::CliError;

#[derive(clap::Args, Debug, Clone)]
pub struct ModelArgs {
    /// A GGUF file, a Hugging Face model directory (config.json + safetensors), or a known
    /// model name (smollm2-135m, gemma3-270m, qwen2.5-coder-0.5b).
    #[arg(long, short = 'm', default_value = kiln_hub::DEFAULT_MODEL)]
    pub model: String,
    /// Quantize float (F32/F16/BF16) weight matrices on load: q8_0, q4_0 or q4_k.
    #[arg(long, value_parser = parse_quantize)]
    pub quantize: Option<GgmlType>,
}

/// A loaded model with the tokenizer from the same source.
pub struct Loaded {
    pub model: Arc<Model>,
    pub tokenizer: Tokenizer,
}

fn parse_quantize(s: &str) -> Result<GgmlType, String> {
    quantize_types()
        .into_iter()
        .find(|t| t.name().eq_ignore_ascii_case(s))
        .ok_or_else(|| {
            let names: Vec<String> = quantize_types()
                .iter()
                .map(|t| t.name().to_ascii_lowercase())
                .collect();
            format!("cannot quantize to '{s}'; supported: {}", names.join(", "))
        })
}

impl ModelArgs {
    pub fn load_options(&self) -> LoadOptions {
        LoadOptions {
            quantize: self.quantize,
        }
    }

    /// Resolves and loads the model and its tokenizer. Loader notes (quantization
    /// fallbacks) go to stderr.
    pub fn load(&self) -> Result<Loaded, CliError> {
        let path = kiln_hub::resolve(&self.model)?;
        let options = self.load_options();
        let loaded = if path.is_dir() {
            let model = Arc::new(Model::from_hf_dir(&path, &options)?);
            let tokenizer = Tokenizer::from_hf_dir(&path)?;
            Loaded { model, tokenizer }
        } else {
            let file = Arc::new(GgufFile::open(&path)?);
            // The model first: an unsupported architecture is refused as such, not as a
            // tokenizer the file happens to lack.
            let model = Arc::new(Model::from_gguf_with(Arc::clone(&file), &options)?);
            let tokenizer = Tokenizer::from_gguf(file.metadata())?;
            Loaded { model, tokenizer }
        };
        for note in loaded.model.load_notes() {
            eprintln!("note: {note}");
        }
        Ok(loaded)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantize_names_parse_case_insensitively_and_unknown_ones_list_the_choices() {
        assert_eq!(parse_quantize("q4_k"), Ok(GgmlType::Q4_K));
        assert_eq!(parse_quantize("Q8_0"), Ok(GgmlType::Q8_0));
        assert_eq!(parse_quantize("iq4_xs"), Ok(GgmlType::IQ4_XS));
        let err = parse_quantize("q8_1").unwrap_err();
        assert!(
            err.contains("'q8_1'") && err.contains("q4_k") && err.contains("q2_k"),
            "{err}"
        );
    }
}
