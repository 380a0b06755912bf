//! `kiln serve`: the OpenAI-compatible HTTP server (kiln-server) over a continuous-batching
//! engine (kiln-engine). Binds first, answers `/health` with 503 while the model loads,
//! then serves until Ctrl-C / SIGTERM: `/health` turns 503 for `--shutdown-delay` while
//! requests are still served, then running requests drain for `--drain-timeout`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use kiln_engine::{Engine, EngineConfig};
use kiln_model::KvType;
use kiln_server::{Backend, MetricsCompat, ServerConfig};

use crate::args::chat::TemplateArgs;
use crate::args::kv::parse_size;
use crate::args::model::{Loaded, ModelArgs};
use crate::error::CliError;

#[derive(Args, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Address to listen on (loopback by default; use 0.0.0.0 to listen on every
    /// interface).
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port to listen on (0: any free port, printed at start).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Worker threads of the model (default: all available cores).
    #[arg(long, short = 't')]
    threads: Option<usize>,
    /// Most tokens per request, prompt plus completion (default: the training context, at
    /// most 4096). Longer requests are refused with 400 context_length_exceeded.
    #[arg(long, short = 'c')]
    ctx_size: Option<usize>,
    /// Most requests waiting for admission; more are refused with 429.
    #[arg(long, default_value_t = 256)]
    max_queue: usize,
    /// Most sequences decoding at once.
    #[arg(long, default_value_t = 64)]
    max_running: usize,
    /// Per-step token budget (decode rows plus prefill chunks).
    #[arg(long, default_value_t = 512)]
    max_batch_tokens: usize,
    /// While streams decode, limit each step's prefill so a step is predicted to take at
    /// most this many milliseconds, decode rows included (0: no limit, whole
    /// `--max-batch-tokens` chunks).
    #[arg(long, default_value_t = 200.0)]
    step_target_ms: f64,
    /// KV cache types, K[,V]: f32, f16, q8_0, q4_0, q4_1 or q5_0.
    #[arg(long = "kv-type", default_value = "f16", value_parser = parse_kv_types)]
    kv_type: (KvType, KvType),
    /// Tokens per KV cache page.
    #[arg(long = "kv-block-size", default_value_t = 16)]
    kv_block_size: usize,
    /// Memory for the KV cache shared by all requests, e.g. 256M, 1G (default: room for 16
    /// full contexts, at least 64 MiB).
    #[arg(long = "kv-memory", value_parser = parse_size)]
    kv_memory: Option<usize>,
    /// Request bodies over this size are refused with 413.
    #[arg(long, default_value = "4M", value_parser = parse_size)]
    max_body: usize,
    /// The most choices (`n`) one request may ask for; more are refused with 400.
    #[arg(long, default_value_t = 16)]
    max_n: usize,
    /// The most prompt tokens one request may have (default: what the context holds);
    /// more are refused with 400 prompt_too_long.
    #[arg(long)]
    max_prompt_tokens: Option<usize>,
    /// The most generation requests in flight at once (running, waiting or streaming);
    /// more are refused with 429 concurrency_limit_exceeded.
    #[arg(long, default_value_t = 512)]
    max_concurrent: usize,
    /// Seconds running requests may take to finish after Ctrl-C / SIGTERM before they are
    /// cancelled.
    #[arg(long, default_value_t = 10.0)]
    drain_timeout: f64,
    /// Seconds to keep serving after SIGTERM with /health answering 503 (so load balancers
    /// and routers stop sending requests here first), before the drain above begins.
    #[arg(long, default_value_t = 0.0)]
    shutdown_delay: f64,
    /// Other engines' metric names /metrics publishes too: vllm (vllm:num_requests_waiting,
    /// vllm:kv_cache_usage_perc, …, as routers read them) or none.
    #[arg(long, default_value = "vllm", value_parser = MetricsCompat::parse)]
    metrics_compat: MetricsCompat,
    /// Publish KV-cache events (blocks entering and leaving the prefix cache) on a ZMQ PUB
    /// socket in vLLM's format, for prefix-aware routers: tcp://*:PORT binds,
    /// tcp://HOST:PORT connects.
    #[arg(long, value_name = "ENDPOINT")]
    kv_events: Option<String>,
    /// The topic frame of every KV-event message (vLLM's default is empty; the Gateway API
    /// Inference Extension expects kv@POD@MODEL).
    #[arg(long, default_value = "", value_name = "TOPIC")]
    kv_events_topic: String,
    /// KV-event batches (one per scheduler step) queued for the publisher; when full, a
    /// batch is dropped and counted rather than stalling the scheduler.
    #[arg(long, default_value_t = 1024, value_name = "N")]
    kv_events_queue: usize,
    /// Speculative decoding for every request that does not opt out (`"speculative":
    /// false`): `--spec ngram` drafts each sequence from its own prompt and output, scored
    /// in the same batched pass as the other sequences. The engine speculates with `ngram`
    /// only.
    #[command(flatten)]
    spec: crate::args::spec::SpecArgs,
    /// How each KV event is laid out: array (vLLM's array-like structs, as the Gateway API
    /// Inference Extension reads them) or map (tagged by `type`, as vllm-router's kv_aware
    /// policy reads them).
    #[arg(long, default_value = "array", value_name = "FORMAT", value_parser = kv_event_encoding)]
    kv_events_format: kiln_server::kv_events::KvEventEncoding,
    /// A Jinja file to use as the chat template instead of the model's own.
    #[arg(long, value_name = "FILE")]
    chat_template: Option<PathBuf>,
    /// Another name requests may use in `model` (repeatable).
    #[arg(long = "alias", value_name = "NAME")]
    aliases: Vec<String>,
    /// How embeddings pool a sequence's hidden states: mean, cls, last, or none (one vector
    /// per token; /v1/embeddings then answers 400). Default: as the model file declares
    /// (`<arch>.pooling_type`), else none, as llama-server.
    #[arg(long, value_name = "POOLING", value_parser = parse_pooling)]
    pooling: Option<kiln_model::Pooling>,
    /// Ignore unknown request fields (with a warning on stderr) instead of answering 400
    /// "Unrecognized request argument supplied".
    #[arg(long)]
    lenient_params: bool,
    /// Require this API key (`Authorization: Bearer KEY` or `x-api-key: KEY`; repeatable).
    /// `/health` stays open.
    #[arg(long = "api-key", value_name = "KEY")]
    api_keys: Vec<String>,
    /// Read API keys from this file, one per line (blank lines and `#` comments skipped).
    #[arg(long, value_name = "FILE")]
    api_key_file: Option<PathBuf>,
    /// Serve `/metrics` without a key even when keys are required.
    #[arg(long)]
    metrics_public: bool,
    /// An origin browsers may call from (CORS; `*` for any; repeatable).
    #[arg(long = "cors-origin", value_name = "ORIGIN")]
    cors_origins: Vec<String>,
    /// Seconds a connection may take to send a request head, counted from its opening or
    /// its last response (slow or idle connections are closed).
    #[arg(long, default_value_t = 30.0)]
    header_timeout: f64,
    /// Seconds a request body may take to arrive after its head (then 408).
    #[arg(long, default_value_t = 60.0)]
    body_timeout: f64,
    /// The most open connections; more get a 503 (too_many_connections) and are closed.
    #[arg(long, default_value_t = 1024)]
    max_connections: usize,
    /// Seconds a write to a client may stall (it stopped reading a streamed answer) before
    /// the connection is closed and its requests cancelled; 0: never.
    #[arg(long, default_value_t = 60.0)]
    write_timeout: f64,
    /// Serve HTTPS with this PEM certificate chain (needs --tls-key).
    #[arg(long, value_name = "PEM", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert (PKCS#8, PKCS#1 or SEC1).
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    #[command(flatten)]
    defaults: ServerSampling,
}

