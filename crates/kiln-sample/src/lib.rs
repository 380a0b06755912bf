//! # kiln-sample
//!
//! Turns a vector of logits into the next token: the sampler chain (repetition penalty,
//! top-k, top-p, min-p, temperature), greedy decoding and seeded randomness, plus
//! log-probabilities of the raw distribution.
//!
//! **Owns:** token selection and log-probabilities.
//!
//! **Must never:** run the model, touch the KV cache, or allocate per token once warm.

mod chain;
mod logprobs;

pub use chain::{Sampler, SamplerConfig, SamplerConfigError};
pub use logprobs::{TokenLogprob, argmax, top_logprobs};
