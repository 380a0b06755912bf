//! Speculative decoding arguments: `--spec ngram|draft --draft-model M --draft-max N`.

use kiln_spec::{DraftModel, DraftSource, SpecConfig, SpecDecoder, SpecMethod};

use crate::args::model::{Loaded, ModelArgs};
use crate::error::CliError;

#[derive(clap::Args, Debug, Clone)]
pub struct SpecArgs {
    /// Speculative decoding: `ngram` (draft from the prompt and text so far) or `draft`
    /// (a draft model with the same vocabulary, --draft-model). Output is unchanged:
    /// greedy is byte-identical, sampling has the same distribution.
    #[arg(long, value_parser = parse_method)]
    pub spec: Option<SpecMethod>,
    /// The draft model for `--spec draft` (a path or known name, as --model).
    #[arg(long)]
    pub draft_model: Option<String>,
    /// The most tokens drafted per step.
    #[arg(long, default_value_t = 16)]
    pub draft_max: usize,
    /// A draft model's draft stops before a token the draft model gives less than this
    /// probability (0: always draft the length the controller asks for) [default: 0.75]
    #[arg(long)]
    pub draft_p_min: Option<f32>,
    /// Shortest and longest n-gram an `ngram` draft matches on.
    #[arg(long, default_value_t = 1)]
    pub ngram_min: usize,
    #[arg(long, default_value_t = 16)]
    pub ngram_max: usize,
    /// Always draft --draft-max tokens (no adaptive length, no pausing).
    #[arg(long)]
    pub spec_fixed: bool,
}

fn parse_method(s: &str) -> Result<SpecMethod, String> {
    SpecMethod::parse(s).map_err(|e| e.to_string())
}

impl SpecArgs {
    /// The settings, checked against each other.
    pub fn config(&self) -> Result<Option<SpecConfig>, CliError> {
        let Some(method) = self.spec else {
            if self.draft_model.is_some() {
                return Err(CliError::Usage("--draft-model needs --spec draft".into()));
            }
            if self.draft_p_min.is_some() {
                return Err(CliError::Usage("--draft-p-min needs --spec draft".into()));
            }
            return Ok(None);
        };
        match (method, &self.draft_model) {
            (SpecMethod::Draft, None) => {
                return Err(CliError::Usage("--spec draft needs --draft-model".into()));
            }
            (SpecMethod::Ngram, Some(_)) => {
                return Err(CliError::Usage(
                    "--draft-model is for --spec draft, not ngram".into(),
                ));
            }
            (SpecMethod::Ngram, None) if self.draft_p_min.is_some() => {
                return Err(CliError::Usage(
                    "--draft-p-min is for --spec draft (n-gram drafts have no probabilities)"
                        .into(),
                ));
            }
            _ => {}
        }
        let cfg = SpecConfig {
            method,
            draft_max: self.draft_max,
            ngram_min: self.ngram_min,
            ngram_max: self.ngram_max,
            adaptive: !self.spec_fixed,
            draft_p_min: self.draft_p_min.unwrap_or(SpecConfig::DRAFT_P_MIN),
        };
        cfg.validate()?;
        Ok(Some(cfg))
    }

    /// The speculative decoder for `target` (loading and checking the draft model), or
    /// `None` without `--spec`.
    pub fn decoder(
        &self,
        target: &Loaded,
        n_ctx: usize,
        seed: u64,
    ) -> Result<Option<SpecDecoder>, CliError> {
        let Some(cfg) = self.config()? else {
            return Ok(None);
        };
        let vocab = target.model.config().vocab_size;
        let source = match (cfg.method, &self.draft_model) {
            (SpecMethod::Draft, Some(name)) => {
                let draft = ModelArgs {
                    model: name.clone(),
                    quantize: None,
                }
                .load()?;
                kiln_spec::check_vocab(
                    &kiln_engine::sampler_vocab(&target.tokenizer),
                    &target.model,
                    &kiln_engine::sampler_vocab(&draft.tokenizer),
                    &draft.model,
                )?;
                let n = n_ctx + cfg.draft_max + 1;
                DraftSource::Model(Box::new(DraftModel::new(draft.model, n)))
            }
            _ => DraftSource::Ngram(kiln_spec::NgramDrafter::new(cfg.ngram_min, cfg.ngram_max)),
        };
        Ok(Some(SpecDecoder::new(&cfg, source, vocab, seed)?))
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        spec: SpecArgs,
    }

    fn config(args: &[&str]) -> Result<Option<SpecConfig>, CliError> {
        let cli = Cli::try_parse_from(std::iter::once("kiln").chain(args.iter().copied()))
            .expect("arguments parse");
        cli.spec.config()
    }

    #[test]
    fn the_draft_confidence_floor_is_for_draft_models_only() {
        let cfg = config(&["--spec", "draft", "--draft-model", "m"]).expect("valid");
        assert_eq!(
            cfg.expect("speculating").draft_p_min,
            SpecConfig::DRAFT_P_MIN
        );
        let cfg = config(&[
            "--spec",
            "draft",
            "--draft-model",
            "m",
            "--draft-p-min",
            "0.5",
        ]);
        let cfg = cfg.expect("valid").expect("speculating");
        assert_eq!(cfg.draft_p_min, 0.5);
        let err = config(&["--spec", "ngram", "--draft-p-min", "0.5"]).unwrap_err();
        assert!(
            err.to_string()
                .contains("--draft-p-min is for --spec draft"),
            "{err}"
        );
        let err = config(&["--draft-p-min", "0.5"]).unwrap_err();
        assert!(err.to_string().contains("needs --spec draft"), "{err}");
        let err = config(&[
            "--spec",
            "draft",
            "--draft-model",
            "m",
            "--draft-p-min",
            "1.5",
        ])
        .unwrap_err();
        assert!(
            err.to_string().contains("draft_p_min 1.5 is outside 0..=1"),
            "{err}"
        );
    }
}
