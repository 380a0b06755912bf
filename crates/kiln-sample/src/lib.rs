//! # kiln-sample
//!
//! Turns a vector of logits into the next token: the sampler chain (penalties,
//! temperature, top-k, top-p, min-p), greedy decoding and seeded randomness.
//!
//! **Owns:** token selection and log-probabilities.
//!
//! **Must never:** run the model, touch the KV cache, or allocate per token.
