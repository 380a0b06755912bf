//! # kiln-server
//!
//! The OpenAI-compatible HTTP server: `POST /v1/completions`, `POST /v1/chat/completions`
//! (JSON or SSE streaming), `GET /v1/models`, `GET /health`, `GET /metrics` (Prometheus
//! text), llama-server's `/tokenize`, `/detokenize`, `/apply-template`, embeddings
//! (`POST /v1/embeddings`, llama-server's `/embedding`), fill-in-the-middle (llama-server's
//! `/infill`, `suffix` on `/v1/completions`), and Anthropic's `POST /v1/messages` and
//! `/v1/messages/count_tokens` (`anthropic.rs`). Requests are validated and tokenized here
//! (chat messages through the model's chat template), then submitted to a
//! [`kiln_engine::Engine`]; the engine's events become OpenAI's (or Anthropic's) response
//! bodies or stream events. Errors use OpenAI's error JSON (Anthropic's on its endpoints).
//! See `docs/serving.md`.
//!
//! Entry points: [`router`] (for tests: serve it on `127.0.0.1:0`), [`run`] (a listener
//! with graceful shutdown) and [`serve`] (bind, load the model while `/health` says 503,
//! serve until Ctrl-C / SIGTERM).
//!
//! **Owns:** HTTP and JSON wire types, request validation (every request field is in
//! one list, [`fields`]), SSE framing, the metrics exposition, and deployment safety (API
//! keys, CORS, read and write timeouts, the connection limit, TLS).
//!
//! **Must never:** schedule tokens itself (that is `kiln-engine`) or run kernels; never
//! truncate a prompt silently (a prompt over the context is a 400).

mod anthropic;
mod embeddings;
mod error;
pub mod fields;
mod fim;
#[doc(hidden)]
pub mod fuzzing;
mod guard;
mod handlers;
mod infill;
pub mod kv_events;
pub mod metrics;
mod params;
mod routes;
mod state;
mod stream;
pub mod tls;
mod tools;
mod utility;
pub mod wire;

pub use error::ApiError;
pub use metrics::MetricsCompat;
pub use routes::{ServerError, router, run, serve};
pub use state::{AppState, Backend, ServerConfig, openai_sampling_defaults};
