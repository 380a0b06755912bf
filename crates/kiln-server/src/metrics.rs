//! `GET /metrics`: the engine's snapshot in Prometheus' text exposition format (0.0.4).

use std::fmt::Write;

use kiln_engine::{EngineMetrics, Histogram};

/// Which other engines' metric names `/metrics` also publishes, beside Kiln's own.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MetricsCompat {
    /// vLLM's names (`vllm:num_requests_waiting`, `vllm:kv_cache_usage_perc`, …), which
    /// routers and the Gateway API Inference Extension read by default.
    #[default]
    Vllm,
    /// Kiln's names only.
    None,
}

impl MetricsCompat {
    /// Parses `vllm` or `none`.
    pub fn parse(s: &str) -> Result<MetricsCompat, String> {
        match s {
            "vllm" => Ok(MetricsCompat::Vllm),
            "none" => Ok(MetricsCompat::None),
            other => Err(format!(
                "unknown metrics compatibility {other:?} (supported: vllm, none)"
            )),
        }
    }
}

/// Counters the server keeps itself (requests it refused before the engine saw them, …).
#[derive(Debug, Default, Clone, Copy)]
pub struct ServerCounters {
    pub http_requests: u64,
    pub http_errors_4xx: u64,
    pub http_errors_5xx: u64,
    pub client_disconnects: u64,
}

fn gauge(out: &mut String, name: &str, help: &str, value: f64) {
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
    );
}

fn counter(out: &mut String, name: &str, help: &str, value: u64) {
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
    );
}

/// A label value as the text format wants it (backslash, quote and newline escaped).
fn label_value(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn labelled_counter(out: &mut String, name: &str, help: &str, label: &str, values: &[(&str, u64)]) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
    for (l, v) in values {
        let _ = writeln!(out, "{name}{{{label}=\"{l}\"}} {v}");
    }
}

fn histogram(out: &mut String, name: &str, help: &str, h: &Histogram) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
    for (b, c) in h.bounds.iter().zip(&h.counts) {
        let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {c}");
    }
    let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", h.count);
    let _ = writeln!(out, "{name}_sum {}", h.sum);
    let _ = writeln!(out, "{name}_count {}", h.count);
}

