//! `cargo xtask bench perf | kl | latency | convoy | soak | spec | cluster`: the benchmark suites. Each builds
//! the release `kiln` binary, drives it as a user would, and writes JSON, Markdown and SVG
//! plots under `<target>/kiln-bench/<suite>/`.
//!
//! The suites share [`common`], a leaf. `perf` measures streaming latency through
//! [`latency`]; its `--synthetic` comparison ([`synthetic`]) uses `perf`'s rows and
//! [`bandwidth`]. Nothing points back up.

pub mod bandwidth;
pub mod cluster;
pub mod common;
pub mod convoy;
pub mod kl;
pub mod latency;
pub mod perf;
pub mod soak;
pub mod spec;
pub mod synthetic;

use crate::XtaskError;

/// The suites.
#[derive(clap::Subcommand, Debug)]
pub enum Suite {
    /// Throughput (pp/tg tokens/s, optionally beside llama-bench in the same run) and
    /// streaming latency of `kiln generate`.
    Perf(perf::PerfArgs),
    /// Quality: KL divergence per weight type and KV type vs f32; thresholds = llama.cpp's
    /// figures on the same files × margin.
    Kl(kl::KlArgs),
    /// Streaming latency of `kiln generate` alone: TTFT from process start, inter-token
    /// latency, throughput, peak RSS.
    Latency(latency::LatencyArgs),
    /// Serving: short requests alone vs mixed with long ones through `kiln serve`
    /// (TTFT/ITL p50/p99, head-of-line blocking, KV fragmentation).
    Convoy(convoy::ConvoyArgs),
    /// Serving under load and faults through `kiln serve`: lost requests (must be 0), greedy
    /// answers vs lone references, refusals by limit, RSS, KV blocks at the end, TTFT/ITL.
    Soak(soak::SoakArgs),
    /// Speculative decoding: code editing, summarising and open chat, tokens/s with and
    /// without drafts, acceptance, greedy outputs checked identical; llama.cpp's
    /// `llama-lookup` / `llama-speculative` alongside when a build is given.
    Spec(spec::SpecArgs),
    /// Scale-out: replicas of `kiln serve` behind the real vllm-router, `round_robin` vs
    /// `cache_aware` vs `kv_aware` (prefix tokens reused, TTFT, failures) on a shared-prefix
    /// workload, and a replica SIGTERMed mid-run with nothing lost.
    Cluster(cluster::ClusterArgs),
}

pub fn run(suite: &Suite) -> Result<(), XtaskError> {
    match suite {
        Suite::Perf(a) if !a.synthetic.is_empty() => synthetic::run(a),
        Suite::Perf(a) => perf::run(a),
        Suite::Kl(a) => kl::run(a),
        Suite::Latency(a) => latency::run(a),
        Suite::Convoy(a) => convoy::run(a),
        Suite::Soak(a) => soak::run(a),
        Suite::Spec(a) => spec::run(a),
        Suite::Cluster(a) => cluster::run(a),
    }
}
