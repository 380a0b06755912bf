//! # kiln-engine
//!
//! Requests, continuous batching, chunked prefill, prefix reuse and admission control.
//!
//! **Owns:** scheduling sequences onto the model.
//!
//! **Must never:** parse HTTP or command-line arguments, or know wire formats.
