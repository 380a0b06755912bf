//! Streaming latency of `kiln generate` as a user sees it: every write to stdout is
//! timestamped, giving time to first token (from process start, so including start-up and
//! model load) and inter-token latency; repetitions stop once the generation throughput's
//! CV is below 5%.

use std::io::Read;
use std::path::Path;
use std::process::Stdio;
use std::time::Instant;

use kiln_bench::{
    BenchmarkConfig, BenchmarkResult, BenchmarkSummary, StopRule, sample_until_stable,
};
use serde::Serialize;

use crate::XtaskError;
use crate::bench::common::{Kiln, failed, unix_now, vm_hwm};

#[derive(Serialize)]
pub struct LatencyEntry {
    pub model: String,
    pub result: BenchmarkResult,
    pub summary: BenchmarkSummary,
    /// Streamed writes observed vs tokens generated (a write can carry several tokens).
    pub writes: usize,
}

/// What one streaming `kiln generate` run showed.
struct StreamRun {
    arrivals_ms: Vec<f64>,
    load_ms: Option<f64>,
    gen_tok_s: Option<f64>,
    generated: Option<u64>,
    prompt_tokens: Option<usize>,
    peak_rss: Option<u64>,
}

/// The numbers of `kiln generate`'s closing stderr line ("load 148 ms | prompt 9 tokens,
/// … | generated 64 tokens, 91.2 tokens/s | 2 threads").
fn parse_summary(stderr: &str) -> (Option<f64>, Option<usize>, Option<u64>, Option<f64>) {
    let line = stderr
        .lines()
        .rev()
        .find(|l| l.starts_with("load "))
        .unwrap_or("");
    let words: Vec<&str> = line.split_whitespace().collect();
    let after = |w: &str| {
        words
            .iter()
            .position(|x| *x == w)
            .and_then(|i| words.get(i + 1))
            .map(|s| s.trim_end_matches(','))
    };
    let load = after("load").and_then(|s| s.parse().ok());
    let prompt = after("prompt").and_then(|s| s.parse().ok());
    let generated = after("generated").and_then(|s| s.parse().ok());
    let tps = line
        .split('|')
        .find(|p| p.contains("generated"))
        .and_then(|p| p.split(',').nth(1))
        .and_then(|p| p.split_whitespace().next())
        .and_then(|s| s.parse().ok());
    (load, prompt, generated, tps)
}

/// Runs `kiln generate` with streamed output and timestamps every write it makes.
fn stream_once(
    kiln: &Kiln,
    path: &Path,
    threads: usize,
    n_gen: usize,
) -> Result<StreamRun, XtaskError> {
    const PROMPT: &str = "The history of the city begins with a small settlement on the river, \
                          where traders met to exchange grain and salt. Over the centuries";
    let t0 = Instant::now();
    let mut child = kiln
        .command()
        .args(["generate", "-m", &path.display().to_string()])
        .args(["-t", &threads.to_string(), "-n", &n_gen.to_string()])
        .args(["--temperature", "0", "--ignore-eos", "--prompt", PROMPT])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| failed("latency", format!("cannot run kiln generate: {e}")))?;
    let pid = child.id();
    let mut stdout = child
        .stdout
        .take()
        .ok_or_else(|| failed("latency", "no stdout pipe"))?;
    let mut arrivals = Vec::with_capacity(n_gen + 1);
    let mut buf = [0u8; 4096];
    let mut peak = None;
    loop {
        let n = stdout
            .read(&mut buf)
            .map_err(|e| failed("latency", format!("reading kiln's output: {e}")))?;
        if n == 0 {
            break;
        }
        arrivals.push(t0.elapsed().as_secs_f64() * 1e3);
        peak = vm_hwm(pid).or(peak);
    }
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut stderr);
    }
    let status = child
        .wait()
        .map_err(|e| failed("latency", format!("waiting for kiln: {e}")))?;
    if !status.success() {
        return Err(failed(
            "latency",
            format!("kiln generate exited with {status}: {stderr}"),
        ));
    }
    // The final newline after the text is not a token.
    arrivals.pop();
    let (load_ms, prompt_tokens, generated, gen_tok_s) = parse_summary(&stderr);
    Ok(StreamRun {
        arrivals_ms: arrivals,
        load_ms,
        gen_tok_s,
        generated,
        prompt_tokens,
        peak_rss: peak,
    })
}

fn rapl_energy_uj() -> Option<u64> {
    std::fs::read_to_string("/sys/class/powercap/intel-rapl:0/energy_uj")
        .ok()?
        .trim()
        .parse()
        .ok()
}

pub fn stream_latency(
    kiln: &Kiln,
    model: &str,
    path: &Path,
    threads: usize,
    reps: usize,
    n_gen: usize,
) -> Result<LatencyEntry, XtaskError> {
    eprintln!("xtask bench perf: {model}: streaming latency, {threads} threads");
    let energy0 = rapl_energy_uj();
    let mut runs = Vec::new();
    let sampled = sample_until_stable(StopRule::repetitions(reps, 3 * reps, 0.05), |_| {
        let r = stream_once(kiln, path, threads, n_gen)?;
        let tps = r.gen_tok_s.ok_or_else(|| {
            failed(
                "latency",
                "kiln generate printed no tokens/s summary on stderr",
            )
        })?;
        runs.push(r);
        Ok::<f64, XtaskError>(tps)
    })?;
    let energy = match (energy0, rapl_energy_uj()) {
        (Some(a), Some(b)) if b >= a => Some((b - a) as f64 / 1e6),
        _ => None,
    };
    let mut ttft = Vec::new();
    let mut itl = Vec::new();
    let mut loads = Vec::new();
    let mut writes = 0;
    for r in &runs {
        if let Some((first, gaps)) = kiln_bench::metrics::split_arrivals(&r.arrivals_ms) {
            ttft.push(first);
            itl.extend(gaps);
        }
        writes += r.arrivals_ms.len();
        loads.extend(r.load_ms);
    }
    let file_type = kiln_format::GgufFile::open(path)
        .map(|f| kiln_bench::convert::dominant_type(&f))
        .unwrap_or_else(|e| format!("unreadable: {e}"));
    let result = BenchmarkResult {
        config: BenchmarkConfig {
            model: model.to_string(),
            quant: file_type,
            kv_type: "default".into(),
            threads,
            n_prompt: runs.first().and_then(|r| r.prompt_tokens).unwrap_or(0),
            n_gen,
            runtime: "kiln".into(),
            runtime_version: env!("CARGO_PKG_VERSION").into(),
        },
        cold_start_ms: None,
        model_load_ms: kiln_bench::stats::median(&loads),
        ttft_ms: ttft,
        itl_ms: itl,
        generation_tok_s: sampled.samples.clone(),
        peak_memory_bytes: runs.iter().filter_map(|r| r.peak_rss).max(),
        kv_cache_waste_pct: None,
        energy_joules: energy,
        tokens_generated: runs.iter().filter_map(|r| r.generated).sum(),
        iterations: sampled.samples.len(),
        cv_at_stop: sampled.stop.cv(),
        timestamp: unix_now(),
    };
    Ok(LatencyEntry {
        model: model.to_string(),
        summary: result.summary(),
        result,
        writes,
    })
}
