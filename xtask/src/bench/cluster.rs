//! `cargo xtask bench cluster`: `--replicas` release `kiln serve` processes on loopback
//! (small KV pools so that eviction matters, map-encoded KV events) behind the real
//! vllm-router, once per policy (`round_robin`, `cache_aware`, `kv_aware` fed by the
//! replicas' events), each policy with fresh replicas; a seeded shared-prefix workload,
//! by default multi-turn chat (`--conversations` × `--turns`, a shared system prompt, each
//! turn resending the conversation with the model's answers, `--clients` concurrent
//! streaming clients with `--active` conversations open each), or `--workload documents`
//! (`--groups` documents × `--per-group` questions, shuffled). Per policy: prefix tokens reused (the replicas' own
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
    Documents, DrainRun, MultiTurn, Policy, PolicyRun, ReplicaSpec, Workload, router_available,
    run_drain, run_policy,
};

/// Which workload the clients replay.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkloadKind {
    /// Chat conversations sharing a system prompt, each turn resending the whole
    /// conversation with the model's answers (`/v1/chat/completions`).
    MultiTurn,
    /// Documents each asked several questions (`/v1/completions`), the former default.
    Documents,
}

/// `cargo xtask bench cluster`: prefix-aware routing through vllm-router, and a drain.
#[derive(clap::Args, Debug)]
pub struct ClusterArgs {
    /// The model (a known name or a path).
    #[arg(long, default_value = "smollm2-135m")]
    model: String,
    /// Replicas.
    #[arg(long, default_value_t = 3, value_parser = positive)]
    replicas: usize,
    /// The workload: `multi-turn` chat or `documents` × questions.
    #[arg(long, value_enum, default_value_t = WorkloadKind::MultiTurn)]
    workload: WorkloadKind,
    /// multi-turn: conversations.
    #[arg(long, default_value_t = 12, value_parser = positive)]
    conversations: usize,
    /// multi-turn: user turns per conversation (vLLM's multi-turn benchmark: 6 to 9).
    #[arg(long, default_value_t = 6, value_parser = positive)]
    turns: usize,
    /// multi-turn: WikiText-2 words in a conversation's first user turn, the passage it
    /// is about (300 words: about 400 tokens; vLLM's benchmark puts about 1000 unique
    /// tokens in the first turn).
    #[arg(long, default_value_t = 300, value_parser = positive)]
    first_turn_words: usize,
    /// multi-turn: WikiText-2 words in each later user turn (100 words with the question:
    /// about 150 tokens; vLLM's benchmark: 120 to 160).
    #[arg(long, default_value_t = 100, value_parser = positive)]
    turn_words: usize,
    /// multi-turn: conversations each client keeps open at once (three clients × 2: the six
    /// active conversations of vLLM's benchmark).
    #[arg(long, default_value_t = 2, value_parser = positive)]
    active: usize,
    /// multi-turn: mean milliseconds a client waits after each answer (exponential,
    /// seeded). It stands for the users' reading time and, as many independent users do,
    /// makes the clients' requests interleave in no fixed cycle (three closed-loop clients
    /// without it take turns, and round robin then pins each client to one replica).
    #[arg(long, default_value_t = 1000)]
    think_ms: u64,
    /// documents: documents (shared prefixes).
    #[arg(long, default_value_t = 6, value_parser = positive)]
    groups: usize,
    /// documents: requests per document.
    #[arg(long, default_value_t = 8, value_parser = positive)]
    per_group: usize,
    /// documents: words per document (about 1.15 tokens each with SmolLM2's tokenizer: 800
    /// words make a prompt of about 950 tokens, a retrieved-context size; the question is
    /// about 20).
    #[arg(long, default_value_t = 800, value_parser = positive)]
    prefix_words: usize,
    /// Concurrent streaming clients.
    #[arg(long, default_value_t = 3, value_parser = positive)]
    clients: usize,
    /// `max_tokens` per request (64: an answer of a few sentences, so a request spends
    /// time decoding as served requests do, not only prefilling).
    #[arg(long, default_value_t = 64, value_parser = positive)]
    max_tokens: usize,
    /// `--kv-memory` of each replica, sized by docs/scale-out.md's capacity rule. Default
    /// multi-turn 90M: 256 blocks of 16 tokens of SmolLM2-135M (360 KiB each): the system
    /// prompt (25 blocks) and two of the six open conversations at their longest (about
    /// 105 blocks each past it), the cluster's share per replica, not all six. Default
    /// documents 51M: 145 blocks, two 60-block documents and three requests' questions and
    /// answers; the cluster holds the six documents, one replica a third.
    #[arg(long)]
    kv_memory: Option<String>,
    /// `--ctx-size` of each replica (default multi-turn 4096, documents 2048).
    #[arg(long, value_parser = positive)]
    ctx: Option<usize>,
    /// `--threads` of each replica.
    #[arg(long, default_value_t = 1, value_parser = positive)]
    threads: usize,
    /// `--shutdown-delay` of each replica, seconds (above the router's 1 s health checks).
    #[arg(long, default_value_t = 4)]
    shutdown_delay: u64,
    /// The policies compared (repeatable; default all three).
    #[arg(long = "policy", value_parser = Policy::parse)]
    policies: Vec<Policy>,
    /// An argument for vllm-router's command line in the policy runs (repeatable; e.g.
    /// `--router-arg=--cache-threshold --router-arg=0.5`), after the bench's own.
    #[arg(long = "router-arg", allow_hyphen_values = true)]
    router_args: Vec<String>,
    /// The policy of the drain run.
    #[arg(long, default_value = "round_robin", value_parser = Policy::parse)]
    drain_policy: Policy,
    /// Leave out the drain run.
    #[arg(long)]
    no_drain: bool,
    /// Seed of the texts and the request order.
    #[arg(long, default_value_t = 7)]
    seed: u64,
}

