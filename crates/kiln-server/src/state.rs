//! What the server knows while it runs: its configuration ([`ServerConfig`]), the model it
//! serves ([`Backend`]) and the state every handler shares ([`AppState`]: counters, the
//! in-flight limit, shutdown). The router and the serving loop are in `routes.rs`.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use kiln_engine::{Engine, SamplerConfig};
use kiln_model::Pooling;
use kiln_tokenizer::Tokenizer;
use kiln_tokenizer::chat::ChatTemplate;

use crate::metrics::{MetricsCompat, ServerCounters};

/// How the server listens and guards itself. The request limits live here (and the
/// engine's in `kiln_engine::EngineConfig`: `n_ctx`, `max_queue`); `docs/serving.md` has
/// the table of every limit, its default, flag and error.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub host: String,
    pub port: u16,
    /// Bodies over this many bytes are refused with 413 `request_too_large`.
    pub max_body_bytes: usize,
    /// The most choices (`n`) one request may ask for; more: 400, param `n`.
    pub max_n: usize,
    /// The most prompt tokens one request may have (`None`: as many as the context holds
    /// with one generated token); more: 400 `prompt_too_long`.
    pub max_prompt_tokens: Option<usize>,
    /// The most generation requests in flight at once (running, waiting, or streaming
    /// their answer); more: 429 `concurrency_limit_exceeded`.
    pub max_concurrent_requests: usize,
    /// After Ctrl-C / SIGTERM, running requests may finish for this long; then they are
    /// cancelled.
    pub drain_timeout: Duration,
    /// The sampling settings a request gets for the fields it leaves out (OpenAI's:
    /// temperature 1, top_p 1, no top-k / min-p; `kiln serve --temp …` changes them). The
    /// seed is not used (a request without `seed` gets a random one).
    pub sampling: SamplerConfig,
    /// Unknown request fields are dropped with a warning instead of refused with 400.
    pub lenient_params: bool,
    /// Keys a request must present (`Authorization: Bearer KEY` or `x-api-key: KEY`);
    /// empty: no key needed. `/health` never needs one.
    pub api_keys: Vec<String>,
    /// `/metrics` answers without a key.
    pub metrics_public: bool,
    /// Origins browsers may call from (CORS; `*` for any); empty: no CORS headers.
    pub cors_origins: Vec<String>,
    /// A connection that has not sent a complete request head this long after it opened
    /// or after its last response (slow or idle) is closed.
    pub header_timeout: Duration,
    /// A request whose body has not fully arrived this long after its head is answered
    /// 408.
    pub body_timeout: Duration,
    /// The most open connections; one more is answered 503 `too_many_connections` and
    /// closed as soon as it is accepted.
    pub max_connections: usize,
    /// A connection whose writes make no progress this long (the client stopped reading
    /// a streamed answer) is closed and its requests cancelled; zero: never.
    pub write_timeout: Duration,
    /// Serve HTTPS with this certificate and key ([`crate::tls::load`]); `None`: HTTP.
    pub tls: Option<crate::tls::TlsConfig>,
    /// After Ctrl-C / SIGTERM, the server keeps serving for this long with `/health`
    /// answering 503 (so load balancers take it out of rotation while requests they
    /// already routed here still succeed); then the drain above begins.
    pub shutdown_delay: Duration,
    /// Which other engines' metric names `/metrics` also publishes.
    pub metrics_compat: MetricsCompat,
    /// How embeddings pool a sequence's hidden states (`None`: as the model file
    /// declares, else no pooling, as llama-server).
    pub pooling: Option<Pooling>,
}

/// OpenAI's sampling defaults: temperature 1, top_p 1, nothing else.
pub fn openai_sampling_defaults() -> SamplerConfig {
    SamplerConfig {
        temperature: 1.0,
        top_p: 1.0,
        top_k: 0,
        min_p: 0.0,
        ..SamplerConfig::default()
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            host: "127.0.0.1".into(),
            port: 8080,
            max_body_bytes: 4 << 20,
            max_n: 16,
            max_prompt_tokens: None,
            max_concurrent_requests: 512,
            drain_timeout: Duration::from_secs(10),
            sampling: openai_sampling_defaults(),
            lenient_params: false,
            api_keys: Vec::new(),
            metrics_public: false,
            cors_origins: Vec::new(),
            header_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(60),
            max_connections: 1024,
            write_timeout: Duration::from_secs(60),
            tls: None,
            shutdown_delay: Duration::ZERO,
            metrics_compat: MetricsCompat::Vllm,
            pooling: None,
        }
    }
}

/// What serves requests once the model is loaded.
pub struct Backend {
    pub engine: Engine,
    pub tokenizer: Arc<Tokenizer>,
    /// The chat template (`None`: `/v1/chat/completions` answers 400).
    pub template: Option<Arc<ChatTemplate>>,
    /// The id `/v1/models` lists and responses carry.
    pub model_id: String,
    /// Other names a request's `model` may use (file name, path, …).
    pub aliases: Vec<String>,
}

