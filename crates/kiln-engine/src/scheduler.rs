//! The scheduler thread: one loop, one batched forward pass per step.
//!
//! Each step (see `docs/engine.md`):
//! 1. takes new submissions and cancellations from the inbox (cancelled sequences free
//!    their KV blocks at once);
//! 2. plans the batch under `max_batch_tokens`: first the decode token of every running
//!    sequence (oldest first); then admits waiting requests (first come, first served)
//!    while KV blocks and `max_running` allow, attaching cached prefixes; then prefill
//!    chunks, highest response ratio first (`1 + (time without progress + one step) /
//!    predicted prefill time`: a fresh short prompt goes before a long one that is
//!    progressing, and a prompt left without progress gains priority until it goes first,
//!    so none starves). While streams decode,
//!    each chunk is the largest that keeps the step's predicted duration, decode rows
//!    included, within `step_target_ms`; the prediction comes from `StepCost`, a model
//!    with a per-token and an attention (context) term refitted after every step (see
//!    `cost.rs`). If the decode rows alone fill the target, the first prompt in line still
//!    gets a small floor chunk (≤ 16 tokens and ≤ a quarter of the target, ≥ 1 token), so
//!    prefill always progresses. Blocks for every planned row are reserved before the
//!    pass; when the pool runs dry the youngest running sequence is preempted (freed and
//!    requeued at the front with its generated tokens, to be recomputed);
//! 3. runs the pass (`Session::forward_batch`), catching panics: a failed pass fails only
//!    that step's requests;
//! 4. samples, streams and finishes each request whose logits came back, each under its
//!    own `catch_unwind`; the step's duration teaches the cost model and goes into the
//!    `step_seconds` histogram.

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use kiln_kv::{KvError, MissReason, PrefixHit};
use kiln_model::{BatchSeq, ModelError, SeqId, Session};
use kiln_sample::Vocab;
use kiln_spec::{SpecConfig, SpecMethod};
use kiln_tokenizer::Tokenizer;

use crate::cost::{Candidate, Row, StepCost, Work, prefill_chunks_into};
use crate::sequence::{Outcome, Seq};
use crate::shared::{Shared, Submission, lock};
use crate::{EngineError, EngineMetrics, FinishReason, Histogram, KvEvent, KvEventBatch};

/// The scheduler's state.
struct Sched<'t> {
    shared: &'t Shared,
    session: Session,
    tok: &'t Tokenizer,
    vocab: Arc<Vocab>,
    /// The longest token text in bytes: what a sequence's text buffers reserve.
    longest_piece: usize,
    /// Admitted sequences, oldest first.
    running: Vec<Seq<'t>>,
    /// Not admitted (new, or preempted: those go to the front).
    waiting: VecDeque<Seq<'t>>,
    m: EngineMetrics,
    /// Planned rows of the current step: (request id, tokens).
    plan: Vec<(u64, usize)>,
    /// Ended requests whose last event is sent once the metrics count them.
    outbox: Vec<(Seq<'t>, Result<FinishReason, EngineError>)>,
    /// The model of a step's duration, fitted on every step.
    cost: StepCost,
    /// A step's working lists, kept for their allocations.
    buf: StepBuffers,
    /// Token events with text sent in the current step.
    texts: usize,
    /// Whether the current step scores drafted tokens (`Session::forward_scored`).
    scored: bool,
    /// What a request that opts in to speculation uses when the engine has no settings.
    default_spec: SpecConfig,
}

/// The working lists of a step, empty between steps and kept for their allocations: after
/// the first steps, a step allocates nothing (checked by the `zero_alloc` test).
#[derive(Default)]
struct StepBuffers {
    /// Ids of the decoding sequences.
    ids: Vec<u64>,
    pending: Vec<Pending>,
    candidates: Vec<Candidate>,
    chunks: Vec<usize>,
    /// Index in `running` of each planned row.
    idx: Vec<usize>,
    /// The pass's rows (see [`recycle`]).
    rows: Vec<BatchSeq<'static>>,
    /// Whether each row asks for logits.
    wants: Vec<bool>,
    finished: Vec<(u64, Result<FinishReason, EngineError>)>,
    /// After a scoring pass: the positions each row's sequence keeps.
    settle: Vec<(u64, SeqId, usize)>,
}

/// An empty row list with `v`'s allocation, for any lifetime: the rows borrow one step's
/// sequences, the allocation is kept for every step.
fn recycle<'b>(mut v: Vec<BatchSeq<'_>>) -> Vec<BatchSeq<'b>> {
    v.clear();
    // Collecting an emptied vector's iterator into one of a same-layout type reuses its
    // allocation.
    v.into_iter()
        .map(|_| unreachable!("the vector is empty"))
        .collect()
}

