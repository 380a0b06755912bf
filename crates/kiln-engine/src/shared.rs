//! State shared by the engine's handles ([`crate::Engine`], [`crate::RequestHandle`]) and
//! the scheduler thread: the inbox clients write to, the wake-up, the published metrics.
//! `engine.rs` (the handles) and `scheduler.rs` (the loop) both build on this module, so
//! the edges form a ladder: engine → scheduler → shared, and engine → shared.

use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Instant;

use crate::channel::Sender;
use crate::{EngineConfig, EngineMetrics, Event, KvEventBatch, Request};

/// A request on its way to the scheduler.
pub(crate) struct Submission {
    pub id: u64,
    pub request: Request,
    pub tx: Sender<Event>,
    pub submitted: Instant,
}

/// What clients hand the scheduler thread.
#[derive(Default)]
pub(crate) struct Inbox {
    pub new: Vec<Submission>,
    pub cancel: Vec<u64>,
    /// `Some(drain)` once shutdown was asked for.
    pub stop: Option<bool>,
    /// No more submissions accepted.
    pub closed: bool,
}

/// State shared by the engine handles, request handles and the scheduler thread.
pub(crate) struct Shared {
    pub config: EngineConfig,
    pub inbox: Mutex<Inbox>,
    pub wake: Condvar,
    pub metrics: Mutex<EngineMetrics>,
    /// The KV-event queue (when `config.kv_events` asks for one): the scheduler
    /// `try_send`s each step's batch; [`crate::Engine::kv_events`] hands out receivers.
    pub kv_events: Option<(flume::Sender<KvEventBatch>, flume::Receiver<KvEventBatch>)>,
    /// Batches dropped because the queue was full.
    pub kv_events_dropped: AtomicU64,
    /// Requests submitted and not yet admitted.
    pub waiting: AtomicUsize,
    pub next_id: AtomicU64,
    /// The scheduler thread, joined by [`Shared::shutdown`].
    pub thread: Mutex<Option<JoinHandle<()>>>,
}

/// Locks a mutex, ignoring poisoning (the data guarded here stays consistent: every
/// critical section is a handful of pushes and copies).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    pub(crate) fn cancel(&self, id: u64) {
        lock(&self.inbox).cancel.push(id);
        self.wake.notify_all();
    }

    /// Closes the inbox, tells the scheduler to stop (draining or cancelling) and joins it.
    pub(crate) fn shutdown(&self, drain: bool) {
        {
            let mut inbox = lock(&self.inbox);
            inbox.closed = true;
            if inbox.stop.is_none() {
                inbox.stop = Some(drain);
            }
        }
        self.wake.notify_all();
        let thread = lock(&self.thread).take();
        if let Some(t) = thread {
            // A panic outside a request's work has already failed every request.
            let _ = t.join();
        }
    }
}