/// The sampling settings of a request that leaves the field out (OpenAI's defaults unless
/// changed here).
#[derive(Args, Debug)]
struct ServerSampling {
    /// Default `temperature` (0–2).
    #[arg(long = "temp", visible_alias = "temperature", default_value_t = 1.0)]
    temp: f32,
    /// Default `top_k` (0 disables).
    #[arg(long, default_value_t = 0)]
    top_k: usize,
    /// Default `top_p`.
    #[arg(long, default_value_t = 1.0)]
    top_p: f32,
    /// Default `min_p` (0 disables).
    #[arg(long, default_value_t = 0.0)]
    min_p: f32,
    /// Default `typical_p` (1 disables).
    #[arg(long, default_value_t = 1.0)]
    typical_p: f32,
    /// Default `repeat_penalty` (1 disables).
    #[arg(long, default_value_t = 1.0)]
    repeat_penalty: f32,
    /// Default `repeat_last_n` (0 disables, -1 the context).
    #[arg(long, default_value_t = 64, allow_negative_numbers = true)]
    repeat_last_n: i64,
    /// Default `frequency_penalty` (-2…2).
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    frequency_penalty: f32,
    /// Default `presence_penalty` (-2…2).
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    presence_penalty: f32,
    /// Default `dry_multiplier` (0 disables DRY).
    #[arg(long, default_value_t = 0.0)]
    dry_multiplier: f32,
    /// Default `dry_base`.
    #[arg(long, default_value_t = 1.75)]
    dry_base: f32,
    /// Default `dry_allowed_length`.
    #[arg(long, default_value_t = 2)]
    dry_allowed_length: usize,
    /// Default `dry_penalty_last_n` (0 disables, -1 the context).
    #[arg(long, default_value_t = -1, allow_negative_numbers = true)]
    dry_penalty_last_n: i64,
}

