//! Several `kiln serve` replicas behind the real vllm-router, a shared-prefix workload
//! through it, and what the replicas report about prefix reuse: shared by `cargo xtask
//! bench cluster` and kiln-cli's cluster test. HTTP only (`ureq`), like [`crate::soak`].
//!
//! - [`Replicas::start`]: N `kiln serve` processes on free loopback ports, each with its
//!   own KV-event endpoint (`--kv-events tcp://127.0.0.1:PORT`, map-encoded events: the form
//!   vllm-router's `kv_aware` policy decodes) and a small KV pool so that eviction matters;
//! - [`Router::start`]: `python3 -m vllm_router.launch_router` (the `vllm-router` command's
//!   own entry point) with one [`Policy`], fast health checks, and for `kv_aware` one
//!   `--kv-event-source` per replica; a missing vllm-router is a [`ClusterError`] naming
//!   `pip install vllm-router`;
//! - [`Workload`] (module `workload`): multi-turn chat conversations sharing a system prompt
//!   ([`MultiTurn`]), or documents each asked several questions ([`Documents`]), streamed by
//!   a few concurrent clients that measure TTFT (to the first chunk with text) and count
//!   failures;
//! - [`Counters`]: prefix tokens reused (once per request) and requests, summed from every
//!   replica's own `/metrics` (`kiln_prefix_cache_tokens_saved_total`,
//!   `kiln_requests_total`), and preemptions with their re-admission lookups apart.

mod workload;

pub use workload::{Documents, Failure, MultiTurn, Outcome, SYSTEM_PROMPT, Workload};

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::soak::metric;

/// What went wrong starting or driving the cluster.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error(
        "vllm-router is not installed for python3 ({detail}); install it with `pip install vllm-router`"
    )]
    RouterMissing { detail: String },
    #[error("cannot start {what}: {source}")]
    Spawn {
        what: String,
        source: std::io::Error,
    },
    #[error("{what} exited while starting ({status}); its log:\n{log}")]
    Exited {
        what: String,
        status: ExitStatus,
        log: String,
    },
    #[error("{what} was not ready after {secs} s; its log:\n{log}")]
    NotReady {
        what: String,
        secs: u64,
        log: String,
    },
    #[error("no free loopback port: {0}")]
    Port(std::io::Error),
    #[error("cannot read the /metrics of the replica at {0}")]
    Metrics(String),
    #[error("cannot send SIGTERM to process {pid}: {detail}")]
    Signal { pid: u32, detail: String },
}

/// The ports handed out: below Linux's ephemeral range (32768–60999 by default), so no
/// outgoing connection — the router's own health checks to the replicas, say — can take
/// one between [`free_port`] and the server binding it, as a port from `bind(":0")` can.
const PORTS: std::ops::Range<u16> = 20_000..32_000;

/// A port nothing listens on right now (bound, released), each call a different one: a
/// cursor through [`PORTS`] starting at a place set by the process id, so two test
/// processes rarely walk the same ports.
fn free_port() -> Result<u16, ClusterError> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let span = u32::from(PORTS.end - PORTS.start);
    let _ = NEXT.compare_exchange(
        u32::MAX,
        std::process::id().wrapping_mul(2_654_435_761) % span,
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    let mut last = None;
    for _ in 0..span {
        let i = NEXT.fetch_add(1, Ordering::Relaxed) % span;
        // `i < span`, which fits in u16.
        let port = PORTS.start + i as u16;
        match TcpListener::bind(("127.0.0.1", port)) {
            Ok(_) => return Ok(port),
            Err(e) => last = Some(e),
        }
    }
    Err(ClusterError::Port(last.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::AddrInUse,
            "every port in 20000..32000 is taken",
        )
    })))
}

/// `http://127.0.0.1:PORT`
fn base(port: u16) -> String {
    format!("http://127.0.0.1:{port}")
}

fn agent(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(timeout))
        .build()
        .into()
}

/// `GET url`: status and body, `None` when nothing answered.
fn get(url: &str) -> Option<(u16, String)> {
    let mut r = agent(Duration::from_secs(5)).get(url).call().ok()?;
    let status = r.status().as_u16();
    Some((status, r.body_mut().read_to_string().ok()?))
}

