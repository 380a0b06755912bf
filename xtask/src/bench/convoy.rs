//! `cargo xtask bench convoy`: the serving test of
//! long and short requests mixed. Starts the release `kiln serve`
//! on loopback, then drives it over HTTP (blocking client, one thread per in-flight
//! request):
//!
//! - **baseline**: the short requests alone (32 prompt tokens, 64 generated), `--clients`
//!   at a time;
//! - **convoy**: the same short requests with the long ones (2,048 in, 512 out, scaled by
//!   `--scale`) launched evenly among them.
//!
//! Prompts are token-id arrays cut from the committed WikiText slice, so their lengths are
//! exact; end-of-generation is banned (`logit_bias` −100) so every request generates its
//! full length. Every streamed chunk is timestamped at the client: TTFT counts from the
//! moment the request is sent (client admission — waiting for a free client thread — is
//! reported separately), ITL is the gap between consecutive chunks. `/metrics` is sampled
//! during the convoy for KV use and fragmentation, and its queue-time histogram gives the
//! server's own queueing; its step-duration histogram gives how many steps of each phase
//! took over 500 ms, which tells a slow step from a stall elsewhere. Also counted: short
//! streams with a token that sent no text (the first byte of a multi-byte character), whose
//! client sees a gap of two steps there.
//!
//! Criteria: short p99 TTFT in the convoy at most 50% above the baseline;
//! head-of-line blocking (the longest stall of any running short stream, i.e. its largest
//! inter-token gap) at most 500 ms; mean KV fragmentation at most 15%.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kiln_bench::Machine;
use kiln_bench::report::{Series, lines_svg, markdown_table};
use kiln_bench::stats::percentile;
use serde::Serialize;
use serde_json::{Value, json};

use crate::XtaskError;
use crate::bench::common::{bad, build_kiln, failed, fixture_text, out_dir, positive, write};

/// `cargo xtask bench convoy`: short requests alone vs mixed with long ones.
#[derive(clap::Args, Debug)]
pub struct ConvoyArgs {
    /// The model (a known name or a path).
    #[arg(long, default_value = "smollm2-135m")]
    model: String,
    /// Scales the long requests' lengths (0 < F ≤ 1).
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Short requests.
    #[arg(long, default_value_t = 100, value_parser = positive)]
    shorts: usize,
    /// Long requests.
    #[arg(long, default_value_t = 10)]
    longs: usize,
    /// Concurrent clients.
    #[arg(long, default_value_t = 8, value_parser = positive)]
    clients: usize,
    /// Server threads (default: kiln's).
    #[arg(long, value_parser = positive)]
    threads: Option<usize>,
    /// The server's KV memory budget (`kiln serve --kv-memory`).
    #[arg(long)]
    kv_memory: Option<String>,
}

const SHORT_IN: usize = 32;
const SHORT_OUT: usize = 64;
const LONG_IN: usize = 2048;
const LONG_OUT: usize = 512;

/// What the client saw of one request.
#[derive(Clone, Debug, Serialize)]
struct Observed {
    long: bool,
    /// Waiting for a free client thread, ms (client admission).
    admission_ms: f64,
    ttft_ms: f64,
    itl_ms: Vec<f64>,
    total_ms: f64,
    chunks: usize,
    error: Option<String>,
}

/// The running server.
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

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(1800)))
        .build()
        .into()
}

fn get_text(base: &str, path: &str) -> Option<(u16, String)> {
    let mut r = agent().get(format!("{base}{path}")).call().ok()?;
    let s = r.status().as_u16();
    Some((s, r.body_mut().read_to_string().ok()?))
}

fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (k, v) = l.rsplit_once(' ')?;
        (k == name).then(|| v.parse().ok()).flatten()
    })
}

fn free_port() -> Result<u16, XtaskError> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|e| failed("serve", format!("cannot find a free port: {e}")))?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|e| failed("serve", e.to_string()))
}