/// The exposition text of one snapshot.
pub fn render(m: &EngineMetrics, s: &ServerCounters, loading: bool) -> String {
    let mut o = String::with_capacity(4096);
    gauge(
        &mut o,
        "kiln_model_loaded",
        "1 once the model is loaded and the engine runs.",
        if loading { 0.0 } else { 1.0 },
    );
    gauge(
        &mut o,
        "kiln_requests_running",
        "Sequences admitted to the engine (prefilling or decoding).",
        m.running as f64,
    );
    gauge(
        &mut o,
        "kiln_requests_waiting",
        "Requests queued in the engine, not yet admitted (including preempted ones).",
        m.waiting as f64,
    );
    gauge(
        &mut o,
        "kiln_kv_blocks_used",
        "KV cache blocks held by sequences.",
        m.kv_blocks_used as f64,
    );
    gauge(
        &mut o,
        "kiln_kv_blocks_total",
        "KV cache blocks in the pool.",
        m.kv_blocks_total as f64,
    );
    gauge(
        &mut o,
        "kiln_kv_block_tokens",
        "Tokens per KV cache block.",
        m.kv_block_tokens as f64,
    );
    gauge(
        &mut o,
        "kiln_kv_cache_usage_ratio",
        "KV cache blocks held by sequences over the pool's blocks, 0-1 (cached blocks no sequence holds count as free).",
        m.kv_usage_ratio(),
    );
    gauge(
        &mut o,
        "kiln_kv_fragmentation_ratio",
        "Allocated but unused token slots over allocated slots.",
        m.kv_fragmentation,
    );
    counter(
        &mut o,
        "kiln_prefix_cache_queries_total",
        "Prefix-cache lookups of requests at their first admission (one per request; a preempted request's re-admission: kiln_prefix_cache_preempted_queries_total).",
        m.prefix_queries,
    );
    counter(
        &mut o,
        "kiln_prefix_cache_hits_total",
        "First-admission prefix-cache lookups that reused at least one block.",
        m.prefix_hits,
    );
    counter(
        &mut o,
        "kiln_prefix_cache_query_tokens_total",
        "Prompt tokens looked up in the prefix cache, once per request (the tokens found: kiln_prefix_cache_tokens_saved_total).",
        m.prefix_query_tokens,
    );
    labelled_counter(
        &mut o,
        "kiln_prefix_cache_misses_total",
        "First-admission prefix-cache lookups that reused nothing, by reason.",
        "reason",
        &[
            ("short", m.prefix_miss_short),
            ("evicted", m.prefix_miss_evicted),
            ("never_seen", m.prefix_miss_never_seen),
        ],
    );
    counter(
        &mut o,
        "kiln_prefix_cache_tokens_saved_total",
        "Prompt tokens whose KV came from the prefix cache, once per request (its cached_tokens).",
        m.prefix_tokens_saved,
    );
    counter(
        &mut o,
        "kiln_prefix_cache_preempted_queries_total",
        "Prefix-cache lookups of preempted requests on re-admission.",
        m.prefix_preempted_queries,
    );
    counter(
        &mut o,
        "kiln_prefix_cache_preempted_query_tokens_total",
        "Tokens (prompt and generated) looked up by preempted requests on re-admission.",
        m.prefix_preempted_query_tokens,
    );
    counter(
        &mut o,
        "kiln_prefix_cache_preempted_tokens_saved_total",
        "Tokens preempted requests found in the prefix cache on re-admission.",
        m.prefix_preempted_tokens_saved,
    );
    counter(
        &mut o,
        "kiln_preemptions_total",
        "Sequences preempted (freed and requeued for recomputation) for lack of KV blocks.",
        m.preemptions,
    );
    labelled_counter(
        &mut o,
        "kiln_requests_total",
        "Engine requests ended, by outcome.",
        "outcome",
        &[
            ("finished", m.requests_finished),
            ("cancelled", m.requests_cancelled),
            ("failed", m.requests_failed),
        ],
    );
    counter(
        &mut o,
        "kiln_prompt_tokens_total",
        "Prompt tokens of admitted requests.",
        m.prompt_tokens_total,
    );
    counter(
        &mut o,
        "kiln_generation_tokens_total",
        "Tokens generated.",
        m.generated_tokens_total,
    );
    counter(
        &mut o,
        "kiln_kv_event_batches_dropped_total",
        "KV-cache event batches dropped because their queue was full (the publisher fell behind).",
        m.kv_event_batches_dropped,
    );
    counter(
        &mut o,
        "kiln_engine_steps_total",
        "Scheduler steps (batched forward passes).",
        m.steps,
    );
    let spec = &m.spec;
    counter(
        &mut o,
        "kiln_spec_decode_drafts_total",
        "Speculative decoding: decode rows that carried a draft (verification passes).",
        spec.draft_steps,
    );
    counter(
        &mut o,
        "kiln_spec_decode_draft_tokens_total",
        "Speculative decoding: tokens drafted.",
        spec.drafted,
    );
    counter(
        &mut o,
        "kiln_spec_decode_accepted_tokens_total",
        "Speculative decoding: drafted tokens accepted.",
        spec.accepted,
    );
    gauge(
        &mut o,
        "kiln_spec_decode_acceptance_rate",
        "Speculative decoding: accepted over drafted tokens since start (0 before any draft).",
        spec.acceptance_rate(),
    );
    gauge(
        &mut o,
        "kiln_spec_decode_mean_accepted_length",
        "Speculative decoding: tokens emitted per verification pass with a draft (1 + accepted per draft; 0 before any draft).",
        spec.mean_accepted_length(),
    );
    histogram(
        &mut o,
        "kiln_time_to_first_token_seconds",
        "Submission to first token.",
        &m.ttft_seconds,
    );
    histogram(
        &mut o,
        "kiln_inter_token_latency_seconds",
        "Gap between consecutive tokens of a request.",
        &m.itl_seconds,
    );
    histogram(
        &mut o,
        "kiln_queue_time_seconds",
        "Submission to admission.",
        &m.queue_seconds,
    );
    histogram(
        &mut o,
        "kiln_engine_step_seconds",
        "Duration of a scheduler step (batched forward pass, sampling and sending).",
        &m.step_seconds,
    );
    counter(
        &mut o,
        "kiln_http_requests_total",
        "HTTP requests to the completion endpoints.",
        s.http_requests,
    );
    labelled_counter(
        &mut o,
        "kiln_http_errors_total",
        "Completion requests answered with an error, by class.",
        "class",
        &[("4xx", s.http_errors_4xx), ("5xx", s.http_errors_5xx)],
    );
    counter(
        &mut o,
        "kiln_client_disconnects_total",
        "Streams whose client went away before the end (their requests were cancelled).",
        s.client_disconnects,
    );
    o
}

