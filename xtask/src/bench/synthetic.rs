//! `cargo xtask bench perf --synthetic SHAPES`: Kiln against one or more `llama-bench`s
//! (llama.cpp's, ik_llama.cpp's) on the same synthetic files of real 1B–8B shapes
//! ([`crate::synth`]), in the same run: engines alternate, their order rotated each round,
//! and rounds repeat until every ratio's 95% interval is within ±5% (or the round limit).
//! Rows pp512, pp4096, tg128 and tg128 at depth 4096, at each thread count; beside them
//! the machine's read bandwidth and decode as a share of its roofline (weight and KV bytes
//! read per token ÷ bandwidth), each engine's peak RSS, and Kiln's time to first token
//! from a cold process (file in the page cache).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use kiln_bench::report::{Series, lines_svg, markdown_table};
use kiln_bench::{Machine, Spread};
use kiln_format::GgufFile;
use serde::Serialize;

use crate::XtaskError;
use crate::bench::bandwidth::read_bandwidth;
use crate::bench::common::{
    Kiln, bad, build_kiln, failed, out_dir, report_header, run_measured, unix_now, write,
};
use crate::bench::latency::stream_latency;
use crate::bench::perf::{BenchRow, PerfArgs, fmt_spread, llama_bench_label};
use crate::synth::{self, Mix, Shape};

/// Relative half-width of a ratio's 95% interval at which the rounds stop.
const TIGHT: f64 = 0.05;

enum Runner<'k> {
    Kiln(&'k Kiln),
    LlamaBench(PathBuf),
}

struct Engine<'k> {
    label: String,
    runner: Runner<'k>,
    /// Whether its bench takes a context depth (`-d`): ik_llama.cpp's `llama-bench` has
    /// none, so it runs no depth test and gets no `-d` on the others.
    depth: bool,
}

/// Whether the `llama-bench` at `path` takes `-d, --n-depth` (its `--help` lists it).
fn llama_bench_has_depth(path: &Path) -> bool {
    Command::new(path)
        .arg("--help")
        .output()
        .is_ok_and(|o| help_lists_depth(&o.stdout) || help_lists_depth(&o.stderr))
}

/// Whether a `llama-bench --help` text lists the context-depth option.
fn help_lists_depth(help: &[u8]) -> bool {
    String::from_utf8_lossy(help).contains("--n-depth")
}

/// One invocation's tests: prompt lengths, generation length, depth.
struct Tests {
    prompts: Vec<usize>,
    n_gen: usize,
    depth: usize,
}

impl Engine<'_> {
    /// Runs the engine's bench on `file` once; its rows and the process's peak RSS.
    fn bench(
        &self,
        file: &Path,
        t: &Tests,
        threads: &str,
        reps: usize,
    ) -> Result<(Vec<BenchRow>, Option<u64>), XtaskError> {
        let prompts = t
            .prompts
            .iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let mut cmd = match &self.runner {
            Runner::Kiln(k) => {
                let mut c = k.command();
                c.arg("bench");
                c
            }
            Runner::LlamaBench(p) => Command::new(p),
        };
        cmd.args(["-m", &file.display().to_string(), "-p", &prompts])
            .args(["-n", &t.n_gen.to_string()]);
        if self.depth {
            cmd.args(["-d", &t.depth.to_string()]);
        }
        cmd.args(["-t", threads, "-r", &reps.to_string(), "-o", "json"]);
        let step = "perf --synthetic";
        let m = run_measured(&mut cmd)
            .map_err(|e| failed(step, format!("cannot run {}: {e}", self.label)))?;
        if !m.output.status.success() {
            return Err(failed(
                step,
                format!(
                    "{} exited with {}:\n{}",
                    self.label,
                    m.output.status,
                    String::from_utf8_lossy(&m.output.stderr).trim_end()
                ),
            ));
        }
        let rows = serde_json::from_slice(&m.output.stdout)
            .map_err(|e| failed(step, format!("{} printed no JSON rows: {e}", self.label)))?;
        Ok((rows, m.peak_rss))
    }
}

/// A ratio of means and its 95% interval (delta method on the log ratio), when both
/// sides have at least two samples.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Ratio {
    pub ratio: f64,
    pub low: Option<f64>,
    pub high: Option<f64>,
}

