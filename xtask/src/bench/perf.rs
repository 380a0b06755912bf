//! `cargo xtask bench perf`: the pp/tg throughput table of the real models (via
//! `kiln bench`, llama-bench's method and field names), optionally beside llama.cpp's
//! `llama-bench` measured in the same run, and streaming latency (TTFT, inter-token
//! latency) of `kiln generate` as a user sees it ([`crate::bench::latency`]). With
//! `--synthetic` the models are synthetic files of real 1B–8B shapes and the comparison is
//! `bench/synthetic.rs`'s.

use std::path::{Path, PathBuf};

use kiln_bench::report::{Series, lines_svg, markdown_table};
use kiln_bench::{Machine, Spread};
use serde::{Deserialize, Serialize};

use crate::XtaskError;
use crate::bench::common::{
    bad, build_kiln, failed, out_dir, positive, report_header, unix_now, write,
};
use crate::bench::latency::{LatencyEntry, latency_markdown, stream_latency};

/// `cargo xtask bench perf`: pp/tg throughput and streaming latency.
#[derive(clap::Args, Clone, Debug)]
pub struct PerfArgs {
    /// Models (known names or paths), comma-separated.
    #[arg(
        long,
        short = 'm',
        value_delimiter = ',',
        default_value = "smollm2-135m,gemma3-270m,qwen2.5-coder-0.5b"
    )]
    pub models: Vec<String>,
    /// Synthetic model shapes instead of the models (`cargo xtask synth` names),
    /// comma-separated; each file is written first if missing.
    #[arg(long, value_delimiter = ',')]
    pub synthetic: Vec<String>,
    /// The quantization mix of the synthetic files.
    #[arg(long = "type", default_value = "q4_k_m")]
    pub mix: String,
    /// Thread counts, comma-separated.
    #[arg(long, short = 't', value_delimiter = ',', default_value = "1,2", value_parser = positive)]
    pub threads: Vec<usize>,
    /// Repetitions of each test (per round with --synthetic).
    #[arg(long, short = 'r', default_value_t = 3, value_parser = positive)]
    pub reps: usize,
    /// Prompt tokens of the pp test.
    #[arg(short = 'p', default_value_t = 512)]
    pub n_prompt: usize,
    /// Generated tokens of the tg test.
    #[arg(short = 'n', default_value_t = 128)]
    pub n_gen: usize,
    /// With --synthetic: prompt tokens of the long-prompt test.
    #[arg(long, default_value_t = 4096)]
    pub long_prompt: usize,
    /// With --synthetic: the context depth of the decode-at-depth test (llama-bench's -d).
    #[arg(long, short = 'd', default_value_t = 4096)]
    pub depth: usize,
    /// With --synthetic: at most this many alternating rounds (engine order rotated each
    /// round); they stop earlier, after two, once every ratio's 95% interval is within ±5%.
    #[arg(long, default_value_t = 4, value_parser = positive)]
    pub rounds: usize,
    /// A `llama-bench` to measure on the same files in the same run (repeatable with
    /// --synthetic: llama.cpp's, ik_llama.cpp's); `LABEL=PATH` names it in the report.
    #[arg(long)]
    pub llama_bench: Vec<String>,
    /// A fast smoke run: pp64, tg16 and, with --synthetic, long prompt 256 and depth 256;
    /// one repetition, one round.
    #[arg(long)]
    pub quick: bool,
    /// Skip the streaming-latency measurement.
    #[arg(long = "no-latency", action = clap::ArgAction::SetFalse)]
    pub latency: bool,
}

impl PerfArgs {
    /// These settings with a `--quick` run's sizes.
    pub fn quickened(&self) -> PerfArgs {
        PerfArgs {
            reps: 1,
            n_prompt: 64,
            n_gen: 16,
            long_prompt: 256,
            depth: 256,
            rounds: 1,
            ..self.clone()
        }
    }
}

/// A `--llama-bench` value: its label and path. Unlabelled, a path naming `ik_llama` is
/// "ik_llama.cpp" and any other "llama.cpp".
pub fn llama_bench_label(value: &str) -> (String, PathBuf) {
    match value.split_once('=') {
        Some((label, path)) if !label.is_empty() && !label.contains('/') => {
            (label.to_string(), PathBuf::from(path))
        }
        _ => {
            let label = if value.contains("ik_llama") {
                "ik_llama.cpp"
            } else {
                "llama.cpp"
            };
            (label.to_string(), PathBuf::from(value))
        }
    }
}

/// One row of `kiln bench -o json` or `llama-bench -o json` (the fields both print).
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct BenchRow {
    pub model_filename: String,
    #[serde(default)]
    pub model_type: String,
    pub n_prompt: usize,
    pub n_gen: usize,
    /// Context tokens already in the cache (llama-bench's `-d`; older builds print none).
    #[serde(default)]
    pub n_depth: usize,
    pub n_threads: usize,
    pub avg_ts: f64,
    pub stddev_ts: f64,
    #[serde(default)]
    pub samples_ts: Vec<f64>,
}

