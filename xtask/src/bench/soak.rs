//! `cargo xtask bench soak`: the server under sustained load and faults, and the 64-client
//! check. Starts the release `kiln serve` on loopback with small limits, computes
//! each greedy reference by a lone request, warms up, then runs `--clients` streaming clients
//! plus `--mixed` clients of the whole mix (see `soak_driver.rs`) for `--seconds`. Checks:
//! nothing lost, no wrong answer or wrong refusal, every completed response well-formed, KV
//! blocks used, running and waiting back to 0, and the server's RSS back near its warm
//! baseline. Writes `soak.json` and `soak.md` under `<target>/kiln-bench/soak/`; fails when a
//! check fails.

use std::process::{Child, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::XtaskError;
use crate::bench::common::{bad, build_kiln, failed, out_dir, positive, write};
use crate::soak_driver::{self as driver, Limits, Plan, Tally};

/// `cargo xtask bench soak`: serving under load and faults.
#[derive(clap::Args, Debug)]
pub struct SoakArgs {
    /// The model (a known name or a path).
    #[arg(long, default_value = "smollm2-135m")]
    model: String,
    /// Concurrent clients.
    #[arg(long, default_value_t = 64, value_parser = positive)]
    clients: usize,
    /// Of those, clients that mix in faults and over-limit requests.
    #[arg(long, default_value_t = 16)]
    mixed: usize,
    /// Length of the measured phase.
    #[arg(long, default_value_t = 120.0)]
    seconds: f64,
    /// Length of the warm-up phase.
    #[arg(long, default_value_t = 15.0)]
    warmup: f64,
    /// Server threads (default: kiln's).
    #[arg(long, value_parser = positive)]
    threads: Option<usize>,
    /// Seed of the load's random choices.
    #[arg(long, default_value_t = 9)]
    seed: u64,
}

/// The limits `kiln serve` is started with (small, so the load can go over each).
const LIMITS: Limits = Limits {
    n_ctx: 512,
    max_n: 4,
    max_body_bytes: 64 << 10,
    max_prompt_tokens: 256,
};

struct Served {
    child: Child,
    base: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(a: &SoakArgs, clients: usize) -> Result<Served, XtaskError> {
    let kiln = build_kiln()?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| failed("serve", format!("cannot find a free port: {e}")))?;
    let mut cmd = kiln.command();
    cmd.args(["serve", "--model", &a.model, "--port", &port.to_string()])
        .args(["--ctx-size", &LIMITS.n_ctx.to_string()])
        .args(["--max-n", &LIMITS.max_n.to_string()])
        .args(["--max-body", &LIMITS.max_body_bytes.to_string()])
        .args(["--max-prompt-tokens", &LIMITS.max_prompt_tokens.to_string()])
        // As many running as there are streaming clients, a short queue: the mixed
        // clients' requests (bursts of up to 8 choices) overflow it now and then.
        .args(["--max-running", &clients.to_string()])
        .args(["--max-queue", "16"])
        .args(["--kv-memory", "256M"])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    if let Some(t) = a.threads {
        cmd.args(["--threads", &t.to_string()]);
    }
    let child = cmd
        .spawn()
        .map_err(|e| failed("serve", format!("cannot start kiln serve: {e}")))?;
    let served = Served {
        child,
        base: format!("http://127.0.0.1:{port}"),
    };
    let deadline = Instant::now() + Duration::from_secs(300);
    while !matches!(driver::get(&served.base, "/health"), Some((200, _))) {
        if Instant::now() > deadline {
            return Err(failed(
                "serve",
                "kiln serve did not become healthy in 300 s",
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(served)
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

const MIB: f64 = 1024.0 * 1024.0;

#[derive(Serialize)]
struct Report {
    model: String,
    limits: Limits,
    max_running: usize,
    max_queue: usize,
    load_average_start: String,
    load_average_end: String,
    warmup: Tally,
    soak: Tally,
    rss_warm_mib: f64,
    rss_peak_sampled_mib: f64,
    rss_hwm_mib: f64,
    rss_end_mib: f64,
    rss_allowed_end_mib: f64,
    kv_blocks_used_end: f64,
    running_end: f64,
    waiting_end: f64,
    checks: Vec<(String, bool)>,
    passed: bool,
}

pub fn run(a: &SoakArgs) -> Result<(), XtaskError> {
    if a.seconds.is_nan() || a.seconds <= 0.0 || a.warmup.is_nan() || a.warmup < 0.0 {
        return Err(bad(
            "soak: --seconds must be positive and --warmup not negative",
        ));
    }
    let load_start = loadavg();
    let served = start(a, a.clients)?;
    let pid = served.child.id();
    let base = served.base.clone();
    eprintln!("xtask soak: computing the greedy references (lone requests)");
    let refs = driver::references(&base).map_err(|e| failed("references", e))?;
    let plan = |secs: f64, seed: u64| Plan {
        base: base.clone(),
        clients: a.clients,
        mixed_clients: a.mixed,
        duration: Duration::from_secs_f64(secs),
        seed,
        limits: LIMITS,
        pid: Some(pid),
    };
    eprintln!("xtask soak: warming up for {} s", a.warmup);
    let warmup = driver::run(&plan(a.warmup, a.seed ^ 0xABCD), &refs);
    driver::settle(&base, Duration::from_secs(60));
    std::thread::sleep(Duration::from_secs(1));
    let rss_warm = driver::rss(pid).map_or(0, |r| r.0);

    // Sample the RSS during the soak.
    let stop = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(rss_warm));
    let sampler = {
        let (stop, peak) = (Arc::clone(&stop), Arc::clone(&peak));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Acquire) {
                if let Some((r, _)) = driver::rss(pid) {
                    peak.fetch_max(r, Ordering::AcqRel);
                }
                std::thread::sleep(Duration::from_millis(250));
            }
        })
    };
    eprintln!(
        "xtask soak: {} streaming + {} mixed clients for {} s",
        a.clients, a.mixed, a.seconds
    );
    let soak = driver::run(&plan(a.seconds, a.seed), &refs);
    stop.store(true, Ordering::Release);
    let _ = sampler.join();
    let load_end = loadavg();
    let (kv, running, waiting) =
        driver::settle(&base, Duration::from_secs(60)).unwrap_or((f64::NAN, f64::NAN, f64::NAN));
    std::thread::sleep(Duration::from_secs(2));
    let (rss_end, hwm) = driver::rss(pid).unwrap_or((0, 0));
    drop(served);

    let warm = rss_warm as f64 / MIB;
    let allowed = warm + (warm * 0.25).max(64.0);
    let end = rss_end as f64 / MIB;
    let checks = vec![
        (
            "nothing lost".to_string(),
            soak.lost == 0 && warmup.lost == 0,
        ),
        (
            "no wrong answer, wrong refusal or malformed response".to_string(),
            soak.clean() && warmup.clean(),
        ),
        (
            "greedy answers compared with their references".to_string(),
            soak.checked_against_reference > 0,
        ),
        (
            format!("{} concurrent streams reached", a.clients),
            soak.peak_open_streams >= a.clients,
        ),
        (
            "clients disconnected mid-stream".to_string(),
            soak.disconnected_by_client > 0,
        ),
        ("KV blocks used 0 at the end".to_string(), kv == 0.0),
        (
            "running and waiting 0 at the end".to_string(),
            running == 0.0 && waiting == 0.0,
        ),
        (
            format!(
                "RSS at the end within {allowed:.0} MiB (warm {warm:.0} MiB + max(25%, 64 MiB))"
            ),
            rss_end > 0 && end <= allowed,
        ),
    ];
    let passed = checks.iter().all(|c| c.1);
    let report = Report {
        model: a.model.clone(),
        limits: LIMITS,
        max_running: a.clients,
        max_queue: 16,
        load_average_start: load_start,
        load_average_end: load_end,
        warmup,
        soak,
        rss_warm_mib: warm,
        rss_peak_sampled_mib: peak.load(Ordering::Acquire) as f64 / MIB,
        rss_hwm_mib: hwm as f64 / MIB,
        rss_end_mib: end,
        rss_allowed_end_mib: allowed,
        kv_blocks_used_end: kv,
        running_end: running,
        waiting_end: waiting,
        checks,
        passed,
    };
    let dir = out_dir("soak")?;
    let json = serde_json::to_string_pretty(&report)
        .map_err(|e| failed("output", format!("cannot encode the report: {e}")))?;
    write(&dir.join("soak.json"), json)?;
    let md = markdown(&report);
    write(&dir.join("soak.md"), &md)?;
    println!("{md}");
    eprintln!("xtask soak: report in {}", dir.display());
    if passed {
        Ok(())
    } else {
        Err(failed("soak", "a check failed (see the report)"))
    }
}

fn markdown(r: &Report) -> String {
    use std::fmt::Write;
    let s = &r.soak;
    let mut o = String::new();
    let _ = writeln!(o, "# Soak: `kiln serve` under load and faults\n");
    let _ = writeln!(
        o,
        "- model {}, context {}, max_running {}, max_queue {}, max_n {}, max_body {} B, max_prompt_tokens {}",
        r.model,
        r.limits.n_ctx,
        r.max_running,
        r.max_queue,
        r.limits.max_n,
        r.limits.max_body_bytes,
        r.limits.max_prompt_tokens
    );
    let _ = writeln!(
        o,
        "- {} streaming + {} mixed clients for {:.1} s (after a {:.1} s warm-up); load average {} at the start, {} at the end\n",
        s.clients,
        s.mixed_clients,
        s.seconds,
        r.warmup.seconds,
        r.load_average_start,
        r.load_average_end
    );
    let _ = writeln!(o, "| | count |\n|---|---:|");
    let _ = writeln!(o, "| sent | {} |", s.sent);
    let _ = writeln!(o, "| completed | {} |", s.completed);
    let _ = writeln!(o, "| … of which streams | {} |", s.completed_streams);
    let _ = writeln!(
        o,
        "| … greedy, equal to the lone reference | {} |",
        s.checked_against_reference - s.wrong_answers.min(s.checked_against_reference)
    );
    for (k, v) in &s.refused {
        let _ = writeln!(o, "| refused: {k} | {v} |");
    }
    let _ = writeln!(
        o,
        "| disconnected by the client | {} |",
        s.disconnected_by_client
    );
    let _ = writeln!(o, "| **lost** | **{}** |", s.lost);
    let _ = writeln!(o, "| wrong answers | {} |", s.wrong_answers);
    let _ = writeln!(o, "| wrong refusals | {} |", s.wrong_refusals);
    let _ = writeln!(o, "| malformed responses | {} |", s.malformed_responses);
    let _ = writeln!(
        o,
        "| peak concurrent streams (client side) | {} |",
        s.peak_open_streams
    );
    let _ = writeln!(
        o,
        "\n| latency (ms) | samples | p50 | p99 | max |\n|---|---:|---:|---:|---:|"
    );
    for (name, p) in [("TTFT", &s.ttft_ms), ("ITL", &s.itl_ms)] {
        let _ = writeln!(
            o,
            "| {name} | {} | {:.1} | {:.1} | {:.1} |",
            p.samples, p.p50, p.p99, p.max
        );
    }
    let _ = writeln!(
        o,
        "\n- RSS: warm baseline {:.1} MiB, peak sampled {:.1} MiB (VmHWM {:.1} MiB), at the end {:.1} MiB (allowed {:.1})",
        r.rss_warm_mib, r.rss_peak_sampled_mib, r.rss_hwm_mib, r.rss_end_mib, r.rss_allowed_end_mib
    );
    let _ = writeln!(
        o,
        "- at the end: KV blocks used {}, running {}, waiting {}\n",
        r.kv_blocks_used_end, r.running_end, r.waiting_end
    );
    for (c, ok) in &r.checks {
        let _ = writeln!(o, "- [{}] {c}", if *ok { "x" } else { " " });
    }
    if !s.failures.is_empty() {
        let _ = writeln!(
            o,
            "\nfailures ({}; first {}):",
            s.failures_total,
            s.failures.len()
        );
        for f in &s.failures {
            let _ = writeln!(o, "- {f}");
        }
    }
    o
}
