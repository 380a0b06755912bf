//! `kiln bench`: prompt-processing and generation throughput, measured and printed the way
//! llama.cpp's `llama-bench` does, so the two tools' outputs can be compared by script.
//!
//! For each model and thread count, a `ppN` test evaluates `N` tokens (the BOS token if the
//! vocabulary adds one, then pseudo-random ids) in batches of `--ubatch` into an empty
//! context and keeps the last token's logits; a `tgN` test evaluates one token, then `N - 1`
//! more one at a time (BOS first, as llama-bench does). Each test runs once to warm up, then
//! `-r` times; a sample is tokens / seconds of one repetition, reported as mean ± sample
//! standard deviation. With `-d N` (llama-bench's `n_depth`) each test runs after `N`
//! context tokens already in the cache (evaluated once, untimed, and kept across the
//! repetitions): `tg128 @ d4096` is decoding at position 4096. `-o json` prints a list of objects with llama-bench's field names
//! (`model_filename`, `n_prompt`, `n_gen`, `n_threads`, `avg_ts`, `stddev_ts`,
//! `samples_ts`, …).
//!
//! With `--spec ngram` (or `--spec draft --draft-model M`), a `tgN` test is real greedy
//! generation with speculative decoding instead: a text prompt (`--spec-prompt`, by default
//! one asking to repeat a piece of code, where n-gram drafts pay) is evaluated untimed, then
//! `N` tokens are generated and timed; the row also reports the drafted and accepted
//! tokens, the acceptance rate and the mean accepted length (JSON: `spec_type`,
//! `n_drafted`, `n_accepted`, `acceptance_rate`, `mean_accepted_length`). Run the same
//! test without `--spec` and with `--spec-prompt` for the plain figure to compare.

use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

use clap::{Args, ValueEnum};
use kiln_bench::stats;
use kiln_format::GgufFile;
use kiln_model::{Logits, Model, Session};
use kiln_tokenizer::Tokenizer;
use serde::Serialize;

use crate::error::CliError;

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// GGUF paths or known model names; repeat the flag or separate with commas.
    #[arg(long, short = 'm', value_delimiter = ',', default_value = kiln_hub::DEFAULT_MODEL)]
    model: Vec<String>,
    /// Prompt lengths to test (ppN); 0 disables.
    #[arg(
        long = "n-prompt",
        short = 'p',
        value_delimiter = ',',
        default_value = "512"
    )]
    n_prompt: Vec<usize>,
    /// Generation lengths to test (tgN); 0 disables.
    #[arg(
        long = "n-gen",
        short = 'n',
        value_delimiter = ',',
        default_value = "128"
    )]
    n_gen: Vec<usize>,
    /// Context depths to run each test at (tokens already in the cache; llama-bench's -d).
    #[arg(
        long = "n-depth",
        short = 'd',
        value_delimiter = ',',
        default_value = "0"
    )]
    n_depth: Vec<usize>,
    /// Thread counts to test.
    #[arg(long, short = 't', value_delimiter = ',')]
    threads: Vec<usize>,
    /// Repetitions of each test.
    #[arg(long = "repetitions", short = 'r', default_value_t = 5)]
    reps: usize,
    /// Tokens evaluated per forward call in ppN tests (llama-bench's n_ubatch).
    #[arg(long = "ubatch-size", short = 'u', default_value_t = 512)]
    ubatch: usize,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value_t = Format::Md)]
    output: Format,
    /// Skip the warm-up run of each test.
    #[arg(long)]
    no_warmup: bool,
    /// Speculative decoding for tgN tests (real greedy generation after `--spec-prompt`).
    #[command(flatten)]
    spec: crate::args::spec::SpecArgs,
    /// The prompt of tgN tests with `--spec`, or, without it, a prompt to run tgN as real
    /// greedy generation after (for the plain figure to compare with).
    #[arg(long)]
    spec_prompt: Option<String>,
}

/// The default `--spec-prompt`: a piece of code to repeat, where n-gram drafts pay.
const SPEC_PROMPT: &str = "Repeat the following code exactly.\n\n\
fn parse_line(line: &str) -> Option<(String, i64)> {\n\
    let mut parts = line.split('=');\n\
    let key = parts.next()?.trim().to_string();\n\
    let value = parts.next()?.trim().parse::<i64>().ok()?;\n\
    Some((key, value))\n\
}\n\n\
fn parse_all(text: &str) -> Vec<(String, i64)> {\n\
    text.lines().filter_map(parse_line).collect()\n\
}\n\n\
The same code, repeated exactly:\n\n";

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Format {
    Md,
    Json,
    Jsonl,
}