impl ClusterArgs {
    fn workload(&self) -> Workload {
        match self.workload {
            WorkloadKind::MultiTurn => Workload::MultiTurn(MultiTurn {
                conversations: self.conversations,
                turns: self.turns,
                first_turn_words: self.first_turn_words,
                turn_words: self.turn_words,
                clients: self.clients,
                active: self.active,
                think_ms: self.think_ms,
                max_tokens: self.max_tokens,
                seed: self.seed,
            }),
            WorkloadKind::Documents => Workload::Documents(Documents {
                groups: self.groups,
                per_group: self.per_group,
                prefix_words: self.prefix_words,
                clients: self.clients,
                max_tokens: self.max_tokens,
                seed: self.seed,
            }),
        }
    }

    fn kv_memory(&self) -> String {
        self.kv_memory.clone().unwrap_or_else(|| {
            match self.workload {
                WorkloadKind::MultiTurn => "90M",
                WorkloadKind::Documents => "51M",
            }
            .to_string()
        })
    }

    fn ctx(&self) -> usize {
        self.ctx.unwrap_or(match self.workload {
            WorkloadKind::MultiTurn => 4096,
            WorkloadKind::Documents => 2048,
        })
    }
}

#[derive(Serialize)]
struct Report {
    model: String,
    replicas: usize,
    kv_memory: String,
    ctx: usize,
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
        kv_memory: a.kv_memory(),
        ctx: a.ctx(),
        threads: a.threads,
        shutdown_delay: a.shutdown_delay,
        log_dir: dir.clone(),
    };
    let workload = a.workload();
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
        let r = run_policy(&spec, a.replicas, p, &a.router_args, &workload).map_err(cluster_err)?;
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
        kv_memory: a.kv_memory(),
        ctx: a.ctx(),
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
    let mut s = format!(
        "# Cluster: {} replicas of {} behind vllm-router\n\n{}- workload: {}\n- each replica: --kv-memory {} --ctx-size {}, map-encoded KV events\n- load average before/after: {} / {}\n\n",
        r.replicas,
        r.model,
        report_header(machine),
        r.workload.describe(),
        r.kv_memory,
        r.ctx,
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
        let name = if p.router_args.is_empty() {
            p.policy.name().to_string()
        } else {
            format!("{} (`{}`)", p.policy.name(), p.router_args.join(" "))
        };
        s.push_str(&format!(
            "| {} | {} | {} | {:.0}% | {:.0} ms | {:.0} ms | {} | {} | {} |\n",
            name,
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
