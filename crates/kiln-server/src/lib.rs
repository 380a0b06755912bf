//! # kiln-server
//!
//! The OpenAI-compatible HTTP server: `POST /v1/completions`, `POST /v1/chat/completions`
//! (JSON or SSE streaming), `GET /v1/models`, `GET /health`, `GET /metrics` (Prometheus
//! text). Requests are validated and tokenized here (chat messages through the model's chat
//! template), then submitted to a [`kiln_engine::Engine`]; the engine's events become
//! OpenAI's response bodies or stream chunks. Errors use OpenAI's error JSON. See
//! `docs/serving.md`.
//!
//! Entry points: [`router`] (for tests: serve it on `127.0.0.1:0`), [`run`] (a listener
//! with graceful shutdown) and [`serve`] (bind, load the model while `/health` says 503,
//! serve until Ctrl-C / SIGTERM).
//!
//! **Owns:** HTTP and JSON wire types, request validation, SSE framing, the metrics
//! exposition.
//!
//! **Must never:** schedule tokens itself (that is `kiln-engine`) or run kernels; never
//! truncate a prompt silently (a prompt over the context is a 400).

mod error;
#[doc(hidden)]
pub mod fuzzing;
mod handlers;
pub mod metrics;
mod params;
mod routes;
mod state;
mod stream;
mod tools;
pub mod wire;

pub use error::ApiError;
pub use routes::{ServerError, router, run, serve};
pub use state::{AppState, Backend, ServerConfig};
