//! Sampling and output-control arguments: the sampler chain (`--temperature`, `--top-k`,
//! …, `--sampler-order`), `--logit-bias`, `--stop`, and constrained output
//! (`--json-schema FILE`, `--grammar FILE`). Names and defaults follow llama.cpp.

use std::path::PathBuf;
use std::sync::Arc;

use kiln_sample::{
    CompileLimits, Grammar, GrammarCache, GrammarKind, SamplerConfig, Stage, StopStrings,
};

use crate::error::CliError;

#[derive(clap::Args, Debug, Clone)]
pub struct SamplingArgs {
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.8)]
    pub temperature: f32,
    /// Keep the k most likely tokens (0 disables).
    #[arg(long, default_value_t = 40)]
    pub top_k: usize,
    /// Nucleus sampling: keep the smallest set with this probability mass (1 disables).
    #[arg(long, default_value_t = 0.95)]
    pub top_p: f32,
    /// Drop tokens less likely than this fraction of the best one (0 disables).
    #[arg(long, default_value_t = 0.05)]
    pub min_p: f32,
    /// Locally typical sampling mass (1 disables).
    #[arg(long, default_value_t = 1.0)]
    pub typical_p: f32,
    /// Repetition penalty over the last --repeat-last-n tokens (1 disables).
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,
    /// Tokens the penalties look back over (0 disables, -1 = context size).
    #[arg(long, default_value_t = 64, allow_negative_numbers = true)]
    pub repeat_last_n: i64,
    /// Subtract count × this from a recent token's logit (0 disables).
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub frequency_penalty: f32,
    /// Subtract this from the logit of any recent token (0 disables).
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub presence_penalty: f32,
    /// DRY repetition penalty multiplier (0 disables).
    #[arg(long, default_value_t = 0.0)]
    pub dry_multiplier: f32,
    /// DRY penalty base.
    #[arg(long, default_value_t = 1.75)]
    pub dry_base: f32,
    /// Repeats up to this many tokens are not penalised by DRY.
    #[arg(long, default_value_t = 2)]
    pub dry_allowed_length: usize,
    /// Tokens DRY scans (0 disables, -1 = context size).
    #[arg(long, default_value_t = -1, allow_negative_numbers = true)]
    pub dry_penalty_last_n: i64,
    /// A DRY sequence breaker (repeatable; replaces the defaults "\n", ":", "\"", "*";
    /// `none` for no breakers). `\n` and `\t` are unescaped.
    #[arg(long = "dry-sequence-breaker", value_name = "STRING")]
    pub dry_sequence_breakers: Vec<String>,
    /// Bias a token's logit, `ID=BIAS` (repeatable); `ID=-inf` or `ID=ban` bans it.
    #[arg(long = "logit-bias", value_name = "ID=BIAS", value_parser = parse_bias)]
    pub logit_bias: Vec<(u32, f32)>,
    /// The stages between logit bias and the draw, `;`-separated (llama.cpp's names).
    #[arg(
        long,
        value_name = "LIST",
        default_value = "penalties;dry;top_k;typ_p;top_p;min_p;temperature",
        value_parser = parse_order
    )]
    pub sampler_order: SamplerOrder,
    /// Seed of the sampler's random stream.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Stop when this string appears (repeatable); it is not printed. `\n`, `\t` and `\\`
    /// are unescaped.
    #[arg(long = "stop", value_name = "STRING")]
    pub stop: Vec<String>,
    /// Constrain the output to JSON valid under this JSON schema (a file).
    #[arg(long, value_name = "FILE", conflicts_with = "grammar")]
    pub json_schema: Option<PathBuf>,
    /// Constrain the output to this GBNF grammar (a file, rule `root`).
    #[arg(long, value_name = "FILE")]
    pub grammar: Option<PathBuf>,
}

fn parse_bias(s: &str) -> Result<(u32, f32), String> {
    let (id, bias) = s
        .split_once('=')
        .ok_or_else(|| format!("'{s}' is not ID=BIAS (e.g. 15043=-2.5, 2=-inf)"))?;
    let id: u32 = id
        .trim()
        .parse()
        .map_err(|_| format!("'{id}' is not a token id"))?;
    let bias = match bias.trim().to_ascii_lowercase().as_str() {
        "-inf" | "-infinity" | "ban" => f32::NEG_INFINITY,
        b => b
            .parse::<f32>()
            .ok()
            .filter(|v| !v.is_nan() && *v != f32::INFINITY)
            .ok_or_else(|| format!("'{bias}' is not a bias (a number, -inf or ban)"))?,
    };
    Ok((id, bias))
}

/// The `--sampler-order` list (one argument, not a repeatable flag).
#[derive(Clone, Debug, PartialEq)]
pub struct SamplerOrder(pub Vec<Stage>);

fn parse_order(s: &str) -> Result<SamplerOrder, String> {
    Stage::parse_order(s)
        .map(SamplerOrder)
        .map_err(|e| e.to_string())
}

/// `\n`, `\t`, `\r` and `\\` as the characters (shells pass them literally).
fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some('\\') => out.push('\\'),
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    out
}

/// A `-1 = context size` count.
fn window(v: i64, n_ctx: usize, name: &str) -> Result<usize, CliError> {
    match v {
        -1 => Ok(n_ctx),
        v if v >= 0 => Ok(v as usize),
        v => Err(CliError::Usage(format!(
            "--{name} {v}: use a count, 0 to disable or -1 for the context size"
        ))),
    }
}