/// vLLM's names for the figures routers read, each with vLLM's `model_name` label:
/// requests running and waiting, KV usage in 0–1 (under its current name and its older
/// `gpu_` one), the cache's geometry as `cache_config_info` labels, and prefix-cache
/// queries and hits counted in tokens. Appended after [`render`]'s text.
pub fn render_vllm(out: &mut String, m: &EngineMetrics, model_name: &str) {
    let model = label_value(model_name);
    let mut family = |name: &str, kind: &str, help: &str, labels: &str, value: f64| {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{{{labels}}} {value}"
        );
    };
    let ml = format!("model_name=\"{model}\"");
    family(
        "vllm:num_requests_running",
        "gauge",
        "Number of requests in model execution batches.",
        &ml,
        m.running as f64,
    );
    family(
        "vllm:num_requests_waiting",
        "gauge",
        "Number of requests waiting to be processed.",
        &ml,
        m.waiting as f64,
    );
    let usage = m.kv_usage_ratio();
    family(
        "vllm:kv_cache_usage_perc",
        "gauge",
        "KV-cache usage. 1 means 100 percent usage.",
        &ml,
        usage,
    );
    family(
        "vllm:gpu_cache_usage_perc",
        "gauge",
        "KV-cache usage (older name). 1 means 100 percent usage.",
        &ml,
        usage,
    );
    family(
        "vllm:cache_config_info",
        "gauge",
        "Information of the KV cache config.",
        &format!(
            "{ml},block_size=\"{}\",num_gpu_blocks=\"{}\"",
            m.kv_block_tokens, m.kv_blocks_total
        ),
        1.0,
    );
    family(
        "vllm:prefix_cache_queries_total",
        "counter",
        "Prefix cache queries, in terms of number of queried tokens.",
        &ml,
        m.prefix_query_tokens as f64,
    );
    family(
        "vllm:prefix_cache_hits_total",
        "counter",
        "Prefix cache hits, in terms of number of cached tokens.",
        &ml,
        m.prefix_tokens_saved as f64,
    );
    family(
        "vllm:spec_decode_num_drafts_total",
        "counter",
        "Number of spec decoding drafts.",
        &ml,
        m.spec.draft_steps as f64,
    );
    family(
        "vllm:spec_decode_num_draft_tokens_total",
        "counter",
        "Number of draft tokens.",
        &ml,
        m.spec.drafted as f64,
    );
    family(
        "vllm:spec_decode_num_accepted_tokens_total",
        "counter",
        "Number of accepted tokens.",
        &ml,
        m.spec.accepted as f64,
    );
}