/// One result row, with llama-bench's JSON field names.
#[derive(Serialize)]
struct Row {
    build_commit: String,
    build_number: u32,
    cpu_info: String,
    gpu_info: String,
    backends: String,
    isa: String,
    model_filename: String,
    model_type: String,
    model_size: u64,
    model_n_params: u64,
    n_batch: usize,
    n_ubatch: usize,
    n_threads: usize,
    type_k: String,
    type_v: String,
    n_prompt: usize,
    n_gen: usize,
    n_depth: usize,
    test_time: String,
    avg_ns: u64,
    stddev_ns: u64,
    avg_ts: f64,
    stddev_ts: f64,
    samples_ns: Vec<u64>,
    samples_ts: Vec<f64>,
    /// Speculative decoding of a tgN test (`ngram` or `draft`), summed over repetitions.
    #[serde(skip_serializing_if = "Option::is_none")]
    spec_type: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    n_drafted: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    n_accepted: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    acceptance_rate: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mean_accepted_length: Option<f64>,
}

/// A loaded model and what the report says about it.
struct Loaded {
    path: String,
    model: Arc<Model>,
    model_type: String,
    bos: Option<u32>,
    vocab: usize,
    /// The model with its tokenizer (for tests on text, `--spec-prompt`).
    target: crate::args::model::Loaded,
}

pub fn run(args: BenchArgs) -> Result<(), CliError> {
    if args.reps == 0 {
        return Err(CliError::Usage("-r must be at least 1".into()));
    }
    if args.ubatch == 0 {
        return Err(CliError::Usage("--ubatch-size must be at least 1".into()));
    }
    let text_tg = args.spec.config()?.is_some() || args.spec_prompt.is_some();
    if text_tg && args.n_depth.iter().any(|&d| d > 0) {
        return Err(CliError::Usage(
            "--spec and --spec-prompt run tgN at depth 0 (after the prompt): drop -d".into(),
        ));
    }
    let threads = if args.threads.is_empty() {
        vec![crate::threads::available()]
    } else {
        args.threads.clone()
    };
    if threads.contains(&0) {
        return Err(CliError::Usage("thread counts must be at least 1".into()));
    }
    let isa = kiln_quant::try_active_isa()
        .map_err(|e| CliError::Usage(e.to_string()))?
        .to_string();
    // Tests in llama-bench's order: every prompt length, then every generation length,
    // each at every depth.
    let tests: Vec<(usize, usize, usize)> = args
        .n_prompt
        .iter()
        .filter(|&&p| p > 0)
        .map(|&p| (p, 0))
        .chain(args.n_gen.iter().filter(|&&g| g > 0).map(|&g| (0, g)))
        .flat_map(|(p, g)| args.n_depth.iter().map(move |&d| (p, g, d)))
        .collect();

    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut rows = Vec::new();
    if args.output == Format::Md {
        writeln!(
            out,
            "| model                          |       size |     params | backend    | threads |            test |                  t/s |"
        )?;
        writeln!(
            out,
            "| ------------------------------ | ---------: | ---------: | ---------- | ------: | --------------: | -------------------: |"
        )?;
    }
    for reference in &args.model {
        let loaded = load(reference)?;
        for &t in &threads {
            let pool = crate::threads::pool(t)?;
            for &(n_prompt, n_gen, n_depth) in &tests {
                let test = Test {
                    n_prompt,
                    n_gen,
                    n_depth,
                };
                let row = pool.install(|| measure(&loaded, &args, t, test, &isa))?;
                match args.output {
                    Format::Md => print_md(&mut out, &loaded, &row)?,
                    Format::Jsonl => {
                        serde_json::to_writer(&mut out, &row).map_err(std::io::Error::other)?;
                        writeln!(out)?;
                    }
                    Format::Json => {}
                }
                out.flush()?;
                rows.push(row);
            }
        }
    }
    if args.output == Format::Json {
        serde_json::to_writer_pretty(&mut out, &rows).map_err(std::io::Error::other)?;
        writeln!(out)?;
    }
    Ok(())
}

