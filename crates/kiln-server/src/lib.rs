//! # kiln-server
//!
//! The OpenAI-compatible HTTP server: `/v1/completions`, `/v1/chat/completions`, SSE
//! streaming, `/metrics`.
//!
//! **Owns:** HTTP and JSON wire types.
//!
//! **Must never:** schedule tokens itself (that is `kiln-engine`) or run kernels.
