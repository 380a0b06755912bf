//! `cargo xtask bench cluster`: `--replicas` release `kiln serve` processes on loopback
//! (small KV pools so that eviction matters, map-encoded KV events) behind the real
//! vllm-router, once per policy (`round_robin`, `cache_aware`, `kv_aware` fed by the
//! replicas' events), each policy with fresh replicas; a seeded shared-prefix workload
//! (`--groups` documents × `--per-group` questions, shuffled, `--clients` concurrent
//! streaming clients). Per policy: prefix tokens reused (the replicas' own
//! `kiln_prefix_cache_tokens_saved_total`, once per request, summed, after − before),
//! requests per replica, preemptions (their re-admission lookups apart), failures, TTFT
//! p50/p90/p99 to the first streamed text. Then the drain run: the same
//! workload behind `--drain-policy`, one replica SIGTERMed after a third of the requests
//! (`--shutdown-delay`, the router's 1 s health checks), which must lose nothing. Writes
//! `cluster.json` and `cluster.md` under `<target>/kiln-bench/cluster/`; fails when a
//! request failed. The processes are driven by `kiln_testkit::cluster`, which kiln-cli's
//! cluster test also uses.

use serde::Serialize;

use crate::XtaskError;
use crate::bench::common::{build_kiln, failed, out_dir, positive, report_header, write};
use kiln_testkit::cluster::{
    DrainRun, Policy, PolicyRun, ReplicaSpec, Workload, router_available, run_drain, run_policy,
};

/// `cargo xtask bench cluster`: prefix-aware routing through vllm-router, and a drain.
#[derive(clap::Args, Debug)]
pub struct ClusterArgs {
    /// The model (a known name or a path).
    #[arg(long, default_value = "smollm2-135m")]
    model: String,
    /// Replicas.
    #[arg(long, default_value_t = 3, value_parser = positive)]
    replicas: usize,
    /// Documents (shared prefixes).
    #[arg(long, default_value_t = 6, value_parser = positive)]
    groups: usize,
    /// Requests per document.
    #[arg(long, default_value_t = 8, value_parser = positive)]
    per_group: usize,
    /// Words per document (about 1.15 tokens each with SmolLM2's tokenizer: 800 words make
    /// a prompt of about 950 tokens, a retrieved-context size; the question is about 20).
    #[arg(long, default_value_t = 800, value_parser = positive)]
    prefix_words: usize,
    /// Concurrent streaming clients.
    #[arg(long, default_value_t = 3, value_parser = positive)]
    clients: usize,
    /// `max_tokens` per request (64: an answer of a few sentences, so a request spends
    /// time decoding as served requests do, not only prefilling).
    #[arg(long, default_value_t = 64, value_parser = positive)]
    max_tokens: usize,
    /// `--kv-memory` of each replica, sized by docs/scale-out.md's capacity rule: (documents
    /// ÷ replicas) × document KV plus the running requests' own tokens. 51M: 145 blocks of 16
    /// tokens of SmolLM2-135M (360 KiB each), two 60-block documents and three requests'
    /// questions and answers; the cluster holds the six documents, one replica a third.
    #[arg(long, default_value = "51M")]
    kv_memory: String,
    /// `--ctx-size` of each replica.
    #[arg(long, default_value_t = 2048, value_parser = positive)]
    ctx: usize,
    /// `--threads` of each replica.
    #[arg(long, default_value_t = 1, value_parser = positive)]
    threads: usize,
    /// `--shutdown-delay` of each replica, seconds (above the router's 1 s health checks).
    #[arg(long, default_value_t = 4)]
    shutdown_delay: u64,
    /// The policies compared (repeatable; default all three).
    #[arg(long = "policy", value_parser = Policy::parse)]
    policies: Vec<Policy>,
    /// The policy of the drain run.
    #[arg(long, default_value = "round_robin", value_parser = Policy::parse)]
    drain_policy: Policy,
    /// Leave out the drain run.
    #[arg(long)]
    no_drain: bool,
    /// Seed of the documents and the request order.
    #[arg(long, default_value_t = 7)]
    seed: u64,
}