fn load(reference: &str) -> Result<Loaded, CliError> {
    let path = kiln_hub::resolve(reference)?;
    let file = Arc::new(GgufFile::open(&path)?);
    let tokenizer = Tokenizer::from_gguf(file.metadata())?;
    let model = Arc::new(Model::from_gguf(Arc::clone(&file))?);
    let md = file.metadata();
    let arch = file.architecture().unwrap_or("?").to_string();
    let size_label = md.opt_str("general.size_label").ok().flatten();
    let params = n_params(&file);
    let size = size_label.map_or_else(|| params_label(params), str::to_string);
    let ftype = md
        .opt_u32("general.file_type")
        .ok()
        .flatten()
        .map_or("?".to_string(), ftype_name);
    Ok(Loaded {
        path: path.display().to_string(),
        model: Arc::clone(&model),
        model_type: format!("{arch} {size} {ftype}"),
        bos: tokenizer.add_bos().then(|| tokenizer.bos()).flatten(),
        vocab: tokenizer.vocab_size(),
        target: crate::args::model::Loaded { model, tokenizer },
    })
}

fn n_params(file: &GgufFile) -> u64 {
    file.tensors()
        .iter()
        .map(|t| t.dims.iter().product::<u64>())
        .sum()
}

/// `135M`, `1.5B`: llama.cpp's size label when the file has none.
fn params_label(n: u64) -> String {
    if n >= 1_000_000_000 {
        format!("{:.1}B", n as f64 / 1e9)
    } else {
        format!("{}M", (n as f64 / 1e6).round())
    }
}

/// llama.cpp's names for `general.file_type` (`llama_model_ftype_name`).
fn ftype_name(ft: u32) -> String {
    let name = match ft & !1024 {
        0 => "all F32",
        1 => "F16",
        2 => "Q4_0",
        3 => "Q4_1",
        7 => "Q8_0",
        8 => "Q5_0",
        9 => "Q5_1",
        10 => "Q2_K - Medium",
        11 => "Q3_K - Small",
        12 => "Q3_K - Medium",
        13 => "Q3_K - Large",
        14 => "Q4_K - Small",
        15 => "Q4_K - Medium",
        16 => "Q5_K - Small",
        17 => "Q5_K - Medium",
        18 => "Q6_K",
        21 => "Q2_K - Small",
        25 => "IQ4_NL - 4.5 bpw",
        30 => "IQ4_XS - 4.25 bpw",
        32 => "BF16",
        other => return format!("ftype {other}"),
    };
    if ft & 1024 != 0 {
        format!("{name} (guessed)")
    } else {
        name.to_string()
    }
}

/// Pseudo-random token ids (SplitMix64): the values do not matter for speed.
struct Tokens(u64);

impl Tokens {
    fn next(&mut self, vocab: usize) -> u32 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) % vocab.max(1) as u64) as u32
    }
}

/// One test: `n_prompt` tokens in one context (ppN) or `n_gen` one at a time (tgN), after
/// `n_depth` tokens already in the cache.
#[derive(Clone, Copy, Debug)]
struct Test {
    n_prompt: usize,
    n_gen: usize,
    n_depth: usize,
}

/// One test: the depth evaluated once, a warm-up, then `reps` timed runs, each from the
/// depth on (the context beyond it forgotten before each).
fn measure(
    m: &Loaded,
    args: &BenchArgs,
    threads: usize,
    test: Test,
    isa: &str,
) -> Result<Row, CliError> {
    let Test {
        n_prompt,
        n_gen,
        n_depth,
    } = test;
    if n_gen > 0 && (args.spec.spec.is_some() || args.spec_prompt.is_some()) {
        return measure_text_tg(m, args, threads, n_gen, isa);
    }
    let n_ctx = n_depth + n_prompt + n_gen;
    let mut session = Session::new(Arc::clone(&m.model), n_ctx, args.ubatch);
    let mut rng = Tokens(0x6b696c6e);
    let bos_at = |i: usize| if i == 0 { m.bos } else { None };
    if n_depth > 0 {
        let context: Vec<u32> = (0..n_depth)
            .map(|i| bos_at(i).unwrap_or_else(|| rng.next(m.vocab)))
            .collect();
        session.forward(&context, Logits::Last)?;
    }
    let mut prompt = vec![0u32; n_prompt];
    let mut run = |session: &mut Session, n_prompt: usize, n_gen: usize| -> Result<(), CliError> {
        session.truncate(n_depth);
        if n_prompt > 0 {
            for (i, t) in prompt[..n_prompt].iter_mut().enumerate() {
                *t = bos_at(n_depth + i).unwrap_or_else(|| rng.next(m.vocab));
            }
            session.forward(&prompt[..n_prompt], Logits::Last)?;
        }
        let mut token = bos_at(n_depth).unwrap_or_else(|| rng.next(m.vocab));
        for _ in 0..n_gen {
            session.forward(&[token], Logits::Last)?;
            token = rng.next(m.vocab);
        }
        Ok(())
    };
    if !args.no_warmup {
        run(&mut session, n_prompt.min(args.ubatch), n_gen.min(1))?;
    }
    let mut samples_ns = Vec::with_capacity(args.reps);
    for _ in 0..args.reps {
        let t0 = Instant::now();
        run(&mut session, n_prompt, n_gen)?;
        samples_ns.push(t0.elapsed().as_nanos() as u64);
    }
    Ok(row(m, args, threads, test, isa, samples_ns, None))
}