/// The step length the prefill order assumes when there is no step target.
const DEFAULT_STEP_MS: f64 = 200.0;

/// The metrics of an engine that has done nothing yet: the cache's geometry and empty
/// latency histograms.
pub(crate) fn initial_metrics(session: &Session) -> EngineMetrics {
    let kv = session.kv().config();
    EngineMetrics {
        kv_blocks_total: kv.n_blocks,
        kv_block_tokens: kv.block_size,
        ttft_seconds: Histogram::latency(),
        itl_seconds: Histogram::latency(),
        queue_seconds: Histogram::latency(),
        step_seconds: Histogram::step(),
        ..EngineMetrics::default()
    }
}

/// The body of the scheduler thread.
pub(crate) fn run(shared: &Shared, session: Session, tok: &Tokenizer) {
    let m = initial_metrics(&session);
    let vocab = crate::vocab::sampler_vocab(tok);
    let longest_piece = (0..vocab.len() as u32)
        .map(|id| vocab.token_bytes(id).len())
        .max()
        .unwrap_or(0);
    let mut s = Sched {
        shared,
        session,
        tok,
        vocab,
        longest_piece,
        running: Vec::new(),
        waiting: VecDeque::new(),
        m,
        plan: Vec::new(),
        outbox: Vec::new(),
        cost: StepCost::default(),
        buf: StepBuffers::default(),
        texts: 0,
        scored: false,
        default_spec: SpecConfig::new(SpecMethod::Ngram),
    };
    let probe = shared.config.step_probe.clone();
    s.publish();
    s.send_kv_events(vec![KvEvent::AllBlocksCleared]);
    loop {
        let (new, cancel, stop) = {
            let mut inbox = lock(&shared.inbox);
            while inbox.new.is_empty()
                && inbox.cancel.is_empty()
                && inbox.stop.is_none()
                && s.running.is_empty()
                && s.waiting.is_empty()
            {
                inbox = shared.wake.wait(inbox).unwrap_or_else(|e| e.into_inner());
            }
            (
                std::mem::take(&mut inbox.new),
                std::mem::take(&mut inbox.cancel),
                inbox.stop,
            )
        };
        for sub in new {
            s.intake(sub);
        }
        for id in cancel {
            s.cancel(id, FinishReason::Cancelled);
        }
        match stop {
            Some(false) => break,
            Some(true) if s.running.is_empty() && s.waiting.is_empty() => break,
            _ => {}
        }
        if let Some(p) = &probe {
            (p.0)(None);
        }
        s.texts = 0;
        if !(s.running.is_empty() && s.waiting.is_empty()) {
            s.step();
        }
        s.flush();
        if let Some(p) = &probe {
            (p.0)(Some(s.texts));
        }
    }
    // Whatever is left is cancelled.
    let ids: Vec<u64> = s
        .running
        .iter()
        .chain(s.waiting.iter())
        .map(|q| q.id)
        .collect();
    for id in ids {
        s.cancel(id, FinishReason::Cancelled);
    }
    s.flush();
}

/// A sequence in prefill, as the planner orders it.
#[derive(Clone, Copy, Debug)]
struct Pending {
    id: u64,
    /// Milliseconds since its (re)admission or its last prefill chunk.
    waited_ms: f64,
    /// Predicted milliseconds to evaluate its whole remaining prompt (> 0).
    service_ms: f64,
    candidate: Candidate,
}

impl Pending {
    /// Its response ratio: `1 + (waited + one step) / service`.
    fn ratio(&self, step_ms: f64) -> f64 {
        1.0 + (self.waited_ms + step_ms) / self.service_ms
    }
}

/// Orders the prompts in prefill, highest response ratio first (ties: shortest remaining
/// prompt, then arrival): `1 + (waited + step_ms) / service`, where `waited` is the time
/// without progress and `service` the predicted time to evaluate the rest of the prompt.
/// A fresh 32-token prompt (service ~0.1 s) starts near `1 + step/0.1` and so goes before
/// a long prompt that progressed last step (ratio ~1); a long prompt left without progress
/// gains priority linearly and overtakes any prompt that has waited less than its share,
/// so no prompt starves behind a stream of shorter ones.
fn order_prefill(p: &mut [Pending], step_ms: f64) {
    p.sort_by(|a, b| {
        b.ratio(step_ms)
            .total_cmp(&a.ratio(step_ms))
            .then(a.candidate.remaining.cmp(&b.candidate.remaining))
            .then(a.id.cmp(&b.id))
    });
}

