//! Three SmolLM2-135M replicas (this crate's `kiln` binary, small KV pools, map-encoded
//! KV events) behind the real vllm-router on loopback, with a small seeded shared-prefix
//! workload: every policy (`round_robin`; `cache_aware`, the router's own prefix tree;
//! `kv_aware`, fed by the replicas' KV events and `/v1/completions/render`) completes every
//! request, `cache_aware` reuses more prefix tokens than `round_robin` does (the bench measures the
//! factor), as counted by the replicas themselves; `kv_aware` gets token ids from the replicas'
//! render endpoint and its index, built from their events, matches them; and a
//! replica SIGTERMed mid-run (`--shutdown-delay`, the router's health checks) loses no
//! request of a small multi-turn chat workload (conversations sharing a system prompt,
//! each turn resending the conversation with the model's streamed answers). vllm-router is required (`pip install vllm-router`; `cargo xtask ci` installs
//! it): without it these tests fail, naming it. The full-size run with TTFT figures is
//! `cargo xtask bench cluster`.

use std::path::PathBuf;

use kiln_testkit::cluster::{
    Documents, MultiTurn, Policy, ReplicaSpec, Workload, router_available, run_drain, run_policy,
};

/// Replicas for the documents workload.
fn spec(tag: &str) -> ReplicaSpec {
    let model = kiln_testkit::model_path("smollm2-135m");
    let log_dir = std::env::temp_dir().join(format!("kiln-cluster-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&log_dir).expect("log directory");
    ReplicaSpec {
        bin: PathBuf::from(env!("CARGO_BIN_EXE_kiln")),
        model: model.display().to_string(),
        // About 45 blocks of 16 tokens each: two of the six documents (about 18 blocks
        // each) fit beside a running request, six do not.
        kv_memory: "16M".into(),
        ctx: 512,
        threads: 1,
        shutdown_delay: 4,
        log_dir,
    }
}

fn workload() -> Workload {
    Workload::Documents(Documents {
        groups: 6,
        per_group: 8,
        prefix_words: 200,
        clients: 3,
        max_tokens: 4,
        seed: 7,
    })
}

/// Six conversations of three turns (18 chat requests of about 500 to 700 prompt tokens),
/// three clients with two open each, on replicas whose 68-block pools hold the system
/// prompt and two conversations.
fn chat() -> (ReplicaSpec, Workload) {
    let spec = ReplicaSpec {
        kv_memory: "24M".into(),
        // A replica's pool must hold one whole context: 1024 tokens are 64 blocks.
        ctx: 1024,
        ..spec("drain")
    };
    let w = Workload::MultiTurn(MultiTurn {
        conversations: 6,
        turns: 3,
        first_turn_words: 80,
        turn_words: 30,
        clients: 3,
        active: 2,
        think_ms: 200,
        max_tokens: 8,
        seed: 7,
    });
    (spec, w)
}

fn require_router() {
    if let Err(e) = router_available() {
        panic!("{e}");
    }
}

#[test]
fn every_policy_completes_every_request_cache_aware_reuses_more_than_round_robin_and_kv_aware_matches_the_replicas_events()
 {
    require_router();
    let spec = spec("policies");
    let w = workload();
    let runs: Vec<_> = Policy::ALL
        .into_iter()
        .map(|p| run_policy(&spec, 3, p, &[], &w).unwrap_or_else(|e| panic!("{}: {e}", p.name())))
        .collect();
    for r in &runs {
        eprintln!("{}", serde_json::to_string(r).expect("json"));
        assert_eq!(
            r.failures,
            0,
            "{}: {:#?}",
            r.policy.name(),
            r.failure_samples
        );
        assert_eq!(r.requests, w.requests());
        assert_eq!(
            r.per_replica.iter().sum::<f64>(),
            r.requests as f64,
            "{}: every request ended on some replica",
            r.policy.name()
        );
    }
    let rr = runs[0].reused_tokens;
    let cache_aware = &runs[1];
    // The target is 2× round_robin. `cargo xtask bench cluster` measured 2.16× (and
    // this workload 2.06×), but the factor depends on how the three clients' requests
    // interleave (one client at a time gave 1.05×), so a run on a busy machine could fall
    // under 2× without anything being wrong: the test holds the direction, the bench the
    // figure (docs/scale-out.md).
    assert!(
        cache_aware.reused_tokens > rr && cache_aware.reused_tokens > 0.0,
        "cache_aware reused {} prefix tokens, round_robin {rr}",
        cache_aware.reused_tokens
    );
    // kv_aware is driven by the replicas' own events and render answers: the router got
    // each request's token ids from `/v1/completions/render`, and the index it builds from
    // the replicas' `BlockStored` events (token ids, block size) matched them. Broken
    // events (a layout it drops, a block size or token ids that never match) leave every
    // lookup a miss.
    let kv_aware = &runs[2];
    assert!(
        kv_aware.router.render_inputs > 0.0,
        "kv_aware got no token ids from /v1/completions/render: {:?}",
        kv_aware.router
    );
    assert!(
        kv_aware.router.placement_hits > 0.0,
        "kv_aware's index never matched a prompt to blocks the replicas' events announced: {:?}",
        kv_aware.router
    );
    // Its reuse is reported, not compared with round_robin's: vllm-router's kv_aware cost
    // is (uncached tokens + the replica's in-flight prefill tokens) × (its in-flight
    // requests + 1), so a replica holding a document but busy with another prompt's
    // prefill loses the document's next request to an idle one, and with three clients
    // on one-thread replicas that happens often: 0.81× and 0.85× round_robin's reuse in
    // two bench runs of this workload and slightly above 1× in others (docs/scale-out.md),
    // no direction a test can hold.
}

#[test]
fn a_replica_sigtermed_mid_run_loses_no_request() {
    require_router();
    let (spec, w) = chat();
    let d = run_drain(&spec, 3, Policy::RoundRobin, &w).expect("drain run");
    eprintln!("{}", serde_json::to_string(&d).expect("json"));
    assert_eq!(d.failures, 0, "{:#?}", d.failure_samples);
    assert_eq!(d.completed, d.requests);
    // The replica really went away, cleanly, after its delay and drain.
    assert!(
        d.exit_status
            .as_deref()
            .is_some_and(|s| s.contains("exit status: 0")),
        "{d:?}"
    );
    assert!(
        d.exit_seconds
            .is_some_and(|t| t >= spec.shutdown_delay as f64),
        "{d:?}"
    );
}