fn read_log(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    // The end says why; keep it short.
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// A child process with its log file, killed when dropped.
struct Proc {
    what: String,
    child: Child,
    log: PathBuf,
}

impl Proc {
    fn spawn(what: String, cmd: &mut Command, log: PathBuf) -> Result<Proc, ClusterError> {
        let spawn_err = |source| ClusterError::Spawn {
            what: what.clone(),
            source,
        };
        let out = std::fs::File::create(&log).map_err(spawn_err)?;
        let err = out.try_clone().map_err(spawn_err)?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(spawn_err)?;
        Ok(Proc { what, child, log })
    }

    /// Waits until `GET url` answers 200, failing when the process exits first or `secs`
    /// pass.
    fn wait_ready(&mut self, url: &str, secs: u64) -> Result<(), ClusterError> {
        let t = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(ClusterError::Exited {
                    what: self.what.clone(),
                    status,
                    log: read_log(&self.log),
                });
            }
            if get(url).is_some_and(|(s, _)| s == 200) {
                return Ok(());
            }
            if t.elapsed() > Duration::from_secs(secs) {
                return Err(ClusterError::NotReady {
                    what: self.what.clone(),
                    secs,
                    log: read_log(&self.log),
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// How the replicas are started.
#[derive(Clone, Debug, Serialize)]
pub struct ReplicaSpec {
    /// The `kiln` binary.
    pub bin: PathBuf,
    /// `--model` (a known name or a path).
    pub model: String,
    /// `--kv-memory` (`16M`: about 45 blocks of 16 tokens of SmolLM2-135M).
    pub kv_memory: String,
    /// `--ctx-size`.
    pub ctx: usize,
    /// `--threads` of each replica.
    pub threads: usize,
    /// `--shutdown-delay` seconds.
    pub shutdown_delay: u64,
    /// Where the logs go.
    pub log_dir: PathBuf,
}

/// One running `kiln serve`.
pub struct Replica {
    proc: Proc,
    pub port: u16,
    pub events_port: u16,
}

impl Replica {
    pub fn url(&self) -> String {
        base(self.port)
    }

    /// `tcp://127.0.0.1:PORT`, its KV-event endpoint.
    pub fn events(&self) -> String {
        format!("tcp://127.0.0.1:{}", self.events_port)
    }

    pub fn pid(&self) -> u32 {
        self.proc.child.id()
    }

    /// Sends SIGTERM (the replica keeps serving for its shutdown delay, `/health` 503).
    pub fn sigterm(&self) -> Result<(), ClusterError> {
        let pid = self.pid();
        let out = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .output()
            .map_err(|e| ClusterError::Signal {
                pid,
                detail: e.to_string(),
            })?;
        if !out.status.success() {
            return Err(ClusterError::Signal {
                pid,
                detail: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        Ok(())
    }

    /// Waits up to `wait` for the process to exit; its status, `None` if still running.
    pub fn wait_exit(&mut self, wait: Duration) -> Option<ExitStatus> {
        let t = Instant::now();
        loop {
            if let Ok(Some(s)) = self.proc.child.try_wait() {
                return Some(s);
            }
            if t.elapsed() > wait {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The replicas of one run.
pub struct Replicas {
    pub list: Vec<Replica>,
}

impl Replicas {
    /// Starts `n` replicas and waits until each answers `/health` with 200.
    pub fn start(spec: &ReplicaSpec, n: usize, tag: &str) -> Result<Replicas, ClusterError> {
        let mut list = Vec::with_capacity(n);
        for i in 0..n {
            let port = free_port()?;
            let events_port = free_port()?;
            let mut cmd = Command::new(&spec.bin);
            cmd.args(["serve", "--model", &spec.model])
                .args(["--port", &port.to_string()])
                .args(["--threads", &spec.threads.to_string()])
                .args(["--ctx-size", &spec.ctx.to_string()])
                .args(["--kv-memory", &spec.kv_memory])
                .args(["--shutdown-delay", &spec.shutdown_delay.to_string()])
                .args(["--drain-timeout", "30"])
                .args(["--kv-events", &format!("tcp://*:{events_port}")])
                .args(["--kv-events-format", "map"]);
            let log = spec.log_dir.join(format!("{tag}-replica{i}.log"));
            let proc = Proc::spawn(format!("kiln serve replica {i}"), &mut cmd, log)?;
            list.push(Replica {
                proc,
                port,
                events_port,
            });
        }
        for r in &mut list {
            let url = format!("{}/health", r.url());
            r.proc.wait_ready(&url, 120)?;
        }
        Ok(Replicas { list })
    }

    pub fn urls(&self) -> Vec<String> {
        self.list.iter().map(Replica::url).collect()
    }

    /// The counters of every replica still answering (a drained one counts as its last
    /// reading in [`Counters::since`]).
    pub fn counters(&self) -> Result<Vec<Counters>, ClusterError> {
        self.list.iter().map(|r| Counters::read(&r.url())).collect()
    }
}

/// What one replica's `/metrics` says about prefix reuse and requests.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Counters {
    /// `kiln_prefix_cache_tokens_saved_total`: prompt tokens served from the cache, once
    /// per request (a preempted request's re-admission is not in it).
    pub reused_tokens: f64,
    /// `kiln_prefix_cache_query_tokens_total`: prompt tokens looked up, once per request.
    pub query_tokens: f64,
    /// `kiln_preemptions_total`: sequences preempted for lack of KV blocks.
    pub preemptions: f64,
    /// `kiln_prefix_cache_preempted_query_tokens_total` and
    /// `kiln_prefix_cache_preempted_tokens_saved_total`: what preempted requests looked up
    /// and found again on re-admission (counted apart from the reuse above).
    pub preempted_query_tokens: f64,
    pub preempted_reused_tokens: f64,
    /// `kiln_requests_total`, every outcome.
    pub requests: f64,
}

impl Counters {
    pub fn read(url: &str) -> Result<Counters, ClusterError> {
        let (status, text) = get(&format!("{url}/metrics"))
            .filter(|(s, _)| *s == 200)
            .ok_or_else(|| ClusterError::Metrics(url.to_string()))?;
        debug_assert_eq!(status, 200);
        let requests = text
            .lines()
            .filter(|l| l.starts_with("kiln_requests_total"))
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
            .sum();
        let get = |name: &str| metric(&text, name).unwrap_or(0.0);
        Ok(Counters {
            reused_tokens: get("kiln_prefix_cache_tokens_saved_total"),
            query_tokens: get("kiln_prefix_cache_query_tokens_total"),
            preemptions: get("kiln_preemptions_total"),
            preempted_query_tokens: get("kiln_prefix_cache_preempted_query_tokens_total"),
            preempted_reused_tokens: get("kiln_prefix_cache_preempted_tokens_saved_total"),
            requests,
        })
    }

    /// `self - before`, field by field.
    pub fn since(self, before: Counters) -> Counters {
        Counters {
            reused_tokens: self.reused_tokens - before.reused_tokens,
            query_tokens: self.query_tokens - before.query_tokens,
            preemptions: self.preemptions - before.preemptions,
            preempted_query_tokens: self.preempted_query_tokens - before.preempted_query_tokens,
            preempted_reused_tokens: self.preempted_reused_tokens - before.preempted_reused_tokens,
            requests: self.requests - before.requests,
        }
    }
}

/// vllm-router's routing policies compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Policy {
    RoundRobin,
    CacheAware,
    KvAware,
}

impl Policy {
    pub const ALL: [Policy; 3] = [Policy::RoundRobin, Policy::CacheAware, Policy::KvAware];

    /// vllm-router's `--policy` value.
    pub fn name(self) -> &'static str {
        match self {
            Policy::RoundRobin => "round_robin",
            Policy::CacheAware => "cache_aware",
            Policy::KvAware => "kv_aware",
        }
    }

    pub fn parse(s: &str) -> Result<Policy, String> {
        Policy::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                format!("{s:?} is not a policy (supported: round_robin, cache_aware, kv_aware)")
            })
    }
}

/// Fails with [`ClusterError::RouterMissing`] unless `python3` can import vllm-router.
pub fn router_available() -> Result<(), ClusterError> {
    let out = Command::new("python3")
        .args(["-c", "import vllm_router.launch_router"])
        .output()
        .map_err(|e| ClusterError::RouterMissing {
            detail: format!("cannot run python3: {e}"),
        })?;
    if out.status.success() {
        Ok(())
    } else {
        let err = String::from_utf8_lossy(&out.stderr);
        Err(ClusterError::RouterMissing {
            detail: err.lines().last().unwrap_or("import failed").to_string(),
        })
    }
}

/// A running vllm-router.
pub struct Router {
    _proc: Proc,
    pub port: u16,
    /// Its Prometheus endpoint's port (`--prometheus-port`).
    pub metrics_port: u16,
}

impl Router {
    pub fn url(&self) -> String {
        base(self.port)
    }

    /// What the router's own `/metrics` says about its `kv_aware` inputs (zeros for the
    /// other policies, or when the endpoint does not answer).
    pub fn counters(&self) -> RouterCounters {
        get(&format!("{}/metrics", base(self.metrics_port)))
            .filter(|(s, _)| *s == 200)
            .map_or_else(RouterCounters::default, |(_, text)| {
                RouterCounters::parse(&text)
            })
    }

    /// Starts vllm-router with `policy` in front of `replicas` and waits until it answers
    /// `/health`. Health checks every second, one failure takes a replica out of rotation
    /// (keep that below the replicas' shutdown delay); `kv_aware` subscribes to each
    /// replica's events, 16-token blocks.
    /// `extra` goes to the router's command line after everything else (a policy's own
    /// settings, `--cache-threshold 0.5` say).
    pub fn start(
        policy: Policy,
        replicas: &Replicas,
        model: &str,
        log_dir: &Path,
        extra: &[String],
    ) -> Result<Router, ClusterError> {
        router_available()?;
        let port = free_port()?;
        let metrics_port = free_port()?;
        let mut cmd = Command::new("python3");
        cmd.args(["-m", "vllm_router.launch_router"])
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--policy", policy.name()])
            .args(["--prometheus-port", &metrics_port.to_string()])
            .args(["--health-check-interval-secs", "1"])
            .args(["--health-failure-threshold", "1"])
            .args(["--health-success-threshold", "1"])
            .args(["--health-check-timeout-secs", "2"])
            .args(["--worker-startup-check-interval", "1"])
            // kv_aware logs each routing decision at debug (`KV prefix decision`: the
            // prefix it credited each replica with; `KV request selected`: the pick and its
            // uncached prefill), which is how its choices are checked afterwards.
            .args([
                "--log-level",
                if policy == Policy::KvAware {
                    "debug"
                } else {
                    "warning"
                },
            ])
            .arg("--worker-urls")
            .args(replicas.urls());
        if policy == Policy::KvAware {
            for r in &replicas.list {
                cmd.arg("--kv-event-source")
                    .arg(format!("{}={}", r.url(), r.events()));
            }
            cmd.args(["--kv-event-block-size", "16", "--kv-event-model", model]);
        }
        cmd.args(extra);
        let log = log_dir.join(format!("router-{}.log", policy.name()));
        let mut proc = Proc::spawn(
            format!("vllm-router --policy {}", policy.name()),
            &mut cmd,
            log,
        )?;
        proc.wait_ready(&format!("{}/health", base(port)), 120)?;
        // kv_aware: time for the event subscriptions to reach the publishers (a PUB socket
        // drops what it sends before).
        std::thread::sleep(Duration::from_secs(1));
        Ok(Router {
            _proc: proc,
            port,
            metrics_port,
        })
    }
}

/// vllm-router's counters of how `kv_aware` found its inputs, from its Prometheus
/// endpoint: whether a replica's KV events and render answers reached the policy.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct RouterCounters {
    /// Placement lookups that found blocks of the prompt, from position 0, on some
    /// replica (`vllm_router_kv_placement_lookups_total{result="hit"}`): the index the
    /// router builds from the replicas' `BlockStored` events matched the prompt's tokens.
    pub placement_hits: f64,
    /// Placement lookups that found none (`{result="miss"}`).
    pub placement_misses: f64,
    /// Per-replica token inputs the router got from the replicas' render endpoints
    /// (`vllm_router_kv_routing_inputs_total{result="render"}`, over its transports).
    pub render_inputs: f64,
}

impl RouterCounters {
    /// Sums the samples of family `name` whose labels include `label` (`key="value"`).
    fn sum(text: &str, name: &str, label: &str) -> f64 {
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                let (series, value) = l.rsplit_once(' ')?;
                let (family, labels) = series.split_once('{')?;
                (family == name
                    && labels
                        .split(',')
                        .any(|kv| kv.trim_end_matches('}') == label))
                .then(|| value.parse::<f64>().ok())
                .flatten()
            })
            .sum()
    }

    pub fn parse(text: &str) -> RouterCounters {
        RouterCounters {
            placement_hits: Self::sum(
                text,
                "vllm_router_kv_placement_lookups_total",
                "result=\"hit\"",
            ),
            placement_misses: Self::sum(
                text,
                "vllm_router_kv_placement_lookups_total",
                "result=\"miss\"",
            ),
            render_inputs: Self::sum(
                text,
                "vllm_router_kv_routing_inputs_total",
                "result=\"render\"",
            ),
        }
    }
}

/// Nearest-rank percentile `p` (0–100) of `v`, NaN when empty.
pub fn percentile(v: &[f64], p: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    let rank = (v.len() as f64 * p / 100.0).ceil() as usize;
    v[rank.saturating_sub(1).min(v.len() - 1)]
}

/// One policy's figures.
#[derive(Clone, Debug, Serialize)]
pub struct PolicyRun {
    pub policy: Policy,
    /// What the router's command line had beyond the bench's own settings.
    pub router_args: Vec<String>,
    pub requests: usize,
    pub failures: usize,
    /// Prompt tokens served from the prefix cache, once per request, summed over the
    /// replicas (`kiln_prefix_cache_tokens_saved_total`, after − before).
    pub reused_tokens: f64,
    /// Prompt tokens looked up, once per request, summed likewise.
    pub query_tokens: f64,
    /// Preemptions, and the tokens preempted requests looked up and found again when
    /// re-admitted (not in the figures above), summed likewise.
    pub preemptions: f64,
    pub preempted_query_tokens: f64,
    pub preempted_reused_tokens: f64,
    /// Requests each replica ended (`kiln_requests_total`, after − before).
    pub per_replica: Vec<f64>,
    pub ttft_p50: f64,
    pub ttft_p90: f64,
    pub ttft_p99: f64,
    pub seconds: f64,
    /// The router's own account of its `kv_aware` inputs (zeros for other policies).
    pub router: RouterCounters,
    pub failure_samples: Vec<Failure>,
}

/// Fresh replicas, the router with `policy` (and `router_args`, see [`Router::start`]), the
/// workload, the counters differenced.
pub fn run_policy(
    spec: &ReplicaSpec,
    replicas: usize,
    policy: Policy,
    router_args: &[String],
    workload: &Workload,
) -> Result<PolicyRun, ClusterError> {
    let reps = Replicas::start(spec, replicas, policy.name())?;
    let router = Router::start(policy, &reps, &spec.model, &spec.log_dir, router_args)?;
    let before = reps.counters()?;
    let o = workload.run(&router.url(), &|_| {});
    let after = reps.counters()?;
    let router_counters = router.counters();
    let diff: Vec<Counters> = after
        .iter()
        .zip(&before)
        .map(|(a, b)| a.since(*b))
        .collect();
    Ok(PolicyRun {
        policy,
        router_args: router_args.to_vec(),
        requests: o.sent,
        failures: o.failures.len(),
        reused_tokens: diff.iter().map(|c| c.reused_tokens).sum(),
        query_tokens: diff.iter().map(|c| c.query_tokens).sum(),
        preemptions: diff.iter().map(|c| c.preemptions).sum(),
        preempted_query_tokens: diff.iter().map(|c| c.preempted_query_tokens).sum(),
        preempted_reused_tokens: diff.iter().map(|c| c.preempted_reused_tokens).sum(),
        per_replica: diff.iter().map(|c| c.requests).collect(),
        ttft_p50: percentile(&o.ttft, 50.0),
        ttft_p90: percentile(&o.ttft, 90.0),
        ttft_p99: percentile(&o.ttft, 99.0),
        seconds: o.seconds,
        router: router_counters,
        failure_samples: o.failures.into_iter().take(5).collect(),
    })
}

/// The drain run's figures.
#[derive(Clone, Debug, Serialize)]
pub struct DrainRun {
    pub policy: Policy,
    pub requests: usize,
    pub completed: usize,
    pub failures: usize,
    /// Completions when the replica got SIGTERM.
    pub sigterm_after: usize,
    /// Seconds from SIGTERM to the replica's exit, and its exit status.
    pub exit_seconds: Option<f64>,
    pub exit_status: Option<String>,
    /// Requests the terminated replica ended after SIGTERM (its shutdown delay at work).
    pub served_after_sigterm: Option<f64>,
    pub failure_samples: Vec<Failure>,
}

/// The terminated replica's last counters and when it was seen gone (one drain run at a
/// time per process).
static LAST_SEEN: Mutex<Option<(Counters, Option<Instant>)>> = Mutex::new(None);

/// Polls a terminated replica every 100 ms until its process is gone (or a zombie) or
/// `secs` pass, keeping its last `/metrics` counters in [`LAST_SEEN`].
fn watch_exit(pid: u32, url: &str, secs: u64) {
    let t = Instant::now();
    let mut last = Counters::default();
    let mut gone = None;
    while t.elapsed() < Duration::from_secs(secs) {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok();
        let alive = state
            .as_deref()
            .and_then(|s| s.rsplit_once(") "))
            .is_some_and(|(_, rest)| !rest.starts_with('Z'));
        if !alive {
            gone = Some(Instant::now());
            break;
        }
        if let Ok(c) = Counters::read(url) {
            last = c;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    *LAST_SEEN.lock().unwrap_or_else(|e| e.into_inner()) = Some((last, gone));
}

/// When SIGTERM was sent, the replica's counters just before, and whether it was sent.
type Signalled = (Instant, Counters, Result<(), String>);

/// Fresh replicas behind `policy`; after a third of the requests complete, replica 0 gets
/// SIGTERM (it keeps serving for its shutdown delay while the router's health checks take
/// it out of rotation). Every client request must still complete.
pub fn run_drain(
    spec: &ReplicaSpec,
    replicas: usize,
    policy: Policy,
    workload: &Workload,
) -> Result<DrainRun, ClusterError> {
    let mut reps = Replicas::start(spec, replicas, &format!("drain-{}", policy.name()))?;
    let router = Router::start(policy, &reps, &spec.model, &spec.log_dir, &[])?;
    let at = (workload.requests() / 3).max(1);
    let victim_url = reps.list[0].url();
    let signalled: Mutex<Option<Signalled>> = Mutex::new(None);
    let pid = reps.list[0].pid();
    let o = std::thread::scope(|s| {
        workload.run(&router.url(), &|n| {
            if n == at {
                let before = Counters::read(&victim_url).unwrap_or_default();
                let sent = reps.list[0].sigterm().map_err(|e| e.to_string());
                let ok = sent.is_ok();
                *signalled.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some((Instant::now(), before, sent));
                if ok {
                    // Watch the replica go: its last counters and when it exited.
                    s.spawn(|| watch_exit(pid, &victim_url, spec.shutdown_delay + 60));
                }
            }
        })
    });
    let signalled = signalled.into_inner().unwrap_or_else(|e| e.into_inner());
    let mut failures = o.failures;
    let (mut exit_seconds, mut exit_status, mut served_after) = (None, None, None);
    match signalled {
        Some((when, before, Ok(()))) => {
            let wait = Duration::from_secs(spec.shutdown_delay + 60);
            let last = LAST_SEEN.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some((counters, gone)) = last {
                served_after = Some(counters.since(before).requests);
                exit_seconds = gone.map(|g| g.duration_since(when).as_secs_f64());
            }
            if let Some(s) = reps.list[0].wait_exit(wait) {
                exit_status = Some(s.to_string());
            }
        }
        Some((_, _, Err(e))) => failures.push(Failure {
            index: at,
            what: format!("SIGTERM not sent: {e}"),
        }),
        None => failures.push(Failure {
            index: at,
            what: "the run ended before the SIGTERM point".into(),
        }),
    }
    drop(router);
    Ok(DrainRun {
        policy,
        requests: o.sent,
        completed: o.completed,
        failures: failures.len(),
        sigterm_after: at,
        exit_seconds,
        exit_status,
        served_after_sigterm: served_after,
        failure_samples: failures.into_iter().take(5).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn router_counters_sum_the_labelled_samples_of_their_families_only() {
        let text = "\
# TYPE vllm_router_kv_placement_lookups_total counter
vllm_router_kv_placement_lookups_total{result=\"hit\"} 30
vllm_router_kv_placement_lookups_total{result=\"miss\"} 12
vllm_router_kv_placement_lookups_total{result=\"missing_tokens\"} 2
vllm_router_kv_routing_inputs_total{transport=\"http\",result=\"render\"} 144
vllm_router_kv_routing_inputs_total{transport=\"grpc\",result=\"render\"} 1
vllm_router_kv_routing_inputs_total{transport=\"http\",result=\"preparation_unavailable\"} 3
vllm_router_kv_placement_lookups_total_other{result=\"hit\"} 99
";
        let c = RouterCounters::parse(text);
        assert_eq!(c.placement_hits, 30.0);
        assert_eq!(c.placement_misses, 12.0);
        assert_eq!(c.render_inputs, 145.0);
        let none = RouterCounters::parse("");
        assert_eq!(none.placement_hits, 0.0);
    }
}