/// Panics when `f` targets `q` (a test-only [`crate::FaultPlan`]).
fn inject(f: &crate::FaultPlan, q: &Seq<'_>) {
    if q.generated >= f.after_tokens && q.tokens[..q.n_prompt].contains(&f.prompt_token) {
        panic!(
            "injected fault: request {} (prompt token {}) after {} tokens",
            q.id, f.prompt_token, q.generated
        );
    }
}

/// A panic payload as text.
fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_string()
    }
}

impl<'t> Sched<'t> {
    fn intake(&mut self, sub: Submission) {
        let shared = self.shared;
        let spec = match sub.request.speculate {
            Some(false) => None,
            Some(true) => Some(shared.config.spec.as_ref().unwrap_or(&self.default_spec)),
            None => shared.config.spec.as_ref(),
        };
        match Seq::new(
            sub.id,
            sub.request,
            sub.tx,
            sub.submitted,
            self.tok,
            &self.vocab,
            self.longest_piece,
            spec,
        ) {
            Ok(q) => self.waiting.push_back(q),
            Err((tx, e)) => {
                self.shared.waiting.fetch_sub(1, Ordering::AcqRel);
                self.m.requests_failed += 1;
                let _ = tx.send(crate::Event::Error(e));
            }
        }
    }

    /// Frees a sequence's KV blocks (if admitted).
    fn release(&mut self, q: &mut Seq<'t>) {
        if let Some(kv) = q.kv.take() {
            // The id came from this session and is freed once.
            let _ = self.session.free_sequence(kv);
        }
        q.done = 0;
    }

    /// Ends request `id` wherever it is, freeing its blocks at once.
    fn cancel(&mut self, id: u64, finish: FinishReason) {
        let q = if let Some(i) = self.running.iter().position(|q| q.id == id) {
            Some(self.running.remove(i))
        } else if let Some(i) = self.waiting.iter().position(|q| q.id == id) {
            self.shared.waiting.fetch_sub(1, Ordering::AcqRel);
            self.waiting.remove(i)
        } else {
            None
        };
        if let Some(q) = q {
            self.end(q, Ok(finish));
        }
    }

    /// Fails running request at index `i` with `e`.
    fn fail(&mut self, i: usize, e: EngineError) {
        let q = self.running.remove(i);
        self.end(q, Err(e));
    }

    /// Ends a request removed from the queues: frees its blocks at once, counts it, and
    /// queues its last event (sent after the next metrics snapshot).
    fn end(&mut self, mut q: Seq<'t>, r: Result<FinishReason, EngineError>) {
        self.release(&mut q);
        match &r {
            Ok(FinishReason::Cancelled) => self.m.requests_cancelled += 1,
            Ok(_) => self.m.requests_finished += 1,
            Err(_) => self.m.requests_failed += 1,
        }
        self.outbox.push((q, r));
    }

    /// Publishes the metrics, then sends the last events of the requests that ended, so a
    /// client that sees `Done` sees the metrics count it (and its blocks freed).
    fn flush(&mut self) {
        self.publish();
        if self.shared.kv_events.is_some() {
            let mut blocks = Vec::new();
            self.session.kv().drain_prefix_events(&mut blocks);
            if !blocks.is_empty() {
                self.send_kv_events(blocks.into_iter().map(KvEvent::from).collect());
            }
        }
        let now = Instant::now();
        for (q, r) in self.outbox.drain(..) {
            match r {
                Ok(f) => q.send_done(f, now),
                Err(e) => q.send_error(e),
            }
        }
    }

