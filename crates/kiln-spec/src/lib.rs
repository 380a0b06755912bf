//! # kiln-spec
//!
//! Speculative decoding that is lossless by construction: a cheap source drafts the next
//! few tokens, the target model scores all of them in one pass
//! ([`kiln_model::Session::forward_scored`]), and each drafted token is kept only if the
//! target would have produced it.
//!
//! - Draft sources ([`DraftSource`]): n-gram / prompt lookup ([`NgramDrafter`]: the longest
//!   recent suffix of the text seen earlier, and what followed it, carried across the
//!   output's edits of the copied text) and a draft model
//!   sharing the target's vocabulary ([`DraftModel`], checked by [`check_vocab`]).
//! - Verification ([`SpecDecoder::step`]): greedy keeps a draft while it equals the
//!   target's choice; sampling uses [`kiln_sample::Sampler::verify_draft`]'s rejection rule,
//!   so output follows the target's distribution exactly. Rejected positions are cut from
//!   the KV cache before its pages become findable ([`kiln_model::Session::settle`]).
//! - Adaptive draft length per sequence ([`DraftLength`]), pausing drafting when its passes
//!   earned fewer tokens than they cost by the target's measured pass-cost curve
//!   ([`PassCost`]), and counters ([`SpecStats`]).
//!
//! **Owns:** drafting, verification of drafts, draft-length control and their counters.
//!
//! **Must never:** schedule requests, parse arguments, know text or wire formats, or change
//! what is generated: with speculation on, greedy output is byte-identical to greedy
//! output without it, and sampled output has the same distribution.

mod adapt;
mod config;
mod cost;
mod decoder;
mod draft;
mod error;
mod ngram;
mod stats;

pub use adapt::DraftLength;
pub use config::{SpecConfig, SpecMethod};
pub use cost::PassCost;
pub use decoder::{DraftSource, SpecDecoder};
pub use draft::{DraftModel, check_vocab};
pub use error::SpecError;
pub use ngram::NgramDrafter;
pub use stats::SpecStats;
