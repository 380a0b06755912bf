//! Engine settings.

use std::sync::Arc;

use kiln_model::{KvOptions, Model};
use kiln_spec::SpecConfig;

/// How an [`crate::Engine`] schedules work and sizes its KV cache.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Most tokens per sequence (prompt + generated).
    pub n_ctx: usize,
    /// Per-step token budget: decode rows plus prefill chunks.
    pub max_batch_tokens: usize,
    /// Most sequences admitted (prefilling or decoding) at once.
    pub max_running: usize,
    /// Most waiting requests before [`crate::Engine::submit`] refuses with
    /// [`crate::EngineError::QueueFull`].
    pub max_queue: usize,
    /// KV cache types, block size and memory budget (`memory: None`: room for exactly one
    /// `n_ctx` sequence, which serves one request at a time).
    pub kv: KvOptions,
    /// Threads of the engine's rayon pool.
    pub threads: usize,
    /// While any sequence is decoding, a step's prefill tokens are limited so the step is
    /// predicted to take at most this many milliseconds, decode rows included (a cost model
    /// with a context term, fitted on every step: see `docs/engine.md`), so a long prompt
    /// cannot stall running streams for a whole `max_batch_tokens` chunk. When the decode
    /// rows alone fill the target, prefill still gets a small chunk (at most
    /// [`MIN_PREFILL_CHUNK`] tokens and a quarter of the target, at least one token). `0`
    /// disables the limit (steps use the whole `max_batch_tokens` budget).
    pub step_target_ms: f64,
    /// Publish KV-cache events ([`crate::Engine::kv_events`]): each step's batch goes to a
    /// queue of at most this many batches; when it is full the batch is dropped and
    /// counted ([`crate::EngineMetrics::kv_event_batches_dropped`]), the scheduler never
    /// waits. `None` (the default): no events are recorded.
    pub kv_events: Option<usize>,
    /// Speculative decoding of every request that does not opt out
    /// ([`crate::Request::speculate`]): n-gram drafts from each sequence's own prompt and
    /// output, scored in the step's batched pass (see `docs/engine.md`). Only
    /// [`kiln_spec::SpecMethod::Ngram`] runs in the engine. `None` (the default): no
    /// request speculates unless it opts in, and then with [`SpecConfig::new`]'s n-gram
    /// defaults.
    pub spec: Option<SpecConfig>,
    /// Test-only fault injection (see [`FaultPlan`]). `None` (always, outside tests): the
    /// scheduler's only cost is one `Option` check per sampled token. Nothing a client
    /// sends can set it; `kiln serve` never does.
    #[doc(hidden)]
    pub fault: Option<FaultPlan>,
    /// Test-only observation of the scheduler's steps (see [`StepProbe`]). `None` (always,
    /// outside tests): one `Option` check per step.
    #[doc(hidden)]
    pub step_probe: Option<StepProbe>,
}

/// Called on the scheduler thread when a step starts (`None`) and when it ends
/// (`Some(texts)`: how many token events with non-empty text it sent). The
/// zero-allocation test counts a step's allocations between the two calls. Only tests
/// build one.
#[doc(hidden)]
#[derive(Clone)]
pub struct StepProbe(pub Arc<dyn Fn(Option<usize>) + Send + Sync>);

impl std::fmt::Debug for StepProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StepProbe")
    }
}

/// Most tokens of the minimum prefill chunk a step takes while prompts wait, even when the
/// decode rows alone fill the step target (see [`EngineConfig::step_target_ms`]).
pub const MIN_PREFILL_CHUNK: usize = 16;

/// A deliberate panic inside one request's work, to test that panics never cross a
/// request's boundary: a request whose prompt contains `prompt_token` panics inside its
/// own sampling (under the scheduler's per-request `catch_unwind`) once it has generated
/// `after_tokens` tokens. Only tests build one.
#[doc(hidden)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultPlan {
    pub prompt_token: u32,
    pub after_tokens: usize,
}

impl EngineConfig {
    /// Defaults for `model`: its training context capped at 4096, 512 tokens per step,
    /// steps of at most about 200 ms while streams decode, 64 running sequences, a queue
    /// of 256,
    /// f16 KV with room for 16 full-context sequences (at least 64 Mi), all cores.
    pub fn for_model(model: &Model) -> EngineConfig {
        let cfg = model.config();
        let n_ctx = cfg.n_ctx_train.clamp(1, 4096);
        let kv = KvOptions::default();
        let per_token = kv.config(cfg, 0).bytes_per_token();
        let memory = (per_token * n_ctx * 16).max(64 << 20);
        EngineConfig {
            n_ctx,
            max_batch_tokens: 512,
            max_running: 64,
            max_queue: 256,
            kv: KvOptions {
                memory: Some(memory),
                ..kv
            },
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            step_target_ms: 200.0,
            kv_events: None,
            spec: None,
            fault: None,
            step_probe: None,
        }
    }
}