impl SamplingArgs {
    /// The sampler settings, validated.
    pub fn config(&self, n_ctx: usize) -> Result<SamplerConfig, CliError> {
        let defaults = SamplerConfig::default();
        let breakers = match self.dry_sequence_breakers.as_slice() {
            [] => defaults.dry_sequence_breakers,
            [none] if none == "none" => Vec::new(),
            list => list.iter().map(|s| unescape(s)).collect(),
        };
        let cfg = SamplerConfig {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            typical_p: self.typical_p,
            repeat_penalty: self.repeat_penalty,
            repeat_last_n: window(self.repeat_last_n, n_ctx, "repeat-last-n")?,
            frequency_penalty: self.frequency_penalty,
            presence_penalty: self.presence_penalty,
            dry_multiplier: self.dry_multiplier,
            dry_base: self.dry_base,
            dry_allowed_length: self.dry_allowed_length,
            dry_last_n: window(self.dry_penalty_last_n, n_ctx, "dry-penalty-last-n")?,
            dry_sequence_breakers: breakers,
            logit_bias: self.logit_bias.clone(),
            order: self.sampler_order.0.clone(),
            seed: self.seed,
        };
        cfg.validate()?;
        Ok(cfg)
    }

    pub fn stop_strings(&self) -> Result<StopStrings, CliError> {
        StopStrings::new(self.stop.iter().map(|s| unescape(s)))
            .map_err(|e| CliError::Usage(format!("--stop: {e}")))
    }

    /// Whether output is constrained or cut by stop strings.
    pub fn controls_output(&self) -> bool {
        self.json_schema.is_some() || self.grammar.is_some() || !self.stop.is_empty()
    }

    /// The compiled `--json-schema` / `--grammar`, if one was given.
    pub fn grammar(&self, cache: &GrammarCache) -> Result<Option<Arc<Grammar>>, CliError> {
        let (kind, path) = match (&self.json_schema, &self.grammar) {
            (Some(p), _) => (GrammarKind::JsonSchema, p),
            (None, Some(p)) => (GrammarKind::Gbnf, p),
            (None, None) => return Ok(None),
        };
        let src = std::fs::read_to_string(path)
            .map_err(|e| CliError::Usage(format!("cannot read {}: {e}", path.display())))?;
        let g = cache
            .get_or_compile(kind, &src, &CompileLimits::default())
            .map_err(|e| CliError::Usage(format!("{}: {e}", path.display())))?;
        Ok(Some(g))
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser, Debug)]
    struct Probe {
        #[command(flatten)]
        s: SamplingArgs,
    }

    #[test]
    fn every_flag_parses_into_the_config() {
        use clap::CommandFactory;
        Probe::command().debug_assert();
        let p = Probe::try_parse_from([
            "kiln",
            "--temperature",
            "0.5",
            "--top-k",
            "7",
            "--typical-p",
            "0.9",
            "--frequency-penalty",
            "-0.5",
            "--presence-penalty",
            "0.25",
            "--repeat-last-n",
            "-1",
            "--dry-multiplier",
            "0.8",
            "--dry-sequence-breaker",
            "\\n",
            "--logit-bias",
            "5=ban",
            "--logit-bias",
            "6=1.5",
            "--sampler-order",
            "top_k;temperature",
            "--seed",
            "9",
            "--stop",
            "END",
            "--stop",
            "\\n\\n",
        ])
        .unwrap();
        let cfg = p.s.config(300).unwrap();
        assert_eq!(cfg.temperature, 0.5);
        assert_eq!(cfg.top_k, 7);
        assert_eq!(cfg.typical_p, 0.9);
        assert_eq!(cfg.frequency_penalty, -0.5);
        assert_eq!(cfg.repeat_last_n, 300);
        assert_eq!(cfg.dry_last_n, 300);
        assert_eq!(cfg.dry_sequence_breakers, vec!["\n".to_string()]);
        assert_eq!(cfg.logit_bias, vec![(5, f32::NEG_INFINITY), (6, 1.5)]);
        assert_eq!(cfg.order, vec![Stage::TopK, Stage::Temperature]);
        assert_eq!(cfg.seed, 9);
        assert_eq!(p.s.stop_strings().unwrap().stops(), ["END", "\n\n"]);
        assert!(Probe::try_parse_from(["kiln", "--sampler-order", "top_k;xtc"]).is_err());
        assert!(Probe::try_parse_from(["kiln", "--json-schema", "a", "--grammar", "b"]).is_err());
    }

    #[test]
    fn logit_bias_parses_numbers_and_bans() {
        assert_eq!(parse_bias("15043=-2.5"), Ok((15043, -2.5)));
        assert_eq!(parse_bias("2=ban"), Ok((2, f32::NEG_INFINITY)));
        assert_eq!(parse_bias("2=-inf"), Ok((2, f32::NEG_INFINITY)));
        assert!(parse_bias("2").is_err());
        assert!(parse_bias("x=1").is_err());
        assert!(parse_bias("2=inf").is_err());
    }

    #[test]
    fn stop_strings_unescape_newlines() {
        assert_eq!(unescape(r"a\nb\\n\t"), "a\nb\\n\t");
    }
}