/// Parses exposition text into `(name with labels, value)` pairs (for tests and the
/// convoy suite).
pub fn parse(text: &str) -> Vec<(String, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn speculative_counters_appear_under_kilns_names_and_vllms() {
        let m = EngineMetrics {
            spec: kiln_engine::SpecStats {
                draft_steps: 4,
                drafted: 10,
                accepted: 6,
                emitted: 10,
                plain_steps: 1,
                ..kiln_engine::SpecStats::default()
            },
            ..EngineMetrics::default()
        };
        let mut text = render(&m, &ServerCounters::default(), false);
        render_vllm(&mut text, &m, "m");
        let p = parse(&text);
        let get = |k: &str| p.iter().find(|(n, _)| n == k).map(|(_, v)| *v);
        assert_eq!(get("kiln_spec_decode_drafts_total"), Some(4.0));
        assert_eq!(get("kiln_spec_decode_draft_tokens_total"), Some(10.0));
        assert_eq!(get("kiln_spec_decode_accepted_tokens_total"), Some(6.0));
        assert_eq!(get("kiln_spec_decode_acceptance_rate"), Some(0.6));
        assert_eq!(get("kiln_spec_decode_mean_accepted_length"), Some(2.5));
        let vllm = |k: &str| get(&format!("vllm:{k}{{model_name=\"m\"}}"));
        assert_eq!(vllm("spec_decode_num_drafts_total"), Some(4.0));
        assert_eq!(vllm("spec_decode_num_draft_tokens_total"), Some(10.0));
        assert_eq!(vllm("spec_decode_num_accepted_tokens_total"), Some(6.0));
    }

    #[test]
    fn exposition_has_types_histogram_buckets_and_parses_back() {
        let mut h = Histogram::with_bounds(&[0.1, 1.0]);
        h.observe(0.05);
        h.observe(0.5);
        h.observe(5.0);
        let m = EngineMetrics {
            kv_blocks_used: 3,
            kv_blocks_total: 100,
            prefix_miss_evicted: 2,
            prefix_tokens_saved: 40,
            prefix_preempted_tokens_saved: 16,
            ttft_seconds: h,
            ..EngineMetrics::default()
        };
        let text = render(&m, &ServerCounters::default(), false);
        assert!(text.contains("# TYPE kiln_time_to_first_token_seconds histogram"));
        assert!(text.contains("# TYPE kiln_spec_decode_accepted_tokens_total counter"));
        let p = parse(&text);
        let get = |k: &str| p.iter().find(|(n, _)| n == k).map(|(_, v)| *v);
        assert_eq!(get("kiln_kv_blocks_used"), Some(3.0));
        assert_eq!(get("kiln_kv_blocks_total"), Some(100.0));
        assert_eq!(
            get("kiln_prefix_cache_misses_total{reason=\"evicted\"}"),
            Some(2.0)
        );
        // A preempted request's re-lookup is its own family, never in the reuse count.
        assert_eq!(get("kiln_prefix_cache_tokens_saved_total"), Some(40.0));
        assert_eq!(
            get("kiln_prefix_cache_preempted_tokens_saved_total"),
            Some(16.0)
        );
        assert_eq!(
            get("kiln_time_to_first_token_seconds_bucket{le=\"0.1\"}"),
            Some(1.0)
        );
        assert_eq!(
            get("kiln_time_to_first_token_seconds_bucket{le=\"1\"}"),
            Some(2.0)
        );
        assert_eq!(
            get("kiln_time_to_first_token_seconds_bucket{le=\"+Inf\"}"),
            Some(3.0)
        );
        assert_eq!(get("kiln_time_to_first_token_seconds_count"), Some(3.0));
        // Every sample line has a TYPE line for its family.
        for (name, _) in &p {
            let family = name.split('{').next().unwrap();
            let base = family
                .trim_end_matches("_bucket")
                .trim_end_matches("_sum")
                .trim_end_matches("_count");
            assert!(
                text.contains(&format!("# TYPE {family} "))
                    || text.contains(&format!("# TYPE {base} ")),
                "{name} has no TYPE line"
            );
        }
    }
}