/// A tgN test as real greedy generation after a text prompt (evaluated untimed), with
/// speculative decoding when `--spec` is given: the emitted tokens per second and, with
/// `--spec`, the speculation's counters over every repetition.
fn measure_text_tg(
    m: &Loaded,
    args: &BenchArgs,
    threads: usize,
    n_gen: usize,
    isa: &str,
) -> Result<Row, CliError> {
    let text = args.spec_prompt.as_deref().unwrap_or(SPEC_PROMPT);
    let prompt = m.target.tokenizer.encode(text, true, false)?;
    if prompt.is_empty() {
        return Err(CliError::Usage(
            "--spec-prompt is empty after tokenization".into(),
        ));
    }
    let cfg = args.spec.config()?;
    let draft_max = cfg.as_ref().map_or(0, |c| c.draft_max);
    let n_ctx = prompt.len() + n_gen + draft_max + 1;
    let mut totals = kiln_spec::SpecStats::default();
    // The target's pass-cost curve, measured in the first run (untimed) and shared.
    let mut cost: Option<Arc<kiln_spec::PassCost>> = None;
    let mut run = |timed: bool| -> Result<Option<u64>, CliError> {
        let mut session = Session::new(Arc::clone(&m.model), n_ctx, args.ubatch.max(draft_max + 1));
        let mut sampler = kiln_sample::Sampler::new(kiln_sample::SamplerConfig::greedy());
        let mut spec = args.spec.decoder(&m.target, n_ctx, 0)?;
        let mut history = prompt.clone();
        // The session holds all but the last prompt token; the first timed pass
        // evaluates it (as a decode step does).
        if prompt.len() > 1 {
            session.forward(&prompt[..prompt.len() - 1], Logits::Last)?;
        }
        if let Some(d) = spec.as_mut() {
            match &cost {
                Some(c) => d.set_pass_cost(Arc::clone(c)),
                None => cost = d.calibrate(&mut session, prompt[prompt.len() - 1], &sampler)?,
            }
        }
        let n_gen = if timed { n_gen } else { n_gen.min(2) };
        let mut step = Vec::with_capacity(kiln_spec::SpecConfig::DRAFT_MAX_LIMIT + 1);
        let t0 = Instant::now();
        let mut generated = 0;
        while generated < n_gen {
            match spec.as_mut() {
                Some(d) => {
                    d.step(
                        &mut session,
                        &mut sampler,
                        &history,
                        n_gen - generated,
                        &|_| false,
                        &mut step,
                    )?;
                }
                None => {
                    let pending = history[history.len() - 1];
                    let logits = session.forward(&[pending], Logits::Last)?;
                    step.clear();
                    step.push(sampler.try_sample(logits)?);
                }
            }
            generated += step.len();
            history.extend_from_slice(&step);
        }
        let ns = t0.elapsed().as_nanos() as u64;
        if timed && let Some(d) = &spec {
            totals.add(&d.stats());
        }
        Ok(timed.then_some(ns))
    };
    if !args.no_warmup {
        run(false)?;
    }
    let mut samples_ns = Vec::with_capacity(args.reps);
    for _ in 0..args.reps {
        samples_ns.extend(run(true)?);
    }
    let test = Test {
        n_prompt: 0,
        n_gen,
        n_depth: 0,
    };
    let spec = cfg.map(|c| (c.method.as_str(), totals));
    Ok(row(m, args, threads, test, isa, samples_ns, spec))
}

