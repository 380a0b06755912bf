//! Streaming latency of `kiln generate` as a user sees it: every write to stdout is
//! timestamped, giving time to first token (from process start, so including start-up and
//! model load) and inter-token latency; repetitions stop once the generation throughput's
//! CV is below 5%.

use std::io::Read;
use std::path::Path;
use std::process::Stdio;
use std::time::Instant;

use kiln_bench::report::{histogram_svg, markdown_table};
use kiln_bench::{
    BenchmarkConfig, BenchmarkResult, BenchmarkSummary, Machine, StopRule, sample_until_stable,
};
use serde::Serialize;

use crate::XtaskError;
use crate::bench::common::{
    Kiln, all_cores, build_kiln, failed, out_dir, positive, report_header, unix_now, vm_hwm, write,
};

/// `cargo xtask bench latency`: streaming latency of one model alone (`bench perf`
/// measures it after each model's throughput).
#[derive(clap::Args, Debug)]
pub struct LatencyArgs {
    /// The model (a known name or a path).
    #[arg(long, short = 'm', default_value = "smollm2-135m")]
    model: String,
    /// Threads.
    #[arg(long, short = 't', default_value_t = all_cores(), value_parser = positive)]
    threads: usize,
    /// Runs at least (at most three times as many, until the throughput's CV is below 5%).
    #[arg(long, short = 'r', default_value_t = 3, value_parser = positive)]
    reps: usize,
    /// Tokens generated per run.
    #[arg(short = 'n', default_value_t = 128, value_parser = positive)]
    n_gen: usize,
}

pub fn run(a: &LatencyArgs) -> Result<(), XtaskError> {
    let kiln = build_kiln()?;
    let path = kiln_hub::resolve(&a.model).map_err(|e| {
        failed(
            "latency",
            format!("{}: {e} (run `cargo xtask models`)", a.model),
        )
    })?;
    let out = out_dir("latency")?;
    let machine = Machine::detect();
    let entry = stream_latency(&kiln, &a.model, &path, a.threads, a.reps, a.n_gen)?;
    let entries = [entry];
    let json = serde_json::to_string_pretty(&entries)
        .map_err(|e| failed("output", format!("cannot encode the report: {e}")))?;
    write(&out.join("latency.json"), json)?;
    let md = format!(
        "# kiln bench latency\n\n{}{}",
        report_header(&machine),
        latency_markdown(&out, &entries, a.n_gen, a.reps)?
    );
    write(&out.join("latency.md"), &md)?;
    println!("{md}");
    Ok(())
}

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

/// The Markdown section (table and ITL histograms, written into `out`) of `latency`
/// entries measured with `n_gen` tokens and at least `reps` runs.
pub fn latency_markdown(
    out: &Path,
    latency: &[LatencyEntry],
    n_gen: usize,
    reps: usize,
) -> Result<String, XtaskError> {
    let plot_err = |e: kiln_bench::BenchError| failed("plot", e.to_string());
    let mut md = String::new();
    md.push_str(&format!(
        "\n## Streaming latency (`kiln generate`, greedy, {} tokens, short prompt)\n\n\
         TTFT is from process start to the first streamed text (so it includes start-up \
         and model load); ITL is the gap between consecutive writes to stdout. Throughput \
         is the median over runs with a seeded bootstrap 95% interval; runs stop once their \
         CV is below 5% (at least {} runs).\n\n",
        n_gen, reps
    ));
    let ms = |x: f64| format!("{x:.1}");
    let lat: Vec<Vec<String>> = latency
        .iter()
        .map(|l| {
            let s = &l.summary;
            let r = &l.result;
            vec![
                l.model.clone(),
                r.config.threads.to_string(),
                r.iterations.to_string(),
                r.model_load_ms.map_or("–".into(), ms),
                s.ttft.as_ref().map_or("–".into(), |t| {
                    format!("{} / {} / {}", ms(t.p50_ms), ms(t.p95_ms), ms(t.p99_ms))
                }),
                s.itl.as_ref().map_or("–".into(), |i| {
                    format!(
                        "{} ± {} / {} / {}",
                        ms(i.median_ms),
                        ms(i.std_dev_ms),
                        ms(i.p99_ms),
                        ms(i.p999_ms)
                    )
                }),
                match (s.throughput_median, s.throughput_ci_95) {
                    (Some(m), Some(ci)) => {
                        format!("{m:.1} [{:.1}, {:.1}]", ci.lower, ci.upper)
                    }
                    _ => "–".into(),
                },
                format!("{:.3}", s.cv_final),
                r.peak_memory_bytes.map_or("–".into(), |b| {
                    format!("{:.0} MiB", b as f64 / (1u64 << 20) as f64)
                }),
                s.joules_per_token
                    .map_or("not metered".into(), |j| format!("{j:.3} J")),
            ]
        })
        .collect();
    md.push_str(&markdown_table(
        &[
            "model",
            "threads",
            "runs",
            "load ms",
            "TTFT p50 / p95 / p99 ms",
            "ITL median ± sd / p99 / p99.9 ms",
            "gen tokens/s [95% CI]",
            "CV",
            "peak RSS",
            "energy/token",
        ],
        &lat,
    ));
    for l in latency {
        if l.result.itl_ms.is_empty() {
            continue;
        }
        let name = format!("itl-{}.svg", l.model);
        histogram_svg(
            &out.join(&name),
            &format!(
                "{}: inter-token latency, {} threads",
                l.model, l.result.config.threads
            ),
            "ms",
            &l.result.itl_ms,
            40,
        )
        .map_err(plot_err)?;
        md.push_str(&format!("\n![{} ITL histogram]({name})\n", l.model));
    }
    Ok(md)
}