impl Backend {
    /// Whether a request's `model` names this backend (absent: yes).
    pub fn serves(&self, requested: Option<&str>) -> bool {
        match requested {
            None => true,
            Some(m) => m == self.model_id || self.aliases.iter().any(|a| a == m),
        }
    }
}

pub(crate) struct Shared {
    pub config: ServerConfig,
    pub backend: OnceLock<Backend>,
    pub shutting_down: AtomicBool,
    /// A termination signal came: `/health` answers 503 while requests are still served
    /// (the shutdown delay).
    pub leaving: AtomicBool,
    pub created: u64,
    pub next_id: AtomicU64,
    pub counters: Mutex<ServerCounters>,
    /// Generation requests in flight (see [`InFlight`]).
    pub in_flight: AtomicUsize,
}

/// One generation request's slot under `max_concurrent_requests`; freed when dropped
/// (the response was sent, or its stream ended or was dropped by the client).
pub(crate) struct InFlight(Arc<Shared>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Shared, cheap to clone.
#[derive(Clone)]
pub struct AppState(pub(crate) Arc<Shared>);

impl AppState {
    /// A server still loading its model: `/health` answers 503 until [`AppState::set_backend`].
    pub fn loading(config: ServerConfig) -> AppState {
        AppState(Arc::new(Shared {
            config,
            backend: OnceLock::new(),
            shutting_down: AtomicBool::new(false),
            leaving: AtomicBool::new(false),
            created: unix_now(),
            next_id: AtomicU64::new(1),
            counters: Mutex::new(ServerCounters::default()),
            in_flight: AtomicUsize::new(0),
        }))
    }

    /// A server with its backend ready.
    pub fn ready(config: ServerConfig, backend: Backend) -> AppState {
        let s = AppState::loading(config);
        s.set_backend(backend);
        s
    }

    /// Installs the backend (once; later calls are ignored).
    pub fn set_backend(&self, backend: Backend) {
        let _ = self.0.backend.set(backend);
    }

    pub fn backend(&self) -> Option<&Backend> {
        self.0.backend.get()
    }

    pub fn config(&self) -> &ServerConfig {
        &self.0.config
    }

    /// New requests are refused with 503 from now on.
    pub fn begin_shutdown(&self) {
        self.0.shutting_down.store(true, Ordering::SeqCst);
    }

    /// `/health` answers 503 from now on, while requests are still served (so load
    /// balancers stop routing here before the server stops accepting).
    pub fn begin_leaving(&self) {
        self.0.leaving.store(true, Ordering::SeqCst);
    }

    /// Whether `/health` should send load balancers elsewhere (leaving or shutting down).
    pub fn is_leaving(&self) -> bool {
        self.0.leaving.load(Ordering::SeqCst) || self.is_shutting_down()
    }

    pub fn is_shutting_down(&self) -> bool {
        self.0.shutting_down.load(Ordering::SeqCst)
    }

    pub(crate) fn count(&self, f: impl FnOnce(&mut ServerCounters)) {
        if let Ok(mut c) = self.0.counters.lock() {
            f(&mut c);
        }
    }

    pub(crate) fn counters(&self) -> ServerCounters {
        self.0.counters.lock().map(|c| *c).unwrap_or_default()
    }

    /// Counts an error answer (logging server errors); `in_stream`: sent inside a stream
    /// that had already answered 200, where only server errors are counted.
    pub(crate) fn count_error(&self, e: &crate::error::ApiError, in_stream: bool) {
        if e.status.is_server_error() {
            let place = if in_stream { " (in a stream)" } else { "" };
            eprintln!("kiln serve: {}{place} {}", e.status.as_u16(), e.message);
            self.count(|c| c.http_errors_5xx += 1);
        } else if !in_stream {
            self.count(|c| c.http_errors_4xx += 1);
        }
    }

    /// Takes a slot under `max_concurrent_requests`, or refuses with 429.
    pub(crate) fn admit(&self) -> Result<InFlight, crate::error::ApiError> {
        let limit = self.0.config.max_concurrent_requests;
        let prev = self.0.in_flight.fetch_add(1, Ordering::AcqRel);
        let slot = InFlight(Arc::clone(&self.0));
        if prev >= limit {
            drop(slot);
            return Err(crate::error::ApiError::concurrency(limit));
        }
        Ok(slot)
    }

    /// Generation requests in flight now.
    pub fn in_flight(&self) -> usize {
        self.0.in_flight.load(Ordering::Acquire)
    }

    /// A fresh response id suffix.
    pub(crate) fn next_id(&self) -> String {
        let n = self.0.next_id.fetch_add(1, Ordering::Relaxed);
        format!("{:x}{n:06x}", self.0.created)
    }
}

pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