#[derive(Serialize)]
struct Report {
    model: String,
    replicas: usize,
    kv_memory: String,
    workload: Workload,
    loadavg_before: String,
    loadavg_after: String,
    policies: Vec<PolicyRun>,
    drain: Option<DrainRun>,
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

fn cluster_err(e: kiln_testkit::cluster::ClusterError) -> XtaskError {
    failed("cluster", e.to_string())
}

pub fn run(a: &ClusterArgs) -> Result<(), XtaskError> {
    // Before building anything: a missing router is the commonest failure.
    router_available().map_err(cluster_err)?;
    let kiln = build_kiln()?;
    let dir = out_dir("cluster")?;
    let spec = ReplicaSpec {
        bin: kiln.bin.clone(),
        model: a.model.clone(),
        kv_memory: a.kv_memory.clone(),
        ctx: a.ctx,
        threads: a.threads,
        shutdown_delay: a.shutdown_delay,
        log_dir: dir.clone(),
    };
    let workload = Workload {
        groups: a.groups,
        per_group: a.per_group,
        prefix_words: a.prefix_words,
        clients: a.clients,
        max_tokens: a.max_tokens,
        seed: a.seed,
    };
    let policies = if a.policies.is_empty() {
        Policy::ALL.to_vec()
    } else {
        a.policies.clone()
    };
    let loadavg_before = loadavg();
    let mut runs = Vec::new();
    for p in policies {
        eprintln!(
            "xtask bench cluster: {} ({} replicas)",
            p.name(),
            a.replicas
        );
        let r = run_policy(&spec, a.replicas, p, &workload).map_err(cluster_err)?;
        eprintln!(
            "  reused {} of {} prompt tokens, {} preemptions, TTFT p50 {:.3} s p90 {:.3} s, {} failures, per replica {:?}",
            r.reused_tokens,
            r.query_tokens,
            r.preemptions,
            r.ttft_p50,
            r.ttft_p90,
            r.failures,
            r.per_replica
        );
        runs.push(r);
    }
    let drain = if a.no_drain {
        None
    } else {
        eprintln!(
            "xtask bench cluster: drain ({}, SIGTERM to one replica, shutdown delay {} s)",
            a.drain_policy.name(),
            a.shutdown_delay
        );
        let d = run_drain(&spec, a.replicas, a.drain_policy, &workload).map_err(cluster_err)?;
        eprintln!(
            "  {} of {} completed, {} failures; the replica exited {:?} s after SIGTERM ({:?})",
            d.completed, d.requests, d.failures, d.exit_seconds, d.exit_status
        );
        Some(d)
    };
    let report = Report {
        model: a.model.clone(),
        replicas: a.replicas,
        kv_memory: a.kv_memory.clone(),
        workload,
        loadavg_before,
        loadavg_after: loadavg(),
        policies: runs,
        drain,
    };
    let json = serde_json::to_string_pretty(&report)
        .map_err(|e| failed("output", format!("cannot serialise the report: {e}")))?;
    write(&dir.join("cluster.json"), json)?;
    let md = markdown(&report, &kiln_bench::Machine::detect());
    write(&dir.join("cluster.md"), &md)?;
    println!("{md}");
    eprintln!("xtask bench cluster: wrote {}", dir.display());
    let failures: usize = report.policies.iter().map(|r| r.failures).sum::<usize>()
        + report.drain.as_ref().map_or(0, |d| d.failures);
    if failures > 0 {
        return Err(failed(
            "cluster",
            format!("{failures} requests failed; see cluster.json"),
        ));
    }
    Ok(())
}

fn markdown(r: &Report, machine: &kiln_bench::Machine) -> String {
    let w = &r.workload;
    let mut s = format!(
        "# Cluster: {} replicas of {} behind vllm-router\n\n{}- workload: {} documents of {} words × {} questions ({} requests, seed {}), {} concurrent streaming clients, max_tokens {}\n- each replica: --kv-memory {}, map-encoded KV events\n- load average before/after: {} / {}\n\n",
        r.replicas,
        r.model,
        report_header(machine),
        w.groups,
        w.prefix_words,
        w.per_group,
        w.groups * w.per_group,
        w.seed,
        w.clients,
        w.max_tokens,
        r.kv_memory,
        r.loadavg_before,
        r.loadavg_after,
    );
    let base = r
        .policies
        .iter()
        .find(|p| p.policy == Policy::RoundRobin)
        .map(|p| p.reused_tokens);
    s.push_str("| policy | prefix tokens reused | × round_robin | of prompt tokens | TTFT p50 | TTFT p90 | requests per replica | preemptions | failures |\n");
    s.push_str("|---|---:|---:|---:|---:|---:|---|---:|---:|\n");
    for p in &r.policies {
        let ratio = base.filter(|b| *b > 0.0).map_or_else(
            || "–".to_string(),
            |b| format!("{:.2}", p.reused_tokens / b),
        );
        let per: Vec<String> = p.per_replica.iter().map(|n| format!("{n}")).collect();
        s.push_str(&format!(
            "| {} | {} | {} | {:.0}% | {:.0} ms | {:.0} ms | {} | {} | {} |\n",
            p.policy.name(),
            p.reused_tokens,
            ratio,
            100.0 * p.reused_tokens / p.query_tokens.max(1.0),
            p.ttft_p50 * 1e3,
            p.ttft_p90 * 1e3,
            per.join(" / "),
            p.preemptions,
            p.failures,
        ));
    }
    s.push_str("\nPrefix tokens reused and prompt tokens are each request's own, once (`kiln_prefix_cache_tokens_saved_total`, `kiln_prefix_cache_query_tokens_total`: vLLM's `prefix_cache_hits` / `queries`); a preempted request's lookup on re-admission is counted apart:\n\n");
    for p in &r.policies {
        s.push_str(&format!(
            "- {}: {} preemptions; re-admitted requests looked up {} tokens and found {} again\n",
            p.policy.name(),
            p.preemptions,
            p.preempted_query_tokens,
            p.preempted_reused_tokens,
        ));
    }
    for p in r.policies.iter().filter(|p| p.policy == Policy::KvAware) {
        s.push_str(&format!(
            "\nkv_aware's own counters: {} placement lookups found blocks the replicas' events announced, {} found none; {} token inputs from the replicas' render endpoints.\n",
            p.router.placement_hits, p.router.placement_misses, p.router.render_inputs,
        ));
    }
    if let Some(d) = &r.drain {
        s.push_str(&format!(
            "\nDrain ({}): one replica SIGTERMed after {} of {} requests completed: {} completed, **{} failed**; the replica ended {} requests after SIGTERM and exited {} ({}).\n",
            d.policy.name(),
            d.sigterm_after,
            d.requests,
            d.completed,
            d.failures,
            d.served_after_sigterm
                .map_or_else(|| "an unknown number of".to_string(), |n| n.to_string()),
            d.exit_seconds
                .map_or_else(|| "not within the wait".to_string(), |t| format!("{t:.1} s later")),
            d.exit_status.as_deref().unwrap_or("still running"),
        ));
    }
    s
}
