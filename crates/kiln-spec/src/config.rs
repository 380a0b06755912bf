//! Speculative decoding settings.

use crate::SpecError;

/// Where drafts come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpecMethod {
    /// Prompt lookup: continue the longest recent suffix found earlier in the text.
    Ngram,
    /// A smaller model sharing the target's vocabulary.
    Draft,
}

impl SpecMethod {
    /// The names `--spec` accepts.
    pub const NAMES: &[&str] = &["ngram", "draft"];

    pub fn parse(s: &str) -> Result<SpecMethod, SpecError> {
        match s {
            "ngram" => Ok(SpecMethod::Ngram),
            "draft" => Ok(SpecMethod::Draft),
            _ => Err(SpecError::Config(format!(
                "unknown method {s:?}; supported: {}",
                SpecMethod::NAMES.join(", ")
            ))),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SpecMethod::Ngram => "ngram",
            SpecMethod::Draft => "draft",
        }
    }
}

/// How a sequence speculates.
#[derive(Clone, Debug, PartialEq)]
pub struct SpecConfig {
    pub method: SpecMethod,
    /// The most tokens drafted per step.
    pub draft_max: usize,
    /// The shortest suffix an n-gram draft matches on.
    pub ngram_min: usize,
    /// The longest suffix an n-gram draft tries first.
    pub ngram_max: usize,
    /// Adapt the draft length to recent acceptance, and pause drafting when it does not
    /// pay ([`crate::DraftLength`]); off: always draft `draft_max`.
    pub adaptive: bool,
    /// A draft model's draft stops before a token it gives less than this probability
    /// ([`crate::DraftModel::draft`]); 0 drafts `draft_max` whatever its confidence.
    /// N-gram drafts have no probabilities and ignore it.
    pub draft_p_min: f32,
}

impl SpecConfig {
    /// The most `draft_max` may be (a verification pass scores `draft_max + 1` tokens).
    pub const DRAFT_MAX_LIMIT: usize = 64;
    /// The default `draft_p_min` (llama.cpp's `--draft-p-min` default too).
    pub const DRAFT_P_MIN: f32 = 0.75;

    /// Defaults for `method`: up to 16 drafted tokens, n-grams of 1 to 16 tokens (a long
    /// match finds the place being copied; see [`crate::NgramDrafter`]), adaptive, a draft
    /// model's drafts cut before a token of probability below 0.75.
    pub fn new(method: SpecMethod) -> SpecConfig {
        SpecConfig {
            method,
            draft_max: 16,
            ngram_min: 1,
            ngram_max: 16,
            adaptive: true,
            draft_p_min: Self::DRAFT_P_MIN,
        }
    }

    pub fn validate(&self) -> Result<(), SpecError> {
        if self.draft_max == 0 || self.draft_max > Self::DRAFT_MAX_LIMIT {
            return Err(SpecError::Config(format!(
                "draft_max {} is outside 1..={}",
                self.draft_max,
                Self::DRAFT_MAX_LIMIT
            )));
        }
        if !(0.0..=1.0).contains(&self.draft_p_min) {
            return Err(SpecError::Config(format!(
                "draft_p_min {} is outside 0..=1",
                self.draft_p_min
            )));
        }
        if self.ngram_min == 0 || self.ngram_min > self.ngram_max {
            return Err(SpecError::Config(format!(
                "n-gram sizes {}..={} are empty or start at 0",
                self.ngram_min, self.ngram_max
            )));
        }
        Ok(())
    }
}