impl BenchRow {
    /// llama-bench's test name: `pp512`, `tg128`, `tg128 @ d4096`.
    pub fn test(&self) -> String {
        let t = if self.n_gen == 0 {
            format!("pp{}", self.n_prompt)
        } else {
            format!("tg{}", self.n_gen)
        };
        if self.n_depth > 0 {
            format!("{t} @ d{}", self.n_depth)
        } else {
            t
        }
    }
}

#[derive(Serialize)]
struct PerfRow {
    model: String,
    quant: String,
    test: String,
    n_threads: usize,
    kiln: Spread,
    llama_cpp: Option<Spread>,
    /// kiln mean / llama.cpp mean.
    ratio: Option<f64>,
}

#[derive(Serialize)]
struct PerfReport<'a> {
    machine: &'a Machine,
    loadavg_after: Option<[f64; 3]>,
    n_prompt: usize,
    n_gen: usize,
    repetitions: usize,
    threads: &'a [usize],
    rows: &'a [PerfRow],
    latency: &'a [LatencyEntry],
    timestamp: u64,
}

pub fn spread(row: &BenchRow) -> Spread {
    Spread::of(&row.samples_ts).unwrap_or(Spread {
        n: 1,
        mean: row.avg_ts,
        sd: row.stddev_ts,
        min: row.avg_ts,
        max: row.avg_ts,
        median: row.avg_ts,
    })
}

pub fn fmt_spread(s: &Spread) -> String {
    format!("{:.1} ± {:.1}", s.mean, s.sd)
}

