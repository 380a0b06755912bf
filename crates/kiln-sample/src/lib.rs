//! # kiln-sample
//!
//! Turns a vector of logits into the next token, and decides when generation stops.
//!
//! - The sampler chain ([`Sampler`], [`SamplerConfig`]): logit bias (and bans), then in a
//!   configurable order ([`Stage`], llama.cpp's default) repetition / frequency / presence
//!   penalties, DRY, top-k, typical-p, top-p, min-p and temperature, then a draw from a
//!   per-request ChaCha20 stream; greedy at temperature 0.
//! - Constrained output ([`Grammar`], [`Matcher`]): GBNF-like grammars and JSON schemas
//!   compiled to a matcher that masks the logits each step, over a byte trie of the
//!   vocabulary ([`Vocab`]).
//! - Stopping ([`StopStrings`], [`StopReason`]): stop strings with a holdback buffer.
//! - Log-probabilities of the raw distribution ([`top_logprobs`], [`logprob`]).
//!
//! **Owns:** token selection, constraints, stop conditions and log-probabilities.
//!
//! **Must never:** run the model, touch the KV cache, depend on the tokenizer crate (the
//! caller hands token bytes in as a [`Vocab`]), or allocate per token once warm (a grammar
//! matcher allocates only when it reaches a parser state it has not seen before).

mod candidates;
mod config;
mod dry;
pub mod grammar;
mod history;
mod logprobs;
mod sampler;
mod stop;
mod transforms;
mod vocab;

pub use config::{SamplerConfig, SamplerConfigError, Stage};
pub use grammar::{
    CompileLimits, Grammar, GrammarCache, GrammarError, GrammarKind, MatchError, Matcher,
};
pub use logprobs::{TokenLogprob, argmax, logprob, top_logprobs};
pub use sampler::{MaskStats, SampleError, Sampler};
pub use stop::{StopError, StopReason, StopStrings, truncate_at_stop};
pub use vocab::{TokenMask, Vocab};
