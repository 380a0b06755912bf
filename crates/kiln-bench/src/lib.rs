//! # kiln-bench
//!
//! Benchmark statistics (percentiles, bootstrap confidence intervals, CV-based stopping),
//! latency metrics and result types, KL-divergence and perplexity suites, and the reports
//! (JSON, Markdown, SVG plots) of `cargo xtask bench`.
//!
//! **Owns:** measurement and its statistics: [`stats`] (the nearest-rank percentile rule,
//! sample standard deviation, seeded bootstrap), [`sampling`] (dynamic stop rule),
//! [`metrics`] (ITL, TTFT, KV waste), [`result`] (`BenchmarkResult`, `BenchmarkSummary`,
//! `Machine`), [`ppl`] and [`kl`] (llama.cpp's perplexity and KL-divergence arithmetic),
//! [`basefile`] (reference logits, llama.cpp-compatible), [`run`] (feeding them from a
//! model session), [`report`] (Markdown tables and plots), [`convert`] (an f32 copy of a
//! model as the reference for weight-type quality).
//!
//! **Must never:** print fixed numbers or measure anything it did not run; fill an
//! unmeasured figure with a placeholder (it is `None`); let a figure depend on the thread
//! count (per-position values are summed in position order); parse command lines.

pub mod basefile;
pub mod convert;
pub mod kl;
pub mod metrics;
pub mod ppl;
pub mod report;
pub mod result;
pub mod run;
pub mod sampling;
pub mod stats;

use std::path::PathBuf;

pub use basefile::{BaseHeader, BaseMeta, BaseReader, BaseWriter};
pub use kl::{KlAccumulator, KlReport, compare_logits, compare_streams};
pub use metrics::{ItlMetrics, KvCacheMetrics, TtftMetrics};
pub use ppl::{ChunkPlan, NllSum, PplEstimate};
pub use result::{BenchmarkConfig, BenchmarkResult, BenchmarkSummary, Machine};
pub use run::{KlRun, PerplexityRun, kl_divergence, perplexity};
pub use sampling::{DynamicSampler, Stop, StopRule, sample_until_stable};
pub use stats::{Bootstrap, Interval, Spread, Statistic, percentile};

/// What can go wrong in a suite.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error(
        "the text has {n_tokens} tokens; a context of {n_ctx} needs at least {needed} \
         (two chunks, as llama-perplexity requires)"
    )]
    TooFewTokens {
        n_tokens: usize,
        needed: usize,
        n_ctx: usize,
    },
    #[error("a context of {n_ctx} tokens is too small to score (at least 4)")]
    ContextTooSmall { n_ctx: usize },
    #[error("no chunks to evaluate")]
    NoChunks,
    #[error("the session holds {session} positions, fewer than the context of {n_ctx}")]
    SessionTooSmall { session: usize, n_ctx: usize },
    #[error(
        "the reference was computed with a vocabulary of {base} tokens, this model has {model}"
    )]
    VocabMismatch { base: usize, model: usize },
    #[error("{}: {detail}", path.display())]
    BadBaseFile { path: PathBuf, detail: String },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Model(#[from] kiln_model::ModelError),
    #[error(transparent)]
    Format(#[from] kiln_format::FormatError),
    #[error(transparent)]
    Quant(#[from] kiln_quant::QuantError),
    #[error(
        "cannot convert a model to {type_name}: supported targets are F32, F16, Q8_0, Q4_0, Q4_K"
    )]
    UnsupportedTarget { type_name: &'static str },
    #[error(
        "{}: Hugging Face model_type '{model_type}' (architecture {arch}) cannot be written to \
         GGUF yet; supported: {supported}", dir.display()
    )]
    UnsupportedHfArchitecture {
        dir: PathBuf,
        model_type: String,
        arch: String,
        supported: String,
    },
    #[error(transparent)]
    Tokenizer(#[from] kiln_tokenizer::TokenizerError),
    #[error("plot {}: {detail}", path.display())]
    Plot { path: PathBuf, detail: String },
}
