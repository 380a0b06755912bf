//! The sampler's settings and the order of its stages.

use std::fmt;
use std::str::FromStr;

/// One stage of the chain. Logit bias (and a grammar mask) always come first and the draw
/// last; these run in between, in the configured order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stage {
    /// Repetition, frequency and presence penalties over the last `repeat_last_n` tokens.
    Penalties,
    /// DRY ("don't repeat yourself") n-gram repetition penalty.
    Dry,
    TopK,
    TypicalP,
    TopP,
    MinP,
    Temperature,
}

impl Stage {
    /// llama.cpp's default order (its `penalties;dry;top_n_sigma;top_k;typ_p;top_p;min_p;xtc;
    /// temperature`, without the two samplers Kiln does not have).
    pub const DEFAULT_ORDER: [Stage; 7] = [
        Stage::Penalties,
        Stage::Dry,
        Stage::TopK,
        Stage::TypicalP,
        Stage::TopP,
        Stage::MinP,
        Stage::Temperature,
    ];

    /// The names [`Stage::from_str`] accepts (llama.cpp's `--samplers` names).
    pub const NAMES: &'static str = "penalties, dry, top_k, typ_p, top_p, min_p, temperature";

    pub fn name(self) -> &'static str {
        match self {
            Stage::Penalties => "penalties",
            Stage::Dry => "dry",
            Stage::TopK => "top_k",
            Stage::TypicalP => "typ_p",
            Stage::TopP => "top_p",
            Stage::MinP => "min_p",
            Stage::Temperature => "temperature",
        }
    }

    /// Parses a list such as `penalties;dry;top_k;top_p;min_p;temperature` (`;`, `,` or
    /// whitespace separated).
    pub fn parse_order(s: &str) -> Result<Vec<Stage>, SamplerConfigError> {
        s.split(|c: char| c == ';' || c == ',' || c.is_whitespace())
            .filter(|p| !p.is_empty())
            .map(str::parse)
            .collect()
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Stage {
    type Err = SamplerConfigError;

    fn from_str(s: &str) -> Result<Stage, SamplerConfigError> {
        let norm = s.trim().to_ascii_lowercase().replace('-', "_");
        Ok(match norm.as_str() {
            "penalties" | "penalty" | "repetition" => Stage::Penalties,
            "dry" => Stage::Dry,
            "top_k" | "k" => Stage::TopK,
            "typ_p" | "typical_p" | "typical" | "y" => Stage::TypicalP,
            "top_p" | "nucleus" | "p" => Stage::TopP,
            "min_p" | "m" => Stage::MinP,
            "temperature" | "temp" | "t" => Stage::Temperature,
            _ => {
                return Err(SamplerConfigError::UnknownStage {
                    name: s.to_string(),
                    supported: Stage::NAMES,
                });
            }
        })
    }
}

/// Settings of the chain. The defaults are llama.cpp's.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplerConfig {
    /// Divides the logits; `<= 0` means greedy.
    pub temperature: f32,
    /// Keep the `k` most likely tokens (`0` disables).
    pub top_k: usize,
    /// Keep the smallest set whose probability mass reaches `p` (`1.0` disables).
    pub top_p: f32,
    /// Drop tokens whose probability is below `min_p` times the best one's (`0` disables).
    pub min_p: f32,
    /// Locally typical sampling: keep the tokens whose surprise is closest to the
    /// entropy, up to mass `typical_p` (`1.0` disables).
    pub typical_p: f32,
    /// Divide positive (multiply negative) logits of recently seen tokens (`1.0` disables).
    pub repeat_penalty: f32,
    /// How many recent tokens the penalties look at (`0` disables them).
    pub repeat_last_n: usize,
    /// Subtract `count × frequency_penalty` from a recent token's logit (`0` disables).
    pub frequency_penalty: f32,
    /// Subtract `presence_penalty` from the logit of any recent token (`0` disables).
    pub presence_penalty: f32,
    /// DRY: the penalty is `dry_multiplier × dry_base^(n − dry_allowed_length)` for a token
    /// that would extend a repeated sequence of `n ≥ dry_allowed_length` tokens (`0`
    /// disables).
    pub dry_multiplier: f32,
    pub dry_base: f32,
    pub dry_allowed_length: usize,
    /// How many recent tokens DRY scans (`0` disables DRY).
    pub dry_last_n: usize,
    /// Strings that break a repeated sequence: a token whose text contains one ends the
    /// match (resolved against the vocabulary given to [`crate::Sampler::with_vocab`]).
    pub dry_sequence_breakers: Vec<String>,
    /// Added to the logit of each token id; `f32::NEG_INFINITY` bans the token.
    pub logit_bias: Vec<(u32, f32)>,
    /// The stages between logit bias and the draw.
    pub order: Vec<Stage>,
    /// Seed of the random stream.
    pub seed: u64,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            typical_p: 1.0,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            dry_multiplier: 0.0,
            dry_base: 1.75,
            dry_allowed_length: 2,
            dry_last_n: 4096,
            dry_sequence_breakers: ["\n", ":", "\"", "*"].map(String::from).to_vec(),
            logit_bias: Vec::new(),
            order: Stage::DEFAULT_ORDER.to_vec(),
            seed: 0,
        }
    }
}

/// A setting out of its range.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SamplerConfigError {
    #[error("{name} = {value} is out of range: {expected}")]
    OutOfRange {
        name: &'static str,
        value: f32,
        expected: &'static str,
    },
    #[error("unknown sampler stage `{name}` (supported: {supported})")]
    UnknownStage {
        name: String,
        supported: &'static str,
    },
    #[error("logit bias for token {id} is NaN or +infinity")]
    BadBias { id: u32 },
    #[error("a DRY sequence breaker is empty")]
    EmptyBreaker,
}

impl SamplerConfig {
    /// A greedy configuration.
    pub fn greedy() -> Self {
        SamplerConfig {
            temperature: 0.0,
            ..Default::default()
        }
    }

    /// Checks every setting's range.
    pub fn validate(&self) -> Result<(), SamplerConfigError> {
        let check = |name, value: f32, ok: bool, expected| {
            if ok {
                Ok(())
            } else {
                Err(SamplerConfigError::OutOfRange {
                    name,
                    value,
                    expected,
                })
            }
        };
        let unit = |name, v: f32| check(name, v, (0.0..=1.0).contains(&v), "0 ≤ value ≤ 1");
        let finite = |name, v: f32| check(name, v, v.is_finite(), "a finite number");
        finite("temperature", self.temperature)?;
        unit("top_p", self.top_p)?;
        unit("min_p", self.min_p)?;
        unit("typical_p", self.typical_p)?;
        check(
            "repeat_penalty",
            self.repeat_penalty,
            self.repeat_penalty.is_finite() && self.repeat_penalty > 0.0,
            "a positive number",
        )?;
        finite("frequency_penalty", self.frequency_penalty)?;
        finite("presence_penalty", self.presence_penalty)?;
        check(
            "dry_multiplier",
            self.dry_multiplier,
            self.dry_multiplier.is_finite() && self.dry_multiplier >= 0.0,
            "a non-negative number",
        )?;
        check(
            "dry_base",
            self.dry_base,
            self.dry_base.is_finite() && self.dry_base >= 1.0,
            "a number ≥ 1",
        )?;
        for &(id, b) in &self.logit_bias {
            if b.is_nan() || b == f32::INFINITY {
                return Err(SamplerConfigError::BadBias { id });
            }
        }
        if self.dry_sequence_breakers.iter().any(String::is_empty) {
            return Err(SamplerConfigError::EmptyBreaker);
        }
        Ok(())
    }
}