pub fn run(a: &PerfArgs) -> Result<(), XtaskError> {
    if a.quick {
        return run(&PerfArgs {
            quick: false,
            ..a.quickened()
        });
    }
    if a.models.is_empty() {
        return Err(bad("bench perf needs at least one model"));
    }
    if a.llama_bench.len() > 1 {
        return Err(bad(
            "bench perf compares the shipped models with one --llama-bench; several need --synthetic",
        ));
    }
    let kiln = build_kiln()?;
    if !kiln.supports("bench", &["--n-prompt", "--repetitions", "--output"]) {
        return Err(failed(
            "perf",
            "this kiln has no `kiln bench` (llama-bench-style throughput); build one that does",
        ));
    }
    let out = out_dir("perf")?;
    let machine = Machine::detect();
    eprintln!("xtask bench perf: {}", machine.describe());
    let threads = a
        .threads
        .iter()
        .map(|t| t.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let mut rows = Vec::new();
    let mut latency = Vec::new();
    for model in &a.models {
        let path = kiln_hub::resolve(model)
            .map_err(|e| failed("perf", format!("{model}: {e} (run `cargo xtask models`)")))?;
        eprintln!(
            "xtask bench perf: {model}: kiln bench -t {threads} -r {}",
            a.reps
        );
        let kiln_rows: Vec<BenchRow> = kiln.json(
            "perf",
            &[
                "bench".into(),
                "-m".into(),
                path.display().to_string(),
                "-p".into(),
                a.n_prompt.to_string(),
                "-n".into(),
                a.n_gen.to_string(),
                "-t".into(),
                threads.clone(),
                "-r".into(),
                a.reps.to_string(),
                "-o".into(),
                "json".into(),
            ],
        )?;
        let llama_rows = match a.llama_bench.first() {
            Some(lb) => llama_bench(&llama_bench_label(lb).1, &path, a, &threads)?,
            None => Vec::new(),
        };
        for r in &kiln_rows {
            let k = spread(r);
            let l = llama_rows
                .iter()
                .find(|l| l.test() == r.test() && l.n_threads == r.n_threads)
                .map(spread);
            rows.push(PerfRow {
                model: model.clone(),
                quant: r.model_type.clone(),
                test: r.test(),
                n_threads: r.n_threads,
                ratio: l.as_ref().map(|l| k.mean / l.mean),
                kiln: k,
                llama_cpp: l,
            });
        }
        if a.latency {
            let t = a.threads.iter().copied().max().unwrap_or(1);
            latency.push(stream_latency(&kiln, model, &path, t, a.reps, a.n_gen)?);
        }
    }
    write_report(&out, a, &machine, &rows, &latency)
}

fn llama_bench(
    bin: &Path,
    model: &Path,
    a: &PerfArgs,
    threads: &str,
) -> Result<Vec<BenchRow>, XtaskError> {
    eprintln!("xtask bench perf: llama-bench -t {threads} -r {}", a.reps);
    let o = std::process::Command::new(bin)
        .args(["-m", &model.display().to_string()])
        .args(["-p", &a.n_prompt.to_string(), "-n", &a.n_gen.to_string()])
        .args(["-t", threads, "-r", &a.reps.to_string(), "-o", "json"])
        .output()
        .map_err(|e| failed("llama-bench", format!("cannot run {}: {e}", bin.display())))?;
    if !o.status.success() {
        return Err(failed(
            "llama-bench",
            format!(
                "exited with {}: {}",
                o.status,
                String::from_utf8_lossy(&o.stderr)
            ),
        ));
    }
    serde_json::from_slice(&o.stdout)
        .map_err(|e| failed("llama-bench", format!("unreadable JSON: {e}")))
}

fn write_report(
    out: &Path,
    a: &PerfArgs,
    machine: &Machine,
    rows: &[PerfRow],
    latency: &[LatencyEntry],
) -> Result<(), XtaskError> {
    let plot_err = |e: kiln_bench::BenchError| failed("plot", e.to_string());
    let report = PerfReport {
        machine,
        loadavg_after: kiln_bench::result::loadavg(),
        n_prompt: a.n_prompt,
        n_gen: a.n_gen,
        repetitions: a.reps,
        threads: &a.threads,
        rows,
        latency,
        timestamp: unix_now(),
    };
    let json = serde_json::to_string_pretty(&report)
        .map_err(|e| failed("output", format!("cannot encode the report: {e}")))?;
    write(&out.join("perf.json"), json)?;

    let mut md = format!("# kiln bench perf\n\n{}", report_header(machine));
    md.push_str(&format!(
        "- method: `kiln bench` (llama-bench's: warm-up, then {} repetitions; pp = {} tokens \
         in one context, tg = {} tokens one at a time), tokens/s as mean ± sample sd\n",
        a.reps, a.n_prompt, a.n_gen
    ));
    if let Some(l) = report.loadavg_after {
        md.push_str(&format!(
            "- load average after the run: {:.2} {:.2} {:.2} (above the core count means \
             the figures are disturbed)\n",
            l[0], l[1], l[2]
        ));
    }
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.model.clone(),
                r.quant.clone(),
                r.test.clone(),
                r.n_threads.to_string(),
                fmt_spread(&r.kiln),
                r.llama_cpp.as_ref().map_or("–".into(), fmt_spread),
                r.ratio.map_or("–".into(), |x| format!("{x:.2}×")),
            ]
        })
        .collect();
    md.push_str("\n## Throughput (tokens/s)\n\n");
    md.push_str(&markdown_table(
        &[
            "model",
            "quant",
            "test",
            "threads",
            "kiln",
            "llama.cpp (same run)",
            "kiln / llama.cpp",
        ],
        &table,
    ));
    for model in &a.models {
        let mut series = Vec::new();
        for test in [format!("pp{}", a.n_prompt), format!("tg{}", a.n_gen)] {
            let pick = |f: &dyn Fn(&PerfRow) -> Option<Spread>| {
                rows.iter()
                    .filter(|r| &r.model == model && r.test == test)
                    .filter_map(|r| f(r).map(|s| (r.n_threads as f64, s.mean, s.sd)))
                    .collect::<Vec<_>>()
            };
            let k = pick(&|r| Some(r.kiln.clone()));
            if !k.is_empty() {
                series.push(Series {
                    name: format!("kiln {test}"),
                    points: k,
                });
            }
            let l = pick(&|r| r.llama_cpp.clone());
            if !l.is_empty() {
                series.push(Series {
                    name: format!("llama.cpp {test}"),
                    points: l,
                });
            }
        }
        if series.is_empty() {
            continue;
        }
        let name = format!("tps-{model}.svg");
        lines_svg(
            &out.join(&name),
            &format!("{model}: tokens/s per thread count"),
            "threads",
            "tokens/s",
            &series,
        )
        .map_err(plot_err)?;
        md.push_str(&format!("\n![{model} tokens/s]({name})\n"));
    }
    if !latency.is_empty() {
        md.push_str(&latency_markdown(out, latency, a.n_gen, a.reps)?);
    }
    write(&out.join("perf.md"), &md)?;
    println!("{md}");
    eprintln!(
        "xtask bench perf: report in {}",
        out.join("perf.md").display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama_bench_values_are_labelled_by_their_prefix_or_their_path() {
        let (l, p) = llama_bench_label("mine=build/bin/llama-bench");
        assert_eq!(
            (l.as_str(), p),
            ("mine", PathBuf::from("build/bin/llama-bench"))
        );
        let (l, _) = llama_bench_label("ext/ik_llama.cpp/build/bin/llama-bench");
        assert_eq!(l, "ik_llama.cpp");
        let (l, p) = llama_bench_label("ext/llama.cpp/build/bin/llama-bench");
        assert_eq!(
            (l.as_str(), p),
            (
                "llama.cpp",
                PathBuf::from("ext/llama.cpp/build/bin/llama-bench")
            )
        );
    }

    #[test]
    fn rows_at_a_depth_are_named_as_llama_bench_names_them() {
        let row = |n_prompt, n_gen, n_depth| BenchRow {
            model_filename: String::new(),
            model_type: String::new(),
            n_prompt,
            n_gen,
            n_depth,
            n_threads: 1,
            avg_ts: 1.0,
            stddev_ts: 0.0,
            samples_ts: Vec::new(),
        };
        assert_eq!(row(512, 0, 0).test(), "pp512");
        assert_eq!(row(0, 128, 0).test(), "tg128");
        assert_eq!(row(0, 128, 4096).test(), "tg128 @ d4096");
    }
}
