//! The public face: [`Engine`] (submit, metrics, shutdown) and [`RequestHandle`].

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use kiln_model::{Model, Session};
use kiln_spec::SpecMethod;
use kiln_tokenizer::Tokenizer;

use crate::channel::{Receiver, TryRecvError, channel};
use crate::shared::{Inbox, Shared, Submission, lock};
use crate::{EngineConfig, EngineError, EngineMetrics, Event, KvEventBatch, Request};

/// Stops the scheduler when the last [`Engine`] clone goes away.
struct Owner {
    shared: Arc<Shared>,
    /// The model the scheduler's session evaluates (shared, read-only).
    model: Arc<Model>,
}

impl Drop for Owner {
    fn drop(&mut self) {
        self.shared.shutdown(false);
    }
}

/// A running engine: a scheduler thread that owns the model session. Cheap to clone;
/// dropping the last clone cancels what is left and stops the thread.
#[derive(Clone)]
pub struct Engine {
    owner: Arc<Owner>,
}

impl Engine {
    /// Builds the session (KV cache as `config.kv` says) and starts the scheduler thread.
    pub fn start(
        model: Arc<Model>,
        tokenizer: Arc<Tokenizer>,
        config: EngineConfig,
    ) -> Result<Engine, EngineError> {
        if config.n_ctx == 0 || config.max_batch_tokens == 0 || config.max_running == 0 {
            return Err(EngineError::InvalidRequest(format!(
                "n_ctx ({}), max_batch_tokens ({}) and max_running ({}) must be at least 1",
                config.n_ctx, config.max_batch_tokens, config.max_running
            )));
        }
        if let Some(spec) = &config.spec {
            spec.validate()
                .map_err(|e| EngineError::InvalidRequest(e.to_string()))?;
            if spec.method != SpecMethod::Ngram {
                return Err(EngineError::InvalidRequest(format!(
                    "speculative method {} does not run in the engine; supported: ngram",
                    spec.method.as_str()
                )));
            }
        }
        let session = Session::with_kv(
            Arc::clone(&model),
            config.n_ctx,
            config.max_batch_tokens,
            &config.kv,
        )
        .map_err(EngineError::from)?;
        let pool = kiln_model_pool(config.threads)?;
        // The cache's geometry is in the snapshot from the start, before the scheduler
        // thread publishes its first one (a /metrics scrape may come first).
        let initial = crate::scheduler::initial_metrics(&session);
        let kv_events = config.kv_events.map(|cap| flume::bounded(cap.max(1)));
        if kv_events.is_some() {
            session.kv().set_prefix_events(true);
        }
        let shared = Arc::new(Shared {
            kv_events,
            kv_events_dropped: AtomicU64::new(0),
            config,
            inbox: Mutex::new(Inbox::default()),
            wake: Condvar::new(),
            metrics: Mutex::new(initial),
            waiting: AtomicUsize::new(0),
            next_id: AtomicU64::new(1),
            thread: Mutex::new(None),
        });
        let for_thread = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("kiln-engine".into())
            .spawn(move || {
                pool.install(|| crate::scheduler::run(&for_thread, session, &tokenizer));
            })
            .map_err(|e| EngineError::ThreadStart {
                what: "the scheduler thread".into(),
                source: Arc::new(e),
            })?;
        *lock(&shared.thread) = Some(thread);
        Ok(Engine {
            owner: Arc::new(Owner { shared, model }),
        })
    }

    fn shared(&self) -> &Arc<Shared> {
        &self.owner.shared
    }

    /// Queues a request. Refuses at once (nothing is queued) an empty or too long prompt,
    /// invalid settings, a full queue, or an engine shutting down.
    pub fn submit(&self, request: Request) -> Result<RequestHandle, EngineError> {
        let shared = self.shared();
        let cfg = &shared.config;
        if request.prompt.is_empty() {
            return Err(EngineError::EmptyPrompt);
        }
        if request.prompt.len() + request.max_tokens > cfg.n_ctx {
            return Err(EngineError::PromptTooLong {
                prompt_tokens: request.prompt.len(),
                max_tokens: request.max_tokens,
                n_ctx: cfg.n_ctx,
            });
        }
        if request.max_tokens == 0 {
            return Err(EngineError::InvalidRequest(
                "max_tokens must be at least 1".into(),
            ));
        }
        request
            .sampling
            .validate()
            .map_err(|e| EngineError::InvalidRequest(e.to_string()))?;
        if request.stop.iter().any(String::is_empty) {
            return Err(EngineError::InvalidRequest("a stop string is empty".into()));
        }
        // Room for every event of the request (its tokens and the last one), up to the
        // channel's reservation limit.
        let (tx, rx) = channel(request.max_tokens + 1);
        let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
        {
            let mut inbox = lock(&shared.inbox);
            if inbox.closed {
                return Err(EngineError::ShuttingDown);
            }
            let waiting = shared.waiting.load(Ordering::Acquire);
            if waiting >= cfg.max_queue {
                return Err(EngineError::QueueFull {
                    waiting,
                    max_queue: cfg.max_queue,
                });
            }
            shared.waiting.fetch_add(1, Ordering::AcqRel);
            inbox.new.push(Submission {
                id,
                request,
                tx,
                submitted: Instant::now(),
            });
        }
        shared.wake.notify_all();
        Ok(RequestHandle {
            id,
            rx,
            shared: Arc::clone(shared),
            ended: AtomicBool::new(false),
        })
    }