    /// Queues one step's KV events without waiting: a full queue drops the batch (and
    /// counts it).
    fn send_kv_events(&self, events: Vec<KvEvent>) {
        if let Some((tx, _)) = &self.shared.kv_events {
            let batch = KvEventBatch {
                ts: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0.0, |d| d.as_secs_f64()),
                block_size: self.session.kv().config().block_size,
                events,
            };
            if tx.try_send(batch).is_err() {
                self.shared
                    .kv_events_dropped
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Preempts the youngest running sequence: frees its blocks and requeues it at the
    /// front of the queue, to be recomputed with its generated tokens. Returns its id.
    fn preempt_youngest(&mut self) -> Option<u64> {
        let mut q = self.running.pop()?;
        self.release(&mut q);
        let id = q.id;
        self.plan.retain(|&(p, _)| p != id);
        self.m.preemptions += 1;
        self.shared.waiting.fetch_add(1, Ordering::AcqRel);
        self.waiting.push_front(q);
        Some(id)
    }

    /// Reserves blocks for `n` more tokens of running sequence `id`, preempting younger
    /// sequences (or, last, itself) while the pool is short. Returns whether `id` is still
    /// running with its blocks reserved.
    fn reserve(&mut self, id: u64, n: usize) -> bool {
        loop {
            let Some(q) = self.running.iter().find(|q| q.id == id) else {
                return false;
            };
            let Some(kv) = q.kv else { return false };
            match self.session.reserve(kv, n) {
                Ok(()) => return true,
                Err(ModelError::Kv(KvError::OutOfMemory { .. })) => {
                    if self.preempt_youngest() == Some(id) {
                        return false;
                    }
                }
                Err(e) => {
                    if let Some(i) = self.running.iter().position(|q| q.id == id) {
                        self.fail(i, e.into());
                    }
                    return false;
                }
            }
        }
    }

    /// Free blocks plus idle cached (evictable) ones.
    fn available_blocks(&self) -> usize {
        let st = self.session.kv().stats();
        st.free_blocks + st.idle_cached_blocks
    }

    /// Plans and runs one step.
    fn step(&mut self) {
        let cfg = &self.shared.config;
        let (max_tokens, max_running) = (cfg.max_batch_tokens, cfg.max_running);
        let mut budget = max_tokens;
        self.plan.clear();

        // 1. Decode rows, oldest first.
        let mut decoding = std::mem::take(&mut self.buf.ids);
        decoding.clear();
        decoding.extend(
            self.running
                .iter()
                .filter(|q| q.remaining() == 1 && q.generated > 0)
                .map(|q| q.id),
        );
        //    A speculating sequence's row also carries its draft, within the budget left
        //    after one token for each sequence still to plan: drafts never crowd out
        //    another sequence's decode token.
        self.scored = false;
        for (i, &id) in decoding.iter().enumerate() {
            if budget == 0 {
                break;
            }
            let later = decoding.len() - i - 1;
            let d = self.draft(id, budget.saturating_sub(1 + later));
            if d > 0 && self.reserve_draft(id, 1 + d) {
                self.plan.push((id, 1 + d));
                budget -= 1 + d;
                self.scored = true;
                continue;
            }
            if let Some(sp) = self
                .running
                .iter_mut()
                .find(|q| q.id == id)
                .and_then(|q| q.spec.as_mut())
            {
                sp.undraft();
            }
            if self.reserve(id, 1) {
                self.plan.push((id, 1));
                budget -= 1;
            }
        }
        self.buf.ids = decoding;
        // 2. Admission, first come first served, while KV blocks and `max_running` allow
        //    (each admitted prompt is then prefilled by the chunks below).
        while self.running.len() < max_running && !self.waiting.is_empty() {
            if !self.admit_front() {
                break;
            }
        }
        // 3. Prefill chunks. While streams decode, the prefill share of the step is limited
        //    so the predicted step (decode rows included) fits the step time target, so
        //    running streams keep their pace. Order: highest response ratio first, so a
        //    short request is not queued behind the chunks of a long one and a long one
        //    left without progress gains priority until it goes (`order_prefill`).
        let now = Instant::now();
        let decode = Work::of(self.plan.iter().filter_map(|&(id, n)| {
            let q = self.running.iter().find(|q| q.id == id)?;
            Some(Row {
                ctx: q.done,
                n,
                logits: true,
            })
        }));
        let empty = self.cost.predict(&Work::default());
        let cost = &self.cost;
        let mut pending = std::mem::take(&mut self.buf.pending);
        pending.clear();
        pending.extend(
            self.running
                .iter_mut()
                .filter(|q| !(q.remaining() == 1 && q.generated > 0))
                .map(|q| {
                    let since = *q.prefill_progress.get_or_insert(now);
                    let candidate = Candidate {
                        ctx: q.done,
                        remaining: q.remaining(),
                    };
                    let service = Work::default().with(Row {
                        ctx: candidate.ctx,
                        n: candidate.remaining,
                        logits: true,
                    });
                    let service_ms = match (cost.predict(&service), empty) {
                        (Some(s), Some(e)) => s - e,
                        _ => candidate.remaining as f64,
                    };
                    Pending {
                        id: q.id,
                        waited_ms: now.duration_since(since).as_secs_f64() * 1e3,
                        service_ms: service_ms.max(1e-3),
                        candidate,
                    }
                }),
        );
        let step_ms = if cfg.step_target_ms > 0.0 {
            cfg.step_target_ms
        } else {
            DEFAULT_STEP_MS
        };
        order_prefill(&mut pending, step_ms);
        let mut candidates = std::mem::take(&mut self.buf.candidates);
        candidates.clear();
        candidates.extend(pending.iter().map(|p| p.candidate));
        let mut chunks = std::mem::take(&mut self.buf.chunks);
        prefill_chunks_into(
            &self.cost,
            cfg.step_target_ms,
            budget,
            &decode,
            &candidates,
            &mut chunks,
        );
        for (p, &n) in pending.iter().zip(&chunks) {
            // A scoring pass returns the logits of every token of a row that asks for
            // them: a chunk that would end its prompt stops one token short, so the
            // prompt's last token comes alone (in this pass if the chunk was that token,
            // else in the next).
            let n = if self.scored && n == p.candidate.remaining && n > 1 {
                n - 1
            } else {
                n
            };
            if n > 0 && self.reserve(p.id, n) {
                self.plan.push((p.id, n));
                if let Some(q) = self.running.iter_mut().find(|q| q.id == p.id) {
                    q.prefill_progress = Some(now);
                }
            }
        }
        self.buf.pending = pending;
        self.buf.candidates = candidates;
        self.buf.chunks = chunks;
        if self.plan.is_empty() {
            return;
        }
        // The step's work, as planned (preemption may have removed rows since).
        let work = Work::of(self.plan.iter().filter_map(|&(id, n)| {
            let q = self.running.iter().find(|q| q.id == id)?;
            Some(Row {
                ctx: q.done,
                n,
                logits: q.done + n >= q.tokens.len(),
            })
        }));
        let started = Instant::now();
        let steps = self.m.steps;
        self.run_plan();
        let secs = started.elapsed().as_secs_f64();
        if self.m.steps > steps {
            // A pass ran (a failed or empty plan teaches nothing).
            self.cost.observe(&work, secs * 1e3);
            self.m.step_seconds.observe(secs);
        }
    }

    /// Prepares the draft of decoding sequence `id` for this step, at most `cap` tokens
    /// (and what its context and `max_tokens` leave room for), and returns its length (0:
    /// a plain decode row). Whether and how much a sequence drafts is its own adaptive
    /// controller's decision (`kiln_spec::DraftLength`: longer after accepted drafts,
    /// shorter after rejections, paused when its acceptance is too low to pay).
    fn draft(&mut self, id: u64, cap: usize) -> usize {
        let n_ctx = self.shared.config.n_ctx;
        let Some(q) = self.running.iter_mut().find(|q| q.id == id) else {
            return 0;
        };
        let cap = cap
            .min(q.max_tokens.saturating_sub(q.generated + 1))
            .min(n_ctx.saturating_sub(q.done + 1));
        match q.spec.as_mut() {
            Some(sp) => sp.draft(&q.tokens, cap),
            None => 0,
        }
    }

    /// Reserves blocks for a drafted row of `n` tokens of running sequence `id` without
    /// preempting anyone (a draft is not worth a recomputation): false when the pool is
    /// short.
    fn reserve_draft(&mut self, id: u64, n: usize) -> bool {
        let Some(kv) = self.running.iter().find(|q| q.id == id).and_then(|q| q.kv) else {
            return false;
        };
        self.session.reserve(kv, n).is_ok()
    }

    /// Admits the first waiting request if the pool can hold its whole remaining prompt on
    /// top of the prompts already admitted but not yet prefilled (plus one block of
    /// headroom per running sequence). Its chunks are planned by the caller.
    fn admit_front(&mut self) -> bool {
        let Some(front) = self.waiting.front() else {
            return false;
        };
        let kvc = self.session.kv().config().clone();
        let max_prefix = front.tokens.len().saturating_sub(1);
        let cached = self.session.kv().lookup_prefix(&front.tokens, max_prefix);
        let need = kvc.blocks_for_tokens(front.tokens.len()) - kvc.blocks_for_tokens(cached);
        let headroom = self.running.len();
        let pending: usize = self
            .running
            .iter()
            .filter(|q| !(q.remaining() == 1 && q.generated > 0))
            .map(|q| kvc.blocks_for_tokens(q.remaining()))
            .sum();
        if !self.running.is_empty() && need + headroom + pending > self.available_blocks() {
            return false;
        }
        let Some(mut q) = self.waiting.pop_front() else {
            return false;
        };
        let kv = self.session.new_sequence();
        let lookup = self.session.attach_prefix(kv, &q.tokens).ok();
        let hit = lookup.map_or(0, |h| h.tokens);
        if let Some(h) = lookup {
            self.count_lookup(q.admitted.is_some(), q.tokens.len(), h);
        }
        q.kv = Some(kv);
        q.done = hit;
        let now = Instant::now();
        q.prefill_progress = Some(now);
        if q.admitted.is_none() {
            q.admitted = Some(now);
            q.cached = hit;
            self.m.prompt_tokens_total += q.n_prompt as u64;
            self.m
                .queue_seconds
                .observe(now.duration_since(q.submitted).as_secs_f64());
        }
        self.shared.waiting.fetch_sub(1, Ordering::AcqRel);
        self.running.push(q);
        true
    }

    /// Counts an admission's prefix lookup of `tokens` positions: a request's first
    /// admission in the request counters (once per request, as vLLM counts
    /// `prefix_cache_queries` / `hits`), a preempted request's re-admission apart.
    fn count_lookup(&mut self, preempted: bool, tokens: usize, hit: PrefixHit) {
        let m = &mut self.m;
        if preempted {
            m.prefix_preempted_queries += 1;
            m.prefix_preempted_query_tokens += tokens as u64;
            m.prefix_preempted_tokens_saved += hit.tokens as u64;
            return;
        }
        m.prefix_queries += 1;
        m.prefix_query_tokens += tokens as u64;
        m.prefix_tokens_saved += hit.tokens as u64;
        match hit.miss {
            None if hit.tokens > 0 => m.prefix_hits += 1,
            Some(MissReason::ShorterThanBlock) => m.prefix_miss_short += 1,
            Some(MissReason::Evicted) => m.prefix_miss_evicted += 1,
            Some(MissReason::NeverSeen) | None => m.prefix_miss_never_seen += 1,
        }
    }

    /// Runs the planned rows through the model and handles their logits.
    fn run_plan(&mut self) {
        // Row order = plan order; index of each planned sequence in `running`.
        let mut idx = std::mem::take(&mut self.buf.idx);
        idx.clear();
        for &(id, _) in &self.plan {
            match self.running.iter().position(|q| q.id == id) {
                Some(i) => idx.push(i),
                None => break,
            }
        }
        if idx.len() != self.plan.len() {
            self.buf.idx = idx;
            return;
        }
        let mut rows = recycle(std::mem::take(&mut self.buf.rows));
        rows.extend(idx.iter().zip(&self.plan).filter_map(|(&i, &(_, n))| {
            let q = &self.running[i];
            let kv = q.kv?;
            let tokens = match &q.spec {
                // A drafted decode row: the pending token, then the draft.
                Some(sp) if q.remaining() == 1 && n > 1 => sp.row(),
                _ => &q.tokens[q.done..q.done + n],
            };
            Some(BatchSeq {
                seq: kv,
                tokens,
                logits: q.done + n >= q.tokens.len(),
                prompt_rows: BatchSeq::prompt_rows_of(q.done, n, q.n_prompt),
            })
        }));
        self.buf.idx = idx;
        let mut wants = std::mem::take(&mut self.buf.wants);
        wants.clear();
        wants.extend(rows.iter().map(|r| r.logits));
        let vocab = self.session.model().config().vocab_size;
        let session = &mut self.session;
        let batch = &rows;
        let scored = self.scored;
        let result = catch_unwind(AssertUnwindSafe(move || {
            let session = session; // moved, not reborrowed: the closure is FnOnce
            if scored {
                session.forward_scored(batch)
            } else {
                session.forward_batch(batch)
            }
        }));
        self.buf.rows = recycle(rows);
        self.m.steps += 1;
        let logits = match result {
            Ok(Ok(l)) => l,
            Ok(Err(e)) => {
                self.buf.wants = wants;
                return self.fail_plan(e.into());
            }
            Err(p) => {
                self.buf.wants = wants;
                return self.fail_plan(EngineError::Panic(panic_text(&*p)));
            }
        };
        let now = Instant::now();
        let mut k = 0;
        let mut finished = std::mem::take(&mut self.buf.finished);
        finished.clear();
        let mut settle = std::mem::take(&mut self.buf.settle);
        settle.clear();
        let plan = std::mem::take(&mut self.plan);
        for (&(id, n), &want) in plan.iter().zip(&wants) {
            // Logit rows of this row: every token's in a scoring pass, else the last's.
            let out_rows = match (want, scored) {
                (false, _) => 0,
                (true, true) => n,
                (true, false) => 1,
            };
            let base = k;
            k += out_rows;
            let Some(q) = self.running.iter_mut().find(|q| q.id == id) else {
                continue;
            };
            if q.remaining() == 1 && n > 1 {
                let Some(kv) = q.kv else { continue };
                let scores = &logits[base * vocab..(base + n) * vocab];
                let fault = self.shared.config.fault.as_ref();
                let r = verify_row(q, n - 1, scores, vocab, now, fault, &mut self.m);
                self.texts += r.texts;
                // The pending token and the accepted drafts stay; the rest goes.
                settle.push((id, kv, q.done));
                if let Some(end) = r.end {
                    finished.push((id, end));
                }
                continue;
            }
            if q.remaining() == 1
                && q.generated > 0
                && let Some(sp) = q.spec.as_mut()
            {
                // A speculating sequence's decode row without a draft.
                sp.record(0, 0, 1);
                self.m.spec.plain_steps += 1;
                self.m.spec.emitted += 1;
            }
            q.done += n;
            if scored && let Some(kv) = q.kv {
                settle.push((id, kv, q.done));
            }
            if !want {
                continue;
            }
            let row = &logits[(base + out_rows - 1) * vocab..(base + out_rows) * vocab];
            let itl = &mut self.m.itl_seconds;
            let had_first = q.ttft().is_some();
            let fault = self.shared.config.fault.as_ref();
            let out = catch_unwind(AssertUnwindSafe(|| {
                if let Some(f) = fault {
                    inject(f, q);
                }
                q.on_logits(row, now, |g| itl.observe(g))
            }));
            self.m.generated_tokens_total += 1;
            if !had_first && let Some(t) = q.ttft() {
                self.m.ttft_seconds.observe(t);
            }
            if matches!(out, Ok(Ok(_))) && q.emitted_text() {
                self.texts += 1;
            }
            match out {
                Ok(Ok(Outcome::Continue)) => {}
                Ok(Ok(Outcome::Finished(f))) => finished.push((id, Ok(f))),
                Ok(Ok(Outcome::Disconnected)) => finished.push((id, Ok(FinishReason::Cancelled))),
                Ok(Err(e)) => finished.push((id, Err(e))),
                Err(p) => finished.push((id, Err(EngineError::Panic(panic_text(&*p))))),
            }
        }
        self.plan = plan;
        self.plan.clear();
        self.buf.wants = wants;
        // After a scoring pass: cut each row's rejected positions, and only then make its
        // full pages findable by the prefix cache.
        for &(id, kv, len) in &settle {
            if let Err(e) = self.session.settle(kv, len)
                && !finished.iter().any(|f| f.0 == id)
            {
                finished.push((id, Err(e.into())));
            }
        }
        settle.clear();
        self.buf.settle = settle;
        for (id, r) in finished.drain(..) {
            let Some(i) = self.running.iter().position(|q| q.id == id) else {
                continue;
            };
            let q = self.running.remove(i);
            self.end(q, r);
        }
        self.buf.finished = finished;
    }

    /// Fails every request of the current step (their blocks are freed; the KV they
    /// appended this step goes with them).
    fn fail_plan(&mut self, e: EngineError) {
        let plan = std::mem::take(&mut self.plan);
        for (id, _) in plan {
            if let Some(i) = self.running.iter().position(|q| q.id == id) {
                self.fail(i, e.clone());
            }
        }
    }

    /// Copies the counters and the cache's state into the shared snapshot.
    fn publish(&mut self) {
        let st = self.session.kv().stats();
        let m = &mut self.m;
        m.running = self.running.len();
        m.waiting = self.waiting.len();
        m.kv_blocks_used = st.used_blocks;
        m.kv_blocks_total = st.n_blocks;
        m.kv_block_tokens = st.block_size;
        m.kv_fragmentation = st.waste();
        lock(&self.shared.metrics).clone_from(m);
    }
}

/// What verifying a drafted row did.
struct Verified {
    /// Token events with text it sent.
    texts: usize,
    /// How the request ended, if it did.
    end: Option<Result<FinishReason, EngineError>>,
}

/// Verifies sequence `q`'s drafted row: `scores` holds the target's logits at its
/// `drafted + 1` positions. Position by position, the sequence's sampler picks the token
/// exactly as plain decoding would (same chain, same random stream), and a drafted token
/// is accepted when it is that token. For a deterministic (n-gram) draft this is the
/// speculative-sampling rule itself — the draft is accepted with probability `p(draft)`
/// and a rejection leaves `p` without the draft, renormalised — drawn with plain
/// decoding's own random numbers, so a seeded request's output does not depend on whether
/// or how much it drafted. Each token is streamed through the same checks as any other
/// ([`Seq::on_token`]: stop strings, end of generation, grammar, `max_tokens`,
/// log-probabilities from that position's logits), and verification stops at the first
/// rejection or at the request's end, so a stop inside an accepted run cuts it there.
/// Afterwards `q.done` counts the positions its KV sequence keeps (every emitted token but
/// the last), and `m` counts the tokens and the speculation.
fn verify_row(
    q: &mut Seq<'_>,
    drafted: usize,
    scores: &[f32],
    vocab: usize,
    now: Instant,
    fault: Option<&crate::FaultPlan>,
    m: &mut EngineMetrics,
) -> Verified {
    let itl = &mut m.itl_seconds;
    let had_first = q.ttft().is_some();
    let before = q.tokens.len();
    let mut texts = 0;
    let mut accepted = 0;
    let out = catch_unwind(AssertUnwindSafe(|| {
        let mut outcome = Outcome::Continue;
        for j in 0..=drafted {
            let row = &scores[j * vocab..(j + 1) * vocab];
            if let Some(f) = fault {
                inject(f, q);
            }
            let draft = q.spec.as_ref().and_then(|s| s.drafted().get(j).copied());
            let tok = q.sample(row)?;
            outcome = q.on_token(tok, row, now, |g| itl.observe(g))?;
            if !matches!(outcome, Outcome::Disconnected) && q.emitted_text() {
                texts += 1;
            }
            let hit = draft == Some(tok);
            accepted += usize::from(hit);
            if !hit || !matches!(outcome, Outcome::Continue) {
                break;
            }
        }
        Ok::<_, EngineError>(outcome)
    }));
    let emitted = q.tokens.len() - before;
    q.done = q.tokens.len() - 1;
    m.generated_tokens_total += emitted as u64;
    if !had_first && let Some(t) = q.ttft() {
        m.ttft_seconds.observe(t);
    }
    if out.is_ok()
        && let Some(sp) = q.spec.as_mut()
    {
        sp.record(drafted, accepted, emitted);
        let s = &mut m.spec;
        s.emitted += emitted as u64;
        s.draft_steps += 1;
        s.drafted += drafted as u64;
        s.accepted += accepted as u64;
    }
    let end = match out {
        Ok(Ok(Outcome::Continue)) => None,
        Ok(Ok(Outcome::Finished(f))) => Some(Ok(f)),
        Ok(Ok(Outcome::Disconnected)) => Some(Ok(FinishReason::Cancelled)),
        Ok(Err(e)) => Some(Err(e)),
        Err(p) => Some(Err(EngineError::Panic(panic_text(&*p)))),
    };
    Verified { texts, end }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A prompt in prefill: `remaining` tokens predicted at `service_ms`, `waited_ms`
    /// without progress.
    fn pending(id: u64, remaining: usize, service_ms: f64, waited_ms: f64) -> Pending {
        Pending {
            id,
            waited_ms,
            service_ms,
            candidate: Candidate { ctx: 0, remaining },
        }
    }

    fn order(mut p: Vec<Pending>) -> Vec<u64> {
        order_prefill(&mut p, 200.0);
        p.iter().map(|e| e.id).collect()
    }

    #[test]
    fn prefill_goes_shortest_first_among_prompts_that_just_arrived() {
        let p = vec![
            pending(1, 2048, 8000.0, 0.0),
            pending(2, 32, 100.0, 0.0),
            pending(3, 300, 1000.0, 0.0),
        ];
        assert_eq!(order(p), [2, 3, 1]);
    }

    #[test]
    fn a_fresh_short_prompt_goes_before_a_long_one_that_is_progressing() {
        // The long prompt got a chunk one step ago; the short one just arrived.
        let p = vec![pending(1, 1500, 6000.0, 200.0), pending(2, 32, 100.0, 0.0)];
        assert_eq!(order(p), [2, 1]);
    }

    #[test]
    fn a_long_prompt_left_without_progress_overtakes_shorter_ones() {
        // 30 s without progress (8 s of work left): before a 32-token prompt that just
        // arrived and a 300-token one that waited a second.
        let p = vec![
            pending(2, 32, 100.0, 0.0),
            pending(3, 300, 1000.0, 1000.0),
            pending(1, 2048, 8000.0, 30_000.0),
        ];
        assert_eq!(order(p), [1, 2, 3]);
        // Once the short prompt has waited a step more than its share, it goes first
        // again, so neither starves.
        let p = vec![
            pending(2, 32, 100.0, 400.0),
            pending(1, 2048, 8000.0, 30_200.0),
        ];
        assert_eq!(order(p), [2, 1]);
    }

    #[test]
    fn priority_grows_with_time_without_progress() {
        // However long a prompt is, some wait puts it first.
        for waited in [0.0, 10_000.0, 100_000.0, 1_000_000.0] {
            let p = vec![
                pending(1, 4000, 20_000.0, waited),
                pending(2, 16, 50.0, 0.0),
            ];
            let first = order(p)[0];
            assert_eq!(first == 1, waited >= 100_000.0, "waited {waited} ms");
        }
    }
}