fn start_server(a: &ConvoyArgs, ctx: usize) -> Result<Served, XtaskError> {
    let kiln = build_kiln()?;
    let port = free_port()?;
    let mut cmd = kiln.command();
    cmd.args(["serve", "--model", &a.model, "--port", &port.to_string()])
        .args(["--ctx-size", &ctx.to_string()])
        .args(["--max-queue", "1024"])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    if let Some(t) = a.threads {
        cmd.args(["--threads", &t.to_string()]);
    }
    if let Some(m) = &a.kv_memory {
        cmd.args(["--kv-memory", m]);
    }
    let child = cmd
        .spawn()
        .map_err(|e| failed("serve", format!("cannot start kiln serve: {e}")))?;
    let served = Served {
        child,
        base: format!("http://127.0.0.1:{port}"),
    };
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        if let Some((200, _)) = get_text(&served.base, "/health") {
            return Ok(served);
        }
        if Instant::now() > deadline {
            return Err(failed(
                "serve",
                "kiln serve did not become healthy in 300 s",
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Sends one streaming completion and timestamps its chunks.
fn drive(
    base: &str,
    prompt: &[u32],
    max_tokens: usize,
    bias: &Value,
    long: bool,
    admission_ms: f64,
) -> Observed {
    let body = json!({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                      "stream": true, "logit_bias": bias});
    let sent = Instant::now();
    let mut o = Observed {
        long,
        admission_ms,
        ttft_ms: f64::NAN,
        itl_ms: Vec::new(),
        total_ms: f64::NAN,
        chunks: 0,
        error: None,
    };
    let resp = match agent()
        .post(format!("{base}/v1/completions"))
        .content_type("application/json")
        .send(body.to_string())
    {
        Ok(r) => r,
        Err(e) => {
            o.error = Some(e.to_string());
            return o;
        }
    };
    if resp.status().as_u16() != 200 {
        o.error = Some(format!("status {}", resp.status()));
        return o;
    }
    let mut last: Option<Instant> = None;
    for line in BufReader::new(resp.into_body().into_reader()).lines() {
        let Ok(line) = line else {
            o.error = Some("stream broke".into());
            break;
        };
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        if data == "[DONE]" {
            break;
        }
        let v: Value = serde_json::from_str(data).unwrap_or(Value::Null);
        if v.get("error").is_some() {
            o.error = Some(data.to_string());
            continue;
        }
        // One chunk per generated token (its text may be empty while a multi-byte character
        // is incomplete); the closing chunk carries `finish_reason` and no token.
        let choice = &v["choices"][0];
        let is_token = choice["text"].is_string() && choice["finish_reason"].is_null();
        if !is_token {
            continue;
        }
        let now = Instant::now();
        match last {
            None => o.ttft_ms = ms(now - sent),
            Some(prev) => o.itl_ms.push(ms(now - prev)),
        }
        last = Some(now);
        o.chunks += 1;
    }
    o.total_ms = ms(sent.elapsed());
    o
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Runs the shorts (`clients` at a time) and, if `longs`, the long requests spread
/// evenly among them; samples `/metrics` meanwhile.
fn phase(
    base: &str,
    shorts: &[Vec<u32>],
    longs: &[(Vec<u32>, usize)],
    clients: usize,
    bias: &Value,
) -> (Vec<Observed>, Vec<(f64, f64, f64)>, f64) {
    let started = Arc::new(AtomicUsize::new(0));
    let results = Arc::new(Mutex::new(Vec::new()));
    let done = Arc::new(AtomicBool::new(false));
    let t0 = Instant::now();
    let samples = Arc::new(Mutex::new(Vec::new()));
    let sampler = {
        let (base, done, samples) = (base.to_string(), Arc::clone(&done), Arc::clone(&samples));
        std::thread::spawn(move || {
            while !done.load(Ordering::Acquire) {
                if let Some((200, m)) = get_text(&base, "/metrics") {
                    let used = metric(&m, "kiln_kv_blocks_used").unwrap_or(0.0);
                    let frag = metric(&m, "kiln_kv_fragmentation_ratio").unwrap_or(0.0);
                    if let Ok(mut s) = samples.lock() {
                        s.push((t0.elapsed().as_secs_f64(), used, frag));
                    }
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    std::thread::scope(|scope| {
        // Long requests: long i goes when short i·shorts/longs has started.
        for (i, (prompt, out)) in longs.iter().enumerate() {
            let (started, results) = (Arc::clone(&started), Arc::clone(&results));
            let at = i * shorts.len() / longs.len().max(1);
            scope.spawn(move || {
                while started.load(Ordering::Acquire) < at {
                    std::thread::sleep(Duration::from_millis(5));
                }
                let o = drive(base, prompt, *out, bias, true, 0.0);
                if let Ok(mut r) = results.lock() {
                    r.push(o);
                }
            });
        }
        // Shorts: a pool of `clients` threads taking the next request.
        let next = Arc::new(AtomicUsize::new(0));
        let enqueued = Instant::now();
        for _ in 0..clients {
            let (next, started, results) = (
                Arc::clone(&next),
                Arc::clone(&started),
                Arc::clone(&results),
            );
            scope.spawn(move || {
                loop {
                    let i = next.fetch_add(1, Ordering::AcqRel);
                    let Some(prompt) = shorts.get(i) else { break };
                    // All shorts are "submitted" at once; a client thread admits them.
                    let admission = ms(enqueued.elapsed());
                    started.fetch_add(1, Ordering::AcqRel);
                    let o = drive(base, prompt, SHORT_OUT, bias, false, admission);
                    if let Ok(mut r) = results.lock() {
                        r.push(o);
                    }
                }
            });
        }
    });
    let wall = t0.elapsed().as_secs_f64();
    done.store(true, Ordering::Release);
    let _ = sampler.join();
    let results = results.lock().map(|r| r.clone()).unwrap_or_default();
    let samples = samples.lock().map(|s| s.clone()).unwrap_or_default();
    (results, samples, wall)
}

#[derive(Serialize, Clone, Copy)]
struct Pcts {
    p50: f64,
    p90: f64,
    p99: f64,
    max: f64,
}

fn pcts(v: &[f64]) -> Pcts {
    let p = |q| percentile(v, q).unwrap_or(f64::NAN);
    Pcts {
        p50: p(50.0),
        p90: p(90.0),
        p99: p(99.0),
        max: v.iter().copied().fold(f64::NAN, f64::max),
    }
}

#[derive(Serialize)]
struct PhaseReport {
    requests: usize,
    errors: usize,
    wall_s: f64,
    short_ttft_ms: Pcts,
    short_itl_ms: Pcts,
    short_admission_ms: Pcts,
    long_ttft_ms: Option<Pcts>,
    long_itl_ms: Option<Pcts>,
    /// Largest inter-token gap of any short stream.
    hol_ms: f64,
    generated_tokens: usize,
    tokens_per_s: f64,
    kv_blocks_used_max: f64,
    kv_fragmentation_mean: f64,
    kv_fragmentation_max: f64,
    /// Server-side queue time (from /metrics) over the phase: mean ms.
    server_queue_ms_mean: Option<f64>,
    /// Server steps in the phase and how many took over 500 ms (from the server's
    /// `kiln_engine_step_seconds` histogram): tells a slow step from a stall elsewhere.
    server_steps: Option<(f64, f64)>,
    /// Short streams whose text came in fewer chunks than tokens (a token completing no
    /// character, e.g. the first byte of a multi-byte one, sends no text: the client then
    /// sees a gap of two steps).
    short_streams_missing_token_chunks: usize,
}

fn summarize(
    obs: &[Observed],
    samples: &[(f64, f64, f64)],
    wall: f64,
    queue: Option<f64>,
    steps: Option<(f64, f64)>,
) -> PhaseReport {
    let short: Vec<&Observed> = obs
        .iter()
        .filter(|o| !o.long && o.error.is_none())
        .collect();
    let long: Vec<&Observed> = obs.iter().filter(|o| o.long && o.error.is_none()).collect();
    let ttft = |v: &[&Observed]| {
        v.iter()
            .map(|o| o.ttft_ms)
            .filter(|x| x.is_finite())
            .collect::<Vec<_>>()
    };
    let itl = |v: &[&Observed]| {
        v.iter()
            .flat_map(|o| o.itl_ms.iter().copied())
            .collect::<Vec<_>>()
    };
    let busy: Vec<&(f64, f64, f64)> = samples.iter().filter(|s| s.1 > 0.0).collect();
    let frag: Vec<f64> = busy.iter().map(|s| s.2).collect();
    let generated: usize = obs.iter().map(|o| o.chunks).sum();
    PhaseReport {
        requests: obs.len(),
        errors: obs.iter().filter(|o| o.error.is_some()).count(),
        wall_s: wall,
        short_ttft_ms: pcts(&ttft(&short)),
        short_itl_ms: pcts(&itl(&short)),
        short_admission_ms: pcts(&short.iter().map(|o| o.admission_ms).collect::<Vec<_>>()),
        long_ttft_ms: (!long.is_empty()).then(|| pcts(&ttft(&long))),
        long_itl_ms: (!long.is_empty()).then(|| pcts(&itl(&long))),
        hol_ms: short
            .iter()
            .flat_map(|o| o.itl_ms.iter().copied())
            .fold(0.0, f64::max),
        generated_tokens: generated,
        tokens_per_s: generated as f64 / wall,
        kv_blocks_used_max: samples.iter().map(|s| s.1).fold(0.0, f64::max),
        kv_fragmentation_mean: if frag.is_empty() {
            0.0
        } else {
            frag.iter().sum::<f64>() / frag.len() as f64
        },
        kv_fragmentation_max: frag.iter().copied().fold(0.0, f64::max),
        server_queue_ms_mean: queue,
        server_steps: steps,
        short_streams_missing_token_chunks: short.iter().filter(|o| o.chunks < SHORT_OUT).count(),
    }
}

/// `(sum, count)` of the server's queue-time histogram.
fn queue_hist(base: &str) -> Option<(f64, f64)> {
    let (_, m) = get_text(base, "/metrics")?;
    Some((
        metric(&m, "kiln_queue_time_seconds_sum")?,
        metric(&m, "kiln_queue_time_seconds_count")?,
    ))
}

/// `(steps, steps over 500 ms)` so far, from the server's step-duration histogram.
fn steps_hist(base: &str) -> Option<(f64, f64)> {
    let (_, m) = get_text(base, "/metrics")?;
    let count = metric(&m, "kiln_engine_step_seconds_count")?;
    let fast = metric(&m, "kiln_engine_step_seconds_bucket{le=\"0.5\"}")?;
    Some((count, count - fast))
}

/// Steps and slow steps between two [`steps_hist`] readings.
fn steps_delta(before: Option<(f64, f64)>, after: Option<(f64, f64)>) -> Option<(f64, f64)> {
    let ((c0, s0), (c1, s1)) = (before?, after?);
    Some((c1 - c0, s1 - s0))
}

fn queue_mean(before: Option<(f64, f64)>, after: Option<(f64, f64)>) -> Option<f64> {
    let ((s0, c0), (s1, c1)) = (before?, after?);
    (c1 > c0).then(|| (s1 - s0) / (c1 - c0) * 1000.0)
}

#[derive(Serialize)]
struct Criterion {
    name: &'static str,
    value: f64,
    limit: f64,
    pass: bool,
}

#[derive(Serialize)]
struct ConvoyReport {
    machine: Machine,
    model: String,
    scale: f64,
    short: (usize, usize),
    long: (usize, usize),
    shorts: usize,
    longs: usize,
    clients: usize,
    baseline: PhaseReport,
    convoy: PhaseReport,
    criteria: Vec<Criterion>,
    kv_blocks_used_after: Option<f64>,
    loadavg_after: Option<[f64; 3]>,
}

/// The fixture text's token ids, with the vocabulary's BOS and end-of-generation ids.
struct Fixture {
    ids: Vec<u32>,
    bos: Option<u32>,
    eog: Vec<u32>,
}

/// Token ids of the fixture text, from the model's own tokenizer.
fn fixture_tokens(model: &str) -> Result<Fixture, XtaskError> {
    let path = kiln_hub::resolve(model).map_err(|e| failed("model", e.to_string()))?;
    let tok = if path.is_dir() {
        kiln_tokenizer::Tokenizer::from_hf_dir(&path)
            .map_err(|e| failed("tokenizer", e.to_string()))?
    } else {
        let f = kiln_format::GgufFile::open(&path).map_err(|e| failed("model", e.to_string()))?;
        kiln_tokenizer::Tokenizer::from_gguf(f.metadata())
            .map_err(|e| failed("tokenizer", e.to_string()))?
    };
    let text = std::fs::read_to_string(fixture_text())
        .map_err(|e| failed("fixture", format!("{}: {e}", fixture_text().display())))?;
    let ids = tok
        .encode(&text, false, false)
        .map_err(|e| failed("tokenizer", e.to_string()))?;
    Ok(Fixture {
        ids,
        bos: tok.bos(),
        eog: tok.eog_ids().to_vec(),
    })
}

/// `n` prompts of `len` tokens cut from `ids` at distinct offsets (wrapping), BOS first.
fn prompts(ids: &[u32], bos: Option<u32>, n: usize, len: usize, salt: usize) -> Vec<Vec<u32>> {
    (0..n)
        .map(|i| {
            let start = (salt + i * 997) % ids.len().max(1);
            let mut p: Vec<u32> = bos.into_iter().collect();
            p.extend(ids.iter().cycle().skip(start).take(len - p.len()));
            p
        })
        .collect()
}

pub fn run(a: &ConvoyArgs) -> Result<(), XtaskError> {
    if !(a.scale > 0.0 && a.scale <= 1.0) {
        return Err(bad("bench convoy needs 0 < --scale ≤ 1"));
    }
    let long_in = ((LONG_IN as f64 * a.scale).round() as usize).max(SHORT_IN);
    let long_out = ((LONG_OUT as f64 * a.scale).round() as usize).max(1);
    let ctx = (long_in + long_out).max(SHORT_IN + SHORT_OUT);
    let Fixture { ids, bos, eog } = fixture_tokens(&a.model)?;
    if ids.len() < 64 {
        return Err(failed("fixture", "the fixture text is too short"));
    }
    let bias: Value = eog
        .iter()
        .map(|id| (id.to_string(), json!(-100)))
        .collect::<serde_json::Map<_, _>>()
        .into();
    let shorts = prompts(&ids, bos, a.shorts, SHORT_IN, 0);
    let shorts_convoy = prompts(&ids, bos, a.shorts, SHORT_IN, 50_000);
    let longs: Vec<(Vec<u32>, usize)> = prompts(&ids, bos, a.longs, long_in, 7)
        .into_iter()
        .map(|p| (p, long_out))
        .collect();

    eprintln!(
        "xtask bench convoy: {} — shorts {}×({SHORT_IN} in, {SHORT_OUT} out) by {} clients; longs {}×({long_in} in, {long_out} out), scale {}",
        a.model, a.shorts, a.clients, a.longs, a.scale
    );
    let server = start_server(a, ctx)?;
    let base = server.base.clone();
    // Warm-up (page in the weights).
    let _ = phase(&base, &prompts(&ids, bos, 2, SHORT_IN, 123), &[], 2, &bias);

    eprintln!("xtask bench convoy: baseline (shorts alone)");
    let (q0, s0) = (queue_hist(&base), steps_hist(&base));
    let (b_obs, b_samples, b_wall) = phase(&base, &shorts, &[], a.clients, &bias);
    let (q1, s1) = (queue_hist(&base), steps_hist(&base));
    let baseline = summarize(
        &b_obs,
        &b_samples,
        b_wall,
        queue_mean(q0, q1),
        steps_delta(s0, s1),
    );

    eprintln!("xtask bench convoy: convoy (shorts + longs)");
    let (c_obs, c_samples, c_wall) = phase(&base, &shorts_convoy, &longs, a.clients, &bias);
    let (q2, s2) = (queue_hist(&base), steps_hist(&base));
    let convoy = summarize(
        &c_obs,
        &c_samples,
        c_wall,
        queue_mean(q1, q2),
        steps_delta(s1, s2),
    );
    std::thread::sleep(Duration::from_millis(300));
    let kv_after = get_text(&base, "/metrics").and_then(|(_, m)| metric(&m, "kiln_kv_blocks_used"));
    // Graceful shutdown (SIGTERM), as an operator would.
    let _ = Command::new("kill")
        .args(["-TERM", &server.child.id().to_string()])
        .status();
    drop(server);

    let p99_rise = convoy.short_ttft_ms.p99 / baseline.short_ttft_ms.p99 - 1.0;
    let criteria = vec![
        Criterion {
            name: "short p99 TTFT rise (convoy vs baseline)",
            value: p99_rise,
            limit: 0.5,
            pass: p99_rise <= 0.5,
        },
        Criterion {
            name: "head-of-line blocking, ms (largest short-stream stall)",
            value: convoy.hol_ms,
            limit: 500.0,
            pass: convoy.hol_ms <= 500.0,
        },
        Criterion {
            name: "KV fragmentation (mean while busy)",
            value: convoy.kv_fragmentation_mean,
            limit: 0.15,
            pass: convoy.kv_fragmentation_mean <= 0.15,
        },
        Criterion {
            name: "failed requests",
            value: (baseline.errors + convoy.errors) as f64,
            limit: 0.0,
            pass: baseline.errors + convoy.errors == 0,
        },
    ];
    let report = ConvoyReport {
        machine: Machine::detect(),
        model: a.model.clone(),
        scale: a.scale,
        short: (SHORT_IN, SHORT_OUT),
        long: (long_in, long_out),
        shorts: a.shorts,
        longs: a.longs,
        clients: a.clients,
        baseline,
        convoy,
        criteria,
        kv_blocks_used_after: kv_after,
        loadavg_after: kiln_bench::result::loadavg(),
    };
    let dir = out_dir("convoy")?;
    let json =
        serde_json::to_string_pretty(&report).map_err(|e| failed("output", e.to_string()))?;
    write(&dir.join("convoy.json"), json)?;
    let md = markdown(&report);
    write(&dir.join("convoy.md"), &md)?;
    let curve = |name: &str, v: Vec<f64>| Series {
        name: name.to_string(),
        points: [50.0, 75.0, 90.0, 95.0, 99.0]
            .iter()
            .filter_map(|&q| Some((q, percentile(&v, q)?, 0.0)))
            .collect(),
    };
    let short_ttft = |o: &[Observed]| {
        o.iter()
            .filter(|o| !o.long)
            .map(|o| o.ttft_ms)
            .filter(|x| x.is_finite())
            .collect::<Vec<_>>()
    };
    let short_itl = |o: &[Observed]| {
        o.iter()
            .filter(|o| !o.long)
            .flat_map(|o| o.itl_ms.clone())
            .collect::<Vec<_>>()
    };
    lines_svg(
        &dir.join("convoy_ttft.svg"),
        "Short requests: TTFT percentiles",
        "percentile",
        "ms",
        &[
            curve("baseline", short_ttft(&b_obs)),
            curve("convoy", short_ttft(&c_obs)),
        ],
    )
    .map_err(|e| failed("plot", e.to_string()))?;
    lines_svg(
        &dir.join("convoy_itl.svg"),
        "Short requests: inter-token latency percentiles",
        "percentile",
        "ms",
        &[
            curve("baseline", short_itl(&b_obs)),
            curve("convoy", short_itl(&c_obs)),
        ],
    )
    .map_err(|e| failed("plot", e.to_string()))?;
    println!("{md}");
    eprintln!("xtask bench convoy: wrote {}", dir.display());
    if report.criteria.iter().all(|c| c.pass) {
        Ok(())
    } else {
        Err(failed("convoy", "a criterion failed (see the report)"))
    }
}

fn markdown(r: &ConvoyReport) -> String {
    let f = |x: f64| format!("{x:.1}");
    let mut md = format!(
        "# Convoy suite\n\n{}- model: {}; scale {} — shorts {}×({} in, {} out) by {} clients, longs {}×({} in, {} out)\n",
        crate::bench::common::report_header(&r.machine),
        r.model,
        r.scale,
        r.shorts,
        r.short.0,
        r.short.1,
        r.clients,
        r.longs,
        r.long.0,
        r.long.1
    );
    if let Some(l) = r.loadavg_after {
        md.push_str(&format!(
            "- load average after: {:.2} {:.2} {:.2}\n",
            l[0], l[1], l[2]
        ));
    }
    md.push_str("\n## Latency (client side, ms)\n\n");
    let row = |name: &str, p: &PhaseReport| {
        vec![
            name.to_string(),
            f(p.short_ttft_ms.p50),
            f(p.short_ttft_ms.p99),
            f(p.short_itl_ms.p50),
            f(p.short_itl_ms.p99),
            f(p.hol_ms),
            f(p.short_admission_ms.p50),
            p.server_queue_ms_mean.map_or("–".into(), f),
            p.long_ttft_ms.map_or("–".into(), |l| f(l.p50)),
            format!("{:.1}", p.tokens_per_s),
            format!("{:.3}", p.kv_fragmentation_mean),
            format!("{:.0}", p.kv_blocks_used_max),
            p.server_steps
                .map_or("–".into(), |(n, slow)| format!("{slow:.0} / {n:.0}")),
            p.short_streams_missing_token_chunks.to_string(),
            p.errors.to_string(),
        ]
    };
    md.push_str(&markdown_table(
        &[
            "phase",
            "short TTFT p50",
            "short TTFT p99",
            "short ITL p50",
            "short ITL p99",
            "HOL (max short ITL)",
            "client admission p50",
            "server queue mean",
            "long TTFT p50",
            "tokens/s",
            "KV frag mean",
            "KV blocks max",
            "server steps > 500 ms",
            "short streams with fewer token chunks than tokens",
            "errors",
        ],
        &[row("baseline", &r.baseline), row("convoy", &r.convoy)],
    ));
    md.push_str("\n## Criteria\n\n");
    md.push_str(&markdown_table(
        &["criterion", "value", "limit", "result"],
        &r.criteria
            .iter()
            .map(|c| {
                vec![
                    c.name.to_string(),
                    format!("{:.3}", c.value),
                    format!("{}", c.limit),
                    if c.pass { "pass" } else { "FAIL" }.to_string(),
                ]
            })
            .collect::<Vec<_>>(),
    ));
    if let Some(k) = r.kv_blocks_used_after {
        md.push_str(&format!("\nKV blocks used after the run: {k}\n"));
    }
    md.push_str("\nPlots: convoy_ttft.svg, convoy_itl.svg.\n");
    md
}
