//! # kiln-engine
//!
//! Requests, continuous batching, chunked prefill, prefix reuse and admission control.
//!
//! An [`Engine`] owns one model session on a scheduler thread. Requests ([`Request`],
//! already tokenized) are submitted from any thread and stream [`Event`]s back through a
//! [`RequestHandle`]. Every scheduler step runs one batched forward pass
//! (`kiln_model::Session::forward_batch`) over the decode token of every running sequence
//! plus chunks of waiting prompts, under a per-step token budget; see `docs/engine.md`.
//!
//! **Owns:** scheduling sequences onto the model: admission by free KV blocks, prefix-cache
//! reuse, preemption by recomputation, cancellation, per-request sampling / stop strings /
//! grammar / streaming text, per-request timings and engine metrics.
//!
//! **Must never:** parse HTTP or command-line arguments, or know wire formats.

mod channel;
mod config;
mod cost;
mod engine;
mod error;
mod events;
mod metrics;
mod request;
mod scheduler;
mod sequence;
mod shared;
mod spec;
mod text;
mod vocab;

pub use config::{EngineConfig, MIN_PREFILL_CHUNK};
#[doc(hidden)]
pub use config::{FaultPlan, StepProbe};
pub use engine::{Engine, RequestHandle};
pub use error::EngineError;
pub use events::{KvEvent, KvEventBatch};
pub use kiln_sample::{Grammar, SamplerConfig, TokenLogprob};
pub use kiln_spec::{SpecConfig, SpecMethod, SpecStats};
pub use metrics::{EngineMetrics, Histogram};
pub use request::{Event, FinishReason, Request, RequestTimings, Usage};
pub use text::TokenText;
pub use vocab::sampler_vocab;