    /// A snapshot of the engine's state and counters.
    pub fn metrics(&self) -> EngineMetrics {
        let mut m = lock(&self.shared().metrics).clone();
        m.waiting = self.shared().waiting.load(Ordering::Acquire);
        m.kv_event_batches_dropped = self.shared().kv_events_dropped.load(Ordering::Relaxed);
        m
    }

    /// The KV-cache event batches, one per scheduler step that changed the prefix cache
    /// (the first one is `AllBlocksCleared`), when `EngineConfig::kv_events` asked for
    /// them; `None` otherwise. Receivers share one queue: each batch goes to one of them.
    pub fn kv_events(&self) -> Option<flume::Receiver<KvEventBatch>> {
        self.shared().kv_events.as_ref().map(|(_, rx)| rx.clone())
    }

    /// The model the engine serves, for work outside the scheduler that needs no KV cache
    /// of its own beyond one request (embeddings evaluate in a session of their own).
    pub fn model(&self) -> &Arc<Model> {
        &self.owner.model
    }

    /// The settings the engine runs with.
    pub fn config(&self) -> &EngineConfig {
        &self.shared().config
    }

    /// Stops admitting requests. `drain = true` finishes the running and waiting requests,
    /// `false` cancels them. Returns when the scheduler thread has exited.
    pub fn shutdown(&self, drain: bool) {
        self.shared().shutdown(drain);
    }
}

fn kiln_model_pool(threads: usize) -> Result<rayon::ThreadPool, EngineError> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads.max(1))
        .thread_name(|i| format!("kiln-engine-{i}"))
        .build()
        .map_err(|e| EngineError::ThreadStart {
            what: format!("{threads} threads"),
            source: Arc::new(e),
        })
}

/// A submitted request's stream of [`Event`]s. Dropping it cancels the request (its KV
/// blocks are freed at once).
pub struct RequestHandle {
    id: u64,
    rx: Receiver<Event>,
    shared: Arc<Shared>,
    /// The last event was received.
    ended: AtomicBool,
}

impl RequestHandle {
    /// The request's id (unique within the engine).
    pub fn id(&self) -> u64 {
        self.id
    }

    fn seen(&self, ev: Option<Event>) -> Option<Event> {
        match &ev {
            Some(Event::Done { .. } | Event::Error(_)) | None => {
                self.ended.store(true, Ordering::Release)
            }
            Some(Event::Token { .. }) => {}
        }
        ev
    }

    /// The next event, blocking; `None` after the last one.
    pub fn recv(&self) -> Option<Event> {
        self.seen(self.rx.recv())
    }

    /// The next event if one is ready, without blocking (nor allocating); `None` when
    /// none is (or after the last one).
    pub fn try_recv(&self) -> Option<Event> {
        match self.rx.try_recv() {
            Ok(ev) => self.seen(Some(ev)),
            Err(TryRecvError::Empty) => None,
            Err(TryRecvError::Disconnected) => self.seen(None),
        }
    }

    /// The next event, for async code; `None` after the last one.
    pub async fn recv_async(&self) -> Option<Event> {
        self.seen(self.rx.recv_async().await)
    }

    /// Cancels the request: it ends with [`crate::FinishReason::Cancelled`] and its KV
    /// blocks are freed at the scheduler's next step boundary.
    pub fn cancel(&self) {
        if !self.ended.load(Ordering::Acquire) {
            self.shared.cancel(self.id);
        }
    }
}

impl Drop for RequestHandle {
    fn drop(&mut self) {
        self.cancel();
    }
}