impl Ratio {
    pub fn of(a: &Spread, b: &Spread) -> Ratio {
        let ratio = a.mean / b.mean;
        let var = |s: &Spread| (s.sd / s.mean).powi(2) / s.n as f64;
        let (low, high) = if a.n >= 2 && b.n >= 2 && a.mean > 0.0 && b.mean > 0.0 {
            let se = (var(a) + var(b)).sqrt();
            (
                Some(ratio * (-1.96 * se).exp()),
                Some(ratio * (1.96 * se).exp()),
            )
        } else {
            (None, None)
        };
        Ratio { ratio, low, high }
    }

    /// Whether the interval is within ±[`TIGHT`] of the ratio.
    pub fn tight(&self) -> bool {
        self.high.is_some_and(|h| h / self.ratio - 1.0 <= TIGHT)
    }
}

#[derive(Serialize)]
struct Row {
    shape: String,
    mix: String,
    test: String,
    threads: usize,
    /// Per engine, in engine order (Kiln first).
    engines: Vec<Option<Spread>>,
    /// Kiln ÷ each other engine.
    ratios: Vec<Option<Ratio>>,
    /// Decode rows: each engine's tokens/s as a share of the bandwidth roofline.
    roofline_pct: Vec<Option<f64>>,
}

#[derive(Serialize)]
struct Memory {
    shape: String,
    file_bytes: u64,
    /// Weight bytes a decode step reads.
    weight_bytes: u64,
    /// Per engine: the largest peak RSS of its bench processes.
    peak_rss: Vec<Option<u64>>,
    /// `kiln generate` from process start to the first streamed token, p50 ms.
    kiln_ttft_ms: Option<f64>,
    kiln_load_ms: Option<f64>,
}

#[derive(Serialize)]
struct Report<'a> {
    machine: &'a Machine,
    engines: Vec<String>,
    /// Engines whose bench takes no context depth (no depth rows).
    without_depth: Vec<String>,
    bandwidth_bytes_per_s: &'a [(usize, f64)],
    rounds: usize,
    reps_per_round: usize,
    rows: &'a [Row],
    memory: &'a [Memory],
    timestamp: u64,
}

/// Bytes one decode step reads: every tensor but the token embedding (one row of it is
/// read), unless the embedding is also the output.
fn weight_bytes(file: &GgufFile) -> u64 {
    let tied = file.tensor_info("output.weight").is_none();
    file.tensors()
        .iter()
        .filter(|t| tied || t.name != "token_embd.weight")
        .map(|t| t.n_bytes)
        .sum()
}

/// f16 K and V bytes of one position.
fn kv_bytes_per_position(shape: &Shape) -> u64 {
    2 * 2 * shape.n_layer * shape.n_head_kv * shape.head_dim
}

