//! What one benchmark run measured, its summary, and the machine it ran on.
//!
//! Everything that was not measured is `None` — never a placeholder number.

use serde::{Deserialize, Serialize};

use crate::metrics::{ItlMetrics, TtftMetrics};
use crate::stats::{Bootstrap, Interval, Statistic, median};

/// What was run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BenchmarkConfig {
    /// Model name or file.
    pub model: String,
    /// Weight type of the file (e.g. `Q4_1`, `Q4_K_M`).
    pub quant: String,
    /// KV-cache type (e.g. `f16`).
    pub kv_type: String,
    pub threads: usize,
    pub n_prompt: usize,
    pub n_gen: usize,
    pub runtime: String,
    pub runtime_version: String,
}

/// Raw measurements of one benchmark: one entry per iteration where it is a list.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BenchmarkResult {
    pub config: BenchmarkConfig,
    /// Process start to ready-to-generate, first run (file not yet cached), ms.
    pub cold_start_ms: Option<f64>,
    /// Model load with the file in the page cache, ms.
    pub model_load_ms: Option<f64>,
    pub ttft_ms: Vec<f64>,
    pub itl_ms: Vec<f64>,
    /// Generation throughput per iteration, tokens/s.
    pub generation_tok_s: Vec<f64>,
    pub peak_memory_bytes: Option<u64>,
    pub kv_cache_waste_pct: Option<f64>,
    /// Energy over the run, when the platform exposes a meter.
    pub energy_joules: Option<f64>,
    pub tokens_generated: u64,
    /// Iterations actually run (dynamic sampling).
    pub iterations: usize,
    /// CV of the throughput when sampling stopped.
    pub cv_at_stop: f64,
    /// Unix time, seconds.
    pub timestamp: u64,
}

/// The figures a report shows for a [`BenchmarkResult`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BenchmarkSummary {
    pub ttft: Option<TtftMetrics>,
    pub itl: Option<ItlMetrics>,
    pub throughput_median: Option<f64>,
    /// Bootstrap 95% interval of the median throughput.
    pub throughput_ci_95: Option<Interval>,
    pub joules_per_token: Option<f64>,
    pub kv_cache_waste_pct: Option<f64>,
    pub iterations: usize,
    pub cv_final: f64,
}

impl BenchmarkResult {
    /// Summarises the raw measurements; the bootstrap is seeded, so the same result always
    /// gives the same interval.
    pub fn summary(&self) -> BenchmarkSummary {
        let boot = Bootstrap {
            statistic: Statistic::Median,
            ..Bootstrap::default()
        };
        BenchmarkSummary {
            ttft: TtftMetrics::from_measurements(&self.ttft_ms),
            itl: ItlMetrics::from_measurements(&self.itl_ms),
            throughput_median: median(&self.generation_tok_s),
            throughput_ci_95: boot.interval(&self.generation_tok_s),
            joules_per_token: self
                .energy_joules
                .filter(|_| self.tokens_generated > 0)
                .map(|j| j / self.tokens_generated as f64),
            kv_cache_waste_pct: self.kv_cache_waste_pct,
            iterations: self.iterations,
            cv_final: self.cv_at_stop,
        }
    }
}

/// The machine a report was measured on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    pub cpu: String,
    /// Logical CPUs available to this process.
    pub cores: usize,
    /// SIMD extensions the CPU reports that matter to the kernels.
    pub isa_features: Vec<String>,
    /// The kernel set Kiln dispatches to (`KILN_ISA` or the best available).
    pub kiln_isa: String,
    pub memory_bytes: Option<u64>,
    pub os: String,
    /// 1-, 5- and 15-minute load averages when the report was made (noise indicator).
    pub loadavg: Option<[f64; 3]>,
}