impl ServerSampling {
    /// The defaults, validated as a request's fields are.
    fn config(&self) -> Result<kiln_engine::SamplerConfig, CliError> {
        let window = |v: i64, name: &str| match v {
            -1 => Ok(usize::MAX),
            v => usize::try_from(v).map_err(|_| {
                CliError::Usage(format!(
                    "--{name} {v}: use a count, 0 to disable or -1 for the context size"
                ))
            }),
        };
        let cfg = kiln_engine::SamplerConfig {
            temperature: self.temp,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            typical_p: self.typical_p,
            repeat_penalty: self.repeat_penalty,
            repeat_last_n: window(self.repeat_last_n, "repeat-last-n")?,
            frequency_penalty: self.frequency_penalty,
            presence_penalty: self.presence_penalty,
            dry_multiplier: self.dry_multiplier,
            dry_base: self.dry_base,
            dry_allowed_length: self.dry_allowed_length,
            dry_last_n: window(self.dry_penalty_last_n, "dry-penalty-last-n")?,
            ..kiln_server::openai_sampling_defaults()
        };
        let bad = |m: String| Err(CliError::Usage(m));
        if !(0.0..=2.0).contains(&cfg.temperature) {
            return bad(format!(
                "--temp {} must be between 0 and 2",
                cfg.temperature
            ));
        }
        if !(cfg.top_p > 0.0 && cfg.top_p <= 1.0) {
            return bad(format!("--top-p {} must be in (0, 1]", cfg.top_p));
        }
        for (name, v) in [
            ("frequency-penalty", cfg.frequency_penalty),
            ("presence-penalty", cfg.presence_penalty),
        ] {
            if !(-2.0..=2.0).contains(&v) {
                return bad(format!("--{name} {v} must be between -2 and 2"));
            }
        }
        cfg.validate()
            .map_err(|e| CliError::Usage(format!("server sampling defaults: {e}")))?;
        Ok(cfg)
    }
}

fn parse_kv_types(s: &str) -> Result<(KvType, KvType), String> {
    KvType::parse_pair(s).map_err(|e| e.to_string())
}