pub fn run(a: &PerfArgs) -> Result<(), XtaskError> {
    let a = if a.quick { a.quickened() } else { a.clone() };
    let mix = Mix::parse(&a.mix).ok_or_else(|| {
        bad(format!(
            "unknown type '{}'; the mixes are {}",
            a.mix,
            synth::mix_names()
        ))
    })?;
    let mut files = Vec::new();
    for name in &a.synthetic {
        let (shape, _) = synth::lookup(name, mix.name())?;
        let path = synth::default_path(shape, mix);
        if !path.is_file() {
            synth::ensure(shape, mix, &path, 0)?;
        }
        files.push((shape, path));
    }
    let kiln = build_kiln()?;
    if !kiln.supports("bench", &["--n-depth"]) {
        return Err(failed(
            "perf --synthetic",
            "this kiln bench has no --n-depth; build one that does",
        ));
    }
    let mut engines = vec![Engine {
        label: "kiln".into(),
        runner: Runner::Kiln(&kiln),
        depth: true,
    }];
    for lb in &a.llama_bench {
        let (label, path) = llama_bench_label(lb);
        if !path.is_file() {
            return Err(bad(format!(
                "--llama-bench {}: no such file",
                path.display()
            )));
        }
        let depth = llama_bench_has_depth(&path);
        if !depth {
            eprintln!(
                "xtask bench perf: {label}'s llama-bench ({}) takes no -d: no depth rows for it",
                path.display()
            );
        }
        engines.push(Engine {
            label,
            runner: Runner::LlamaBench(path),
            depth,
        });
    }
    let out = out_dir("perf-synthetic")?;
    let machine = Machine::detect();
    eprintln!("xtask bench perf: {}", machine.describe());
    eprintln!("xtask bench perf: measuring read bandwidth");
    let bandwidth = read_bandwidth(&a.threads, a.quick);
    for (t, bw) in &bandwidth {
        eprintln!("xtask bench perf: {t} threads: {:.1} GB/s", bw / 1e9);
    }
    let threads = a
        .threads
        .iter()
        .map(|t| t.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let invocations = [
        Tests {
            prompts: [a.n_prompt, a.long_prompt]
                .into_iter()
                .filter(|&p| p > 0)
                .collect(),
            n_gen: a.n_gen,
            depth: 0,
        },
        Tests {
            prompts: vec![0],
            n_gen: a.n_gen,
            depth: a.depth,
        },
    ];
    // The depth run only when it has a decode test at a depth.
    let invocations: Vec<&Tests> = invocations
        .iter()
        .filter(|t| t.depth == 0 || (a.depth > 0 && t.n_gen > 0))
        .collect();

    let mut rows = Vec::new();
    let mut memory = Vec::new();
    let mut rounds_done = 0;
    for (shape, path) in &files {
        let gguf = GgufFile::open(path)
            .map_err(|e| failed("perf --synthetic", format!("{}: {e}", path.display())))?;
        let weights = weight_bytes(&gguf);
        // (engine, test, threads) → samples over every round.
        let mut samples: BTreeMap<(usize, String, usize), Vec<f64>> = BTreeMap::new();
        let mut order: Vec<(String, usize, usize)> = Vec::new();
        let mut peaks = vec![None::<u64>; engines.len()];
        for round in 0..a.rounds {
            for k in 0..engines.len() {
                let e = (k + round) % engines.len();
                for t in &invocations {
                    if t.depth > 0 && !engines[e].depth {
                        continue;
                    }
                    eprintln!(
                        "xtask bench perf: {} round {}: {} -p {:?} -n {} -d {} -t {threads}",
                        shape.name,
                        round + 1,
                        engines[e].label,
                        t.prompts,
                        t.n_gen,
                        t.depth
                    );
                    let (got, peak) = engines[e].bench(path, t, &threads, a.reps)?;
                    peaks[e] = peaks[e].max(peak);
                    for r in got {
                        let key = (r.test(), r.n_depth, r.n_threads);
                        if !order.contains(&key) {
                            order.push(key);
                        }
                        let s = if r.samples_ts.is_empty() {
                            vec![r.avg_ts]
                        } else {
                            r.samples_ts.clone()
                        };
                        samples
                            .entry((e, r.test(), r.n_threads))
                            .or_default()
                            .extend(s);
                    }
                }
            }
            rounds_done = rounds_done.max(round + 1);
            let spread = |e: usize, test: &str, th: usize| {
                samples
                    .get(&(e, test.to_string(), th))
                    .and_then(|v| Spread::of(v))
            };
            let tight = order.iter().all(|(test, _, th)| {
                (1..engines.len()).all(|e| match (spread(0, test, *th), spread(e, test, *th)) {
                    (Some(k), Some(l)) => Ratio::of(&k, &l).tight(),
                    _ => true,
                })
            });
            if round + 1 >= 2 && tight {
                break;
            }
        }
        for (test, depth, th) in &order {
            let spreads: Vec<Option<Spread>> = (0..engines.len())
                .map(|e| {
                    samples
                        .get(&(e, test.clone(), *th))
                        .and_then(|v| Spread::of(v))
                })
                .collect();
            let ratios = (1..engines.len())
                .map(|e| match (&spreads[0], &spreads[e]) {
                    (Some(k), Some(l)) => Some(Ratio::of(k, l)),
                    _ => None,
                })
                .collect();
            let bw = bandwidth.iter().find(|(t, _)| t == th).map(|b| b.1);
            let decode = test.starts_with("tg");
            // Decode reads the weights and the KV of the context so far (on average the
            // depth plus half the generated tokens).
            let ctx = *depth as u64 + a.n_gen as u64 / 2;
            let bytes = weights + ctx * kv_bytes_per_position(shape);
            let roofline_pct = spreads
                .iter()
                .map(|s| match (s, bw) {
                    (Some(s), Some(bw)) if decode => Some(100.0 * s.mean * bytes as f64 / bw),
                    _ => None,
                })
                .collect();
            rows.push(Row {
                shape: shape.name.to_string(),
                mix: mix.name().to_string(),
                test: test.clone(),
                threads: *th,
                engines: spreads,
                ratios,
                roofline_pct,
            });
        }
        let (ttft, load) = if a.latency {
            let t = a.threads.iter().copied().max().unwrap_or(1);
            let l = stream_latency(&kiln, shape.name, path, t, a.reps, a.n_gen.min(16))?;
            let ttft = l.summary.ttft.as_ref().map(|t| t.p50_ms);
            peaks[0] = peaks[0].max(l.result.peak_memory_bytes);
            (ttft, l.result.model_load_ms)
        } else {
            (None, None)
        };
        memory.push(Memory {
            shape: shape.name.to_string(),
            file_bytes: std::fs::metadata(path).map_or(0, |m| m.len()),
            weight_bytes: weights,
            peak_rss: peaks,
            kiln_ttft_ms: ttft,
            kiln_load_ms: load,
        });
    }
    let labels: Vec<String> = engines.iter().map(|e| e.label.clone()).collect();
    let report = Report {
        machine: &machine,
        engines: labels.clone(),
        without_depth: engines
            .iter()
            .filter(|e| !e.depth)
            .map(|e| e.label.clone())
            .collect(),
        bandwidth_bytes_per_s: &bandwidth,
        rounds: rounds_done,
        reps_per_round: a.reps,
        rows: &rows,
        memory: &memory,
        timestamp: unix_now(),
    };
    write_report(&out, &a, &report, &labels)
}

fn write_report(
    out: &Path,
    a: &PerfArgs,
    report: &Report<'_>,
    labels: &[String],
) -> Result<(), XtaskError> {
    let json = serde_json::to_string_pretty(report)
        .map_err(|e| failed("output", format!("cannot encode the report: {e}")))?;
    write(&out.join("perf-synthetic.json"), json)?;
    let mib = |b: u64| format!("{:.0} MiB", b as f64 / (1u64 << 20) as f64);
    let mut md = format!(
        "# kiln bench perf --synthetic\n\n{}",
        report_header(report.machine)
    );
    md.push_str(&format!(
        "- files: `cargo xtask synth` (random weights in the real shapes, {} mix, borrowed \
         tokenizers); engines alternate, order rotated each round; {} round(s) of {} \
         repetition(s){}\n",
        a.mix,
        report.rounds,
        report.reps_per_round,
        if a.quick { " (--quick)" } else { "" }
    ));
    let bw: Vec<String> = report
        .bandwidth_bytes_per_s
        .iter()
        .map(|(t, b)| format!("{t} thread(s) {:.1} GB/s", b / 1e9))
        .collect();
    md.push_str(&format!(
        "- read bandwidth (sum over a {} buffer, best of 4): {}\n- roofline: decode \
         tokens/s × (weight bytes + f16 KV bytes of the context) ÷ bandwidth\n",
        if a.quick { "256 MiB" } else { "1 GiB" },
        bw.join(", ")
    ));
    for l in &report.without_depth {
        md.push_str(&format!(
            "- {l}: its `llama-bench` takes no `-d` (context depth): no rows at a depth\n"
        ));
    }
    let mut headers: Vec<String> = vec!["shape".into(), "test".into(), "threads".into()];
    headers.extend(labels.iter().map(|l| format!("{l} t/s")));
    headers.extend(
        labels
            .iter()
            .skip(1)
            .map(|l| format!("kiln / {l} [95% CI]")),
    );
    headers.extend(labels.iter().map(|l| format!("{l} % roofline")));
    let table: Vec<Vec<String>> = report
        .rows
        .iter()
        .map(|r| {
            let mut v = vec![r.shape.clone(), r.test.clone(), r.threads.to_string()];
            v.extend(
                r.engines
                    .iter()
                    .map(|s| s.as_ref().map_or("–".into(), fmt_spread)),
            );
            v.extend(r.ratios.iter().map(|x| match x {
                Some(Ratio {
                    ratio,
                    low: Some(lo),
                    high: Some(hi),
                }) => format!("{ratio:.2}× [{lo:.2}, {hi:.2}]"),
                Some(x) => format!("{:.2}×", x.ratio),
                None => "–".into(),
            }));
            v.extend(
                r.roofline_pct
                    .iter()
                    .map(|p| p.map_or("–".into(), |p| format!("{p:.0}%"))),
            );
            v
        })
        .collect();
    let h: Vec<&str> = headers.iter().map(String::as_str).collect();
    md.push_str("\n## Throughput (tokens/s, mean ± sd over every round)\n\n");
    md.push_str(&markdown_table(&h, &table));

    let mut mh: Vec<String> = vec!["shape".into(), "file".into(), "decode reads".into()];
    mh.extend(labels.iter().map(|l| format!("{l} peak RSS")));
    mh.extend(["kiln load ms".into(), "kiln cold TTFT p50 ms".into()]);
    let mem: Vec<Vec<String>> = report
        .memory
        .iter()
        .map(|m| {
            let mut v = vec![m.shape.clone(), mib(m.file_bytes), mib(m.weight_bytes)];
            v.extend(m.peak_rss.iter().map(|p| p.map_or("–".into(), mib)));
            v.push(m.kiln_load_ms.map_or("–".into(), |x| format!("{x:.0}")));
            v.push(m.kiln_ttft_ms.map_or("–".into(), |x| format!("{x:.0}")));
            v
        })
        .collect();
    let h: Vec<&str> = mh.iter().map(String::as_str).collect();
    md.push_str(
        "\n## Memory and start-up\n\nPeak RSS: the largest `VmHWM` of each engine's bench \
         processes (all thread counts and depths; Kiln's includes `kiln generate`). TTFT: \
         `kiln generate` from process start to the first streamed token, the file in the \
         page cache.\n\n",
    );
    md.push_str(&markdown_table(&h, &mem));

    let plot_err = |e: kiln_bench::BenchError| failed("plot", e.to_string());
    let shapes: Vec<&str> = {
        let mut v: Vec<&str> = report.rows.iter().map(|r| r.shape.as_str()).collect();
        v.dedup();
        v
    };
    for shape in shapes {
        let mut series = Vec::new();
        let tests: Vec<&str> = {
            let mut v: Vec<&str> = report
                .rows
                .iter()
                .filter(|r| r.shape == shape)
                .map(|r| r.test.as_str())
                .collect();
            v.sort_unstable();
            v.dedup();
            v
        };
        for test in tests {
            for (e, label) in labels.iter().enumerate() {
                let points: Vec<(f64, f64, f64)> = report
                    .rows
                    .iter()
                    .filter(|r| r.shape == shape && r.test == test)
                    .filter_map(|r| {
                        r.engines[e]
                            .as_ref()
                            .map(|s| (r.threads as f64, s.mean, s.sd))
                    })
                    .collect();
                if !points.is_empty() {
                    series.push(Series {
                        name: format!("{label} {test}"),
                        points,
                    });
                }
            }
        }
        if series.is_empty() {
            continue;
        }
        let name = format!("tps-{shape}.svg");
        lines_svg(
            &out.join(&name),
            &format!("{shape} {}: tokens/s per thread count", a.mix),
            "threads",
            "tokens/s",
            &series,
        )
        .map_err(plot_err)?;
        md.push_str(&format!("\n![{shape} tokens/s]({name})\n"));
    }
    write(&out.join("perf-synthetic.md"), &md)?;
    println!("{md}");
    eprintln!(
        "xtask bench perf: report in {}",
        out.join("perf-synthetic.md").display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spread(n: usize, mean: f64, sd: f64) -> Spread {
        Spread {
            n,
            mean,
            sd,
            min: mean - sd,
            max: mean + sd,
            median: mean,
        }
    }

    #[test]
    fn a_ratio_of_precise_means_is_tight_and_of_noisy_ones_is_not() {
        let r = Ratio::of(&spread(10, 120.0, 1.0), &spread(10, 100.0, 1.0));
        assert!((r.ratio - 1.2).abs() < 1e-12);
        let (lo, hi) = (r.low.unwrap(), r.high.unwrap());
        assert!(lo < 1.2 && hi > 1.2 && r.tight(), "{r:?}");
        let noisy = Ratio::of(&spread(3, 120.0, 30.0), &spread(3, 100.0, 30.0));
        assert!(!noisy.tight(), "{noisy:?}");
        let single = Ratio::of(&spread(1, 120.0, 0.0), &spread(1, 100.0, 0.0));
        assert!(single.low.is_none() && !single.tight());
    }

    #[test]
    fn a_llama_bench_whose_help_lists_no_n_depth_is_taken_for_one_without_depth() {
        // Lines of llama.cpp b10573's and ik_llama.cpp's `llama-bench --help`.
        let p = "  -p, --n-prompt <n>                  (default: 512)\n";
        let n = "  -n, --n-gen <n>                     (default: 128)\n";
        let d = "  -d, --n-depth <n>                   (default: 0)\n";
        let llama = format!("{p}{n}{d}");
        let ik = format!("{p}{n}");
        assert!(help_lists_depth(llama.as_bytes()));
        assert!(!help_lists_depth(ik.as_bytes()));
        // A bench that cannot be run is not asked for a depth either.
        assert!(!llama_bench_has_depth(Path::new(
            "/nonexistent/llama-bench"
        )));
    }

    #[test]
    fn a_position_of_kv_is_f16_k_and_v_of_every_kv_head_of_every_layer() {
        let shape = synth::shape("llama-3.2-1b").unwrap();
        assert_eq!(kv_bytes_per_position(shape), 2 * 2 * 16 * 8 * 64);
    }
}