impl Machine {
    /// Reads the CPU model, features and memory from `/proc` (Linux); elsewhere fills what
    /// the standard library knows.
    pub fn detect() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let field = |name: &str| {
            cpuinfo.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == name).then(|| v.trim().to_string())
            })
        };
        let cpu = field("model name")
            .or_else(|| field("CPU part"))
            .unwrap_or_else(|| std::env::consts::ARCH.to_string());
        let flags = field("flags")
            .or_else(|| field("Features"))
            .unwrap_or_default();
        const WANTED: &[&str] = &[
            "sse4_2",
            "avx",
            "avx2",
            "fma",
            "f16c",
            "avx512f",
            "avx512bw",
            "avx512vl",
            "avx512_vnni",
            "avx_vnni",
            "neon",
            "asimd",
            "asimddp",
        ];
        let isa_features = flags
            .split_whitespace()
            .filter(|f| WANTED.contains(f))
            .map(str::to_string)
            .collect();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let memory_bytes = meminfo.lines().find_map(|l| {
            let rest = l.strip_prefix("MemTotal:")?;
            let kb: u64 = rest.trim().trim_end_matches("kB").trim().parse().ok()?;
            Some(kb * 1024)
        });
        Machine {
            cpu,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            isa_features,
            kiln_isa: kiln_quant::try_active_isa()
                .map_or_else(|e| format!("unavailable: {e}"), |i| i.name().to_string()),
            memory_bytes,
            os: format!("{} {}", std::env::consts::OS, std::env::consts::ARCH),
            loadavg: loadavg(),
        }
    }

    /// One line for report headers.
    pub fn describe(&self) -> String {
        let mem = self
            .memory_bytes
            .map(|b| format!(", {:.0} GiB", b as f64 / (1u64 << 30) as f64))
            .unwrap_or_default();
        let load = self
            .loadavg
            .map(|l| format!(", load {:.2} {:.2} {:.2}", l[0], l[1], l[2]))
            .unwrap_or_default();
        format!(
            "{} ({} logical cores{mem}); ISA: {}; kiln kernels: {}; {}{load}",
            self.cpu,
            self.cores,
            self.isa_features.join(" "),
            self.kiln_isa,
            self.os
        )
    }
}

/// The system load averages, from `/proc/loadavg`.
pub fn loadavg() -> Option<[f64; 3]> {
    let s = std::fs::read_to_string("/proc/loadavg").ok()?;
    let mut it = s.split_whitespace().map(|x| x.parse::<f64>().ok());
    Some([it.next()??, it.next()??, it.next()??])
}

/// Peak resident set size of this process (`VmHWM`), when the platform reports it.
pub fn peak_rss_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    s.lines().find_map(|l| {
        let kb: u64 = l
            .strip_prefix("VmHWM:")?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()?;
        Some(kb * 1024)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result() -> BenchmarkResult {
        BenchmarkResult {
            config: BenchmarkConfig {
                model: "m".into(),
                quant: "Q4_0".into(),
                kv_type: "f16".into(),
                threads: 2,
                n_prompt: 8,
                n_gen: 4,
                runtime: "kiln".into(),
                runtime_version: "0.1.0".into(),
            },
            cold_start_ms: None,
            model_load_ms: Some(12.0),
            ttft_ms: vec![10.0, 30.0, 20.0],
            itl_ms: vec![5.0, 6.0, 7.0, 8.0],
            generation_tok_s: vec![100.0, 110.0, 90.0, 105.0, 95.0],
            peak_memory_bytes: None,
            kv_cache_waste_pct: Some(3.0),
            energy_joules: None,
            tokens_generated: 20,
            iterations: 5,
            cv_at_stop: 0.07,
            timestamp: 0,
        }
    }

    #[test]
    fn summary_reports_medians_tails_and_a_seeded_interval() {
        let r = result();
        let s = r.summary();
        assert_eq!(s.throughput_median, Some(100.0));
        let ci = s.throughput_ci_95.expect("non-empty");
        assert!(ci.lower <= 100.0 && 100.0 <= ci.upper);
        assert_eq!(s, r.summary(), "the bootstrap is seeded");
        assert_eq!(s.ttft.as_ref().map(|t| t.p50_ms), Some(20.0));
        assert_eq!(s.itl.as_ref().map(|t| t.median_ms), Some(6.5));
        assert_eq!(s.joules_per_token, None, "no meter, no energy figure");
        assert_eq!((s.iterations, s.cv_final), (5, 0.07));
    }

    #[test]
    fn results_round_trip_through_json() {
        let r = result();
        let json = serde_json::to_string(&r).expect("serializes");
        let back: BenchmarkResult = serde_json::from_str(&json).expect("parses");
        assert_eq!(back, r);
        let s = serde_json::to_value(r.summary()).expect("serializes");
        assert!(s["throughput_ci_95"]["lower"].is_number());
    }

    #[test]
    fn machine_detection_names_the_cpu() {
        let m = Machine::detect();
        assert!(m.cores >= 1);
        assert!(!m.cpu.is_empty());
        assert!(m.describe().contains(&m.cpu));
    }
}