/// A result row from a test's timed repetitions (`samples_ns`), with the speculation's
/// method and counters when it speculated.
fn row(
    m: &Loaded,
    args: &BenchArgs,
    threads: usize,
    test: Test,
    isa: &str,
    samples_ns: Vec<u64>,
    spec: Option<(&'static str, kiln_spec::SpecStats)>,
) -> Row {
    let Test {
        n_prompt,
        n_gen,
        n_depth,
    } = test;
    let n_tokens = (n_prompt + n_gen) as f64;
    let samples_ts: Vec<f64> = samples_ns
        .iter()
        .map(|&ns| n_tokens * 1e9 / ns.max(1) as f64)
        .collect();
    let ns_f: Vec<f64> = samples_ns.iter().map(|&v| v as f64).collect();
    Row {
        build_commit: format!("kiln-{}", env!("CARGO_PKG_VERSION")),
        build_number: 0,
        cpu_info: cpu_name(),
        gpu_info: String::new(),
        backends: "CPU".into(),
        isa: isa.to_string(),
        model_filename: m.path.clone(),
        model_type: m.model_type.clone(),
        model_size: m.model.weight_bytes(),
        model_n_params: m.model.gguf().map_or(0, n_params),
        n_batch: args.ubatch,
        n_ubatch: args.ubatch,
        n_threads: threads,
        type_k: "f16".into(),
        type_v: "f16".into(),
        n_prompt,
        n_gen,
        n_depth,
        test_time: iso8601_utc(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        ),
        avg_ns: mean(&ns_f) as u64,
        stddev_ns: stats::std_dev(&ns_f) as u64,
        avg_ts: mean(&samples_ts),
        stddev_ts: stats::std_dev(&samples_ts),
        samples_ns,
        samples_ts,
        spec_type: spec.map(|s| s.0),
        n_drafted: spec.map(|s| s.1.drafted),
        n_accepted: spec.map(|s| s.1.accepted),
        acceptance_rate: spec.map(|s| s.1.acceptance_rate()),
        mean_accepted_length: spec.map(|s| s.1.mean_accepted_length()),
    }
}

/// The mean of at least one repetition's figures (`-r` is at least 1).
fn mean(v: &[f64]) -> f64 {
    stats::mean(v).unwrap_or(0.0)
}

/// `2026-11-21T23:30:05Z`, llama-bench's `test_time` format, from Unix seconds.
fn iso8601_utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (proleptic Gregorian; Howard Hinnant's method).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3_600,
        rem % 3_600 / 60,
        rem % 60
    )
}

fn cpu_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|v| v.trim().to_string())
        })
        .unwrap_or_default()
}

fn print_md(out: &mut impl Write, m: &Loaded, r: &Row) -> std::io::Result<()> {
    let mut test = if r.n_gen == 0 {
        format!("pp{}", r.n_prompt)
    } else {
        format!("tg{}", r.n_gen)
    };
    if r.n_depth > 0 {
        test.push_str(&format!(" @ d{}", r.n_depth));
    }
    if let (Some(t), Some(a)) = (r.spec_type, r.acceptance_rate) {
        test.push_str(&format!(" {t} {:.0}%", a * 100.0));
    }
    let name: String = m.model_type.chars().take(30).collect();
    writeln!(
        out,
        "| {:<30} | {:>10} | {:>10} | {:<10} | {:>7} | {:>15} | {:>20} |",
        name,
        format!("{:.2} MiB", r.model_size as f64 / (1024.0 * 1024.0)),
        format!("{:.2} M", r.model_n_params as f64 / 1e6),
        "CPU",
        r.n_threads,
        test,
        format!("{:.2} ± {:.2}", r.avg_ts, r.stddev_ts),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stddev_is_the_sample_deviation_like_llama_bench() {
        assert_eq!(stats::std_dev(&[1.0]), 0.0);
        assert!((stats::std_dev(&[1.0, 3.0]) - std::f64::consts::SQRT_2).abs() < 1e-12);
        assert_eq!(mean(&[1.0, 3.0]), 2.0);
    }

    #[test]
    fn test_time_is_iso_8601_utc_like_llama_bench() {
        assert_eq!(iso8601_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(iso8601_utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(iso8601_utc(1_795_304_892), "2026-11-21T23:48:12Z");
    }

    #[test]
    fn file_types_use_llama_cpp_names() {
        assert_eq!(ftype_name(3), "Q4_1");
        assert_eq!(ftype_name(15), "Q4_K - Medium");
        assert_eq!(ftype_name(15 | 1024), "Q4_K - Medium (guessed)");
        assert_eq!(params_label(134_515_008), "135M");
    }
}