pub fn run(args: ServeArgs) -> Result<(), CliError> {
    let threads = args.threads.unwrap_or_else(crate::threads::available);
    if threads == 0
        || args.kv_block_size == 0
        || args.max_running == 0
        || args.max_n == 0
        || args.max_concurrent == 0
        || args.max_prompt_tokens == Some(0)
    {
        return Err(CliError::Usage(
            "--threads, --kv-block-size, --max-running, --max-n, --max-concurrent and \
             --max-prompt-tokens must be at least 1"
                .into(),
        ));
    }
    for (flag, v) in [
        ("--drain-timeout", args.drain_timeout),
        ("--shutdown-delay", args.shutdown_delay),
        ("--write-timeout", args.write_timeout),
    ] {
        if !(v.is_finite() && (0.0..=86_400.0).contains(&v)) {
            return Err(CliError::Usage(format!(
                "{flag} must be a number of seconds from 0 to 86400 (got {v})"
            )));
        }
    }
    for (name, v) in [
        ("--header-timeout", args.header_timeout),
        ("--body-timeout", args.body_timeout),
    ] {
        if !(v.is_finite() && v > 0.0) {
            return Err(CliError::Usage(format!(
                "{name} must be a positive number of seconds"
            )));
        }
    }
    if args.max_connections == 0 {
        return Err(CliError::Usage(
            "--max-connections must be at least 1".into(),
        ));
    }
    let mut api_keys: Vec<String> = args.api_keys.iter().map(|k| k.trim().to_string()).collect();
    if let Some(f) = &args.api_key_file {
        let text = std::fs::read_to_string(f).map_err(|e| {
            CliError::Usage(format!("cannot read --api-key-file {}: {e}", f.display()))
        })?;
        api_keys.extend(
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(String::from),
        );
        if api_keys.is_empty() {
            return Err(CliError::Usage(format!(
                "--api-key-file {} holds no key",
                f.display()
            )));
        }
    }
    if api_keys.iter().any(String::is_empty) {
        return Err(CliError::Usage("an API key is empty".into()));
    }
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(kiln_server::tls::load(cert, key)?),
        _ => None,
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    let config = ServerConfig {
        host: args.host.clone(),
        port: args.port,
        max_body_bytes: args.max_body,
        max_n: args.max_n,
        max_prompt_tokens: args.max_prompt_tokens,
        max_concurrent_requests: args.max_concurrent,
        drain_timeout: Duration::from_secs_f64(args.drain_timeout),
        sampling: args.defaults.config()?,
        lenient_params: args.lenient_params,
        api_keys,
        metrics_public: args.metrics_public,
        cors_origins: args.cors_origins.clone(),
        header_timeout: Duration::from_secs_f64(args.header_timeout),
        body_timeout: Duration::from_secs_f64(args.body_timeout),
        max_connections: args.max_connections,
        write_timeout: Duration::from_secs_f64(args.write_timeout),
        tls,
        shutdown_delay: Duration::from_secs_f64(args.shutdown_delay),
        metrics_compat: args.metrics_compat,
        pooling: args.pooling,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("kiln-http")
        .enable_all()
        .build()?;
    let name = args.model.model.clone();
    let result = runtime.block_on(kiln_server::serve(
        config,
        move || load(&args, threads).map_err(|e| e.to_string()),
        |addr| eprintln!("kiln serve: listening on {scheme}://{addr} (loading {name})"),
    ));
    result.map_err(|e| CliError::Usage(e.to_string()))
}

/// Loads the model, its tokenizer and chat template, and starts the engine.
fn load(args: &ServeArgs, threads: usize) -> Result<Backend, CliError> {
    let started = std::time::Instant::now();
    let Loaded { model, tokenizer } = args.model.load()?;
    let path = kiln_hub::resolve(&args.model.model)?;
    let template_args = TemplateArgs {
        chat_template: args.chat_template.clone(),
        ..TemplateArgs::default()
    };
    let md = model.gguf().map(|f| f.metadata());
    let template = match crate::chat::load_template(&template_args, &path, md, &tokenizer) {
        Ok(t) => Some(Arc::new(t)),
        Err(e) if args.chat_template.is_none() => {
            eprintln!("note: /v1/chat/completions is unavailable: {e}");
            None
        }
        Err(e) => return Err(e),
    };
    let mut cfg = EngineConfig::for_model(&model);
    if let Some(c) = args.ctx_size {
        if c < 2 {
            return Err(CliError::Usage("--ctx-size must be at least 2".into()));
        }
        cfg.n_ctx = c;
    }
    cfg.max_queue = args.max_queue;
    cfg.max_running = args.max_running;
    cfg.max_batch_tokens = args.max_batch_tokens;
    cfg.step_target_ms = args.step_target_ms;
    cfg.threads = threads;
    cfg.kv.k_type = args.kv_type.0;
    cfg.kv.v_type = args.kv_type.1;
    cfg.kv.block_size = args.kv_block_size;
    if args.kv_memory.is_some() {
        cfg.kv.memory = args.kv_memory;
    }
    if args.kv_events.is_some() {
        cfg.kv_events = Some(args.kv_events_queue.max(1));
    }
    cfg.spec = args.spec.config()?;
    if let Some(s) = &cfg.spec
        && s.method != kiln_spec::SpecMethod::Ngram
    {
        return Err(CliError::Usage(format!(
            "kiln serve speculates with --spec ngram only (got {})",
            s.method.as_str()
        )));
    }
    let n_ctx = cfg.n_ctx;
    let shape = cfg.kv.config(model.config(), 0);
    let kv_blocks = cfg.kv.memory.map_or(0, |m| m / shape.block_bytes().max(1));
    let tokenizer = Arc::new(tokenizer);
    let engine = Engine::start(model, Arc::clone(&tokenizer), cfg)
        .map_err(|e| CliError::Usage(format!("cannot start the engine: {e}")))?;
    if let (Some(endpoint), Some(rx)) = (&args.kv_events, engine.kv_events()) {
        kiln_server::kv_events::start(
            rx,
            kiln_server::kv_events::KvEventsConfig {
                endpoint: endpoint.clone(),
                topic: args.kv_events_topic.clone(),
                encoding: args.kv_events_format,
            },
        )
        .map_err(|e| CliError::Usage(e.to_string()))?;
        eprintln!("kiln serve: KV-cache events on {endpoint}");
    }
    let model_id = if path.to_string_lossy() == args.model.model {
        path.file_stem().map_or_else(
            || args.model.model.clone(),
            |s| s.to_string_lossy().into_owned(),
        )
    } else {
        args.model.model.clone()
    };
    let mut aliases = args.aliases.clone();
    aliases.push(args.model.model.clone());
    aliases.push(path.display().to_string());
    if let Some(f) = path.file_name() {
        aliases.push(f.to_string_lossy().into_owned());
    }
    if let Some(f) = path.file_stem() {
        aliases.push(f.to_string_lossy().into_owned());
    }
    eprintln!(
        "kiln serve: {model_id} ready in {:.1} s: context {n_ctx}, KV {kv_blocks} blocks of {} tokens, {threads} threads",
        started.elapsed().as_secs_f64(),
        args.kv_block_size
    );
    Ok(Backend {
        engine,
        tokenizer,
        template,
        model_id,
        aliases,
    })
}

/// Parses `--kv-events-format`.
fn kv_event_encoding(v: &str) -> Result<kiln_server::kv_events::KvEventEncoding, String> {
    use kiln_server::kv_events::KvEventEncoding;
    match v {
        "array" => Ok(KvEventEncoding::Array),
        "map" => Ok(KvEventEncoding::Map),
        _ => Err(format!(
            "{v:?} is not a KV-event format (supported: array, map)"
        )),
    }
}

/// `--pooling`: a pooling name (`none`, `mean`, `cls`, `last`).
fn parse_pooling(name: &str) -> Result<kiln_model::Pooling, String> {
    kiln_model::Pooling::parse(name).map_err(|e| e.to_string())
}
