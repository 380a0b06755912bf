//! Engine-wide counters and latency histograms (a snapshot is cheap to take).

/// Engine state and counters since start.
#[derive(Debug, Default)]
pub struct EngineMetrics {
    /// Sequences admitted (prefilling or decoding).
    pub running: usize,
    /// Requests submitted and not yet admitted (including preempted ones).
    pub waiting: usize,
    /// KV blocks held by sequences.
    pub kv_blocks_used: usize,
    pub kv_blocks_total: usize,
    /// Tokens per KV block.
    pub kv_block_tokens: usize,
    /// Allocated-but-unused token slots over allocated slots.
    pub kv_fragmentation: f64,
    /// Prefix-cache lookups of requests at their first admission: one per request that
    /// was admitted (vLLM's `prefix_cache_queries` / `hits` semantics). A preempted
    /// request's lookup on re-admission is counted apart, in `prefix_preempted_*`, so a
    /// request that finds its own blocks again does not count as reuse twice.
    pub prefix_queries: u64,
    /// First-admission lookups that reused at least one block.
    pub prefix_hits: u64,
    /// Prompt tokens looked up at first admission (each request's prompt, once).
    pub prefix_query_tokens: u64,
    /// Prompt tokens served from the prefix cache at first admission (each request's
    /// `usage.cached_tokens`, once).
    pub prefix_tokens_saved: u64,
    /// First-admission lookups that reused nothing, by reason.
    pub prefix_miss_short: u64,
    pub prefix_miss_evicted: u64,
    pub prefix_miss_never_seen: u64,
    /// Lookups of preempted requests on re-admission, the tokens they looked up (prompt
    /// and tokens generated before the preemption) and the tokens they found.
    pub prefix_preempted_queries: u64,
    pub prefix_preempted_query_tokens: u64,
    pub prefix_preempted_tokens_saved: u64,
    /// Sequences preempted (freed and requeued for recomputation) for lack of KV blocks.
    pub preemptions: u64,
    pub requests_finished: u64,
    pub requests_cancelled: u64,
    pub requests_failed: u64,
    /// Prompt tokens of admitted requests (counted once per request).
    pub prompt_tokens_total: u64,
    pub generated_tokens_total: u64,
    /// KV-event batches dropped because their queue was full (the consumer fell behind).
    pub kv_event_batches_dropped: u64,
    /// Scheduler steps (batched forward passes) run.
    pub steps: u64,
    /// Speculative decoding, summed over every speculating request: verification rows
    /// with a draft (`draft_steps`), drafted and accepted tokens, tokens emitted by
    /// speculating decode rows and their rows without a draft (`plain_steps`).
    pub spec: kiln_spec::SpecStats,
    pub ttft_seconds: Histogram,
    pub itl_seconds: Histogram,
    pub queue_seconds: Histogram,
    /// Duration of each step (the batched forward pass plus sampling and sending).
    pub step_seconds: Histogram,
}

impl EngineMetrics {
    /// KV blocks held by sequences over the pool's blocks, in 0–1 (cached blocks no
    /// sequence holds count as free: a prefix hit or an eviction can take them). 0 for an
    /// empty pool.
    pub fn kv_usage_ratio(&self) -> f64 {
        if self.kv_blocks_total == 0 {
            0.0
        } else {
            (self.kv_blocks_used as f64 / self.kv_blocks_total as f64).clamp(0.0, 1.0)
        }
    }
}

impl Clone for EngineMetrics {
    fn clone(&self) -> Self {
        EngineMetrics {
            ttft_seconds: self.ttft_seconds.clone(),
            itl_seconds: self.itl_seconds.clone(),
            queue_seconds: self.queue_seconds.clone(),
            step_seconds: self.step_seconds.clone(),
            ..*self
        }
    }

    /// Copies into the histograms' buffers: the scheduler publishes a snapshot every step
    /// without allocating.
    fn clone_from(&mut self, src: &Self) {
        let mut h = [
            std::mem::take(&mut self.ttft_seconds),
            std::mem::take(&mut self.itl_seconds),
            std::mem::take(&mut self.queue_seconds),
            std::mem::take(&mut self.step_seconds),
        ];
        h[0].clone_from(&src.ttft_seconds);
        h[1].clone_from(&src.itl_seconds);
        h[2].clone_from(&src.queue_seconds);
        h[3].clone_from(&src.step_seconds);
        let [ttft_seconds, itl_seconds, queue_seconds, step_seconds] = h;
        *self = EngineMetrics {
            ttft_seconds,
            itl_seconds,
            queue_seconds,
            step_seconds,
            ..*src
        };
    }
}

/// A Prometheus-style histogram: `counts[i]` observations `<= bounds[i]` (cumulative),
/// plus the total count and sum.
#[derive(Debug, Default)]
pub struct Histogram {
    pub bounds: Vec<f64>,
    pub counts: Vec<u64>,
    pub count: u64,
    pub sum: f64,
}

impl Clone for Histogram {
    fn clone(&self) -> Self {
        Histogram {
            bounds: self.bounds.clone(),
            counts: self.counts.clone(),
            ..*self
        }
    }

    /// Copies into `self`'s buffers (no allocation when the sizes match).
    fn clone_from(&mut self, src: &Self) {
        self.bounds.clone_from(&src.bounds);
        self.counts.clone_from(&src.counts);
        self.count = src.count;
        self.sum = src.sum;
    }
}

impl Histogram {
    /// An empty histogram with these upper bounds (ascending).
    pub fn with_bounds(bounds: &[f64]) -> Histogram {
        Histogram {
            bounds: bounds.to_vec(),
            counts: vec![0; bounds.len()],
            count: 0,
            sum: 0.0,
        }
    }

    /// Bounds for latencies from 1 ms to 60 s.
    pub fn latency() -> Histogram {
        Histogram::with_bounds(&[
            0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
            60.0,
        ])
    }

    /// Bounds for scheduler steps from 10 ms to 5 s, fine around the 200 ms step target
    /// and the 500 ms head-of-line limit.
    pub fn step() -> Histogram {
        Histogram::with_bounds(&[
            0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
        ])
    }

    /// Records one observation.
    pub fn observe(&mut self, v: f64) {
        for (b, c) in self.bounds.iter().zip(self.counts.iter_mut()) {
            if v <= *b {
                *c += 1;
            }
        }
        self.count += 1;
        self.sum += v;
    }

    /// The smallest bound at or below which at least `q` of the observations fall
    /// (`+∞` if beyond the last bound, `NaN` when empty).
    pub fn quantile_bound(&self, q: f64) -> f64 {
        if self.count == 0 {
            return f64::NAN;
        }
        let need = (q * self.count as f64).ceil() as u64;
        self.bounds
            .iter()
            .zip(&self.counts)
            .find(|(_, c)| **c >= need)
            .map_or(f64::INFINITY, |(b, _)| *b)
    }
}
