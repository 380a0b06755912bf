//! `cargo xtask bench spec`: speculative decoding on three workloads — (a) code editing
//! (return a given ~150-line source file with one rename), (b) summarising a given
//! passage, (c) open chat — greedy, tokens/s with and without speculation and the
//! acceptance figures, through `kiln generate --json`. Each speculative output is checked
//! byte-identical to the plain one. With `--draft-target` the draft-model pair runs too
//! (that target, drafted for by `--model`); with `--llama-cpp DIR` or `--llama-lookup
//! PATH`, llama.cpp's `llama-lookup` (and `llama-speculative`, with a draft target) run on
//! the same chat-templated prompts in the same run, each beside a plain `llama-completion`
//! run of the same prompt and length, so its own speed-up is in the table too.

use std::path::{Path, PathBuf};

use kiln_bench::Machine;
use kiln_bench::report::markdown_table;
use serde::{Deserialize, Serialize};

use crate::XtaskError;
use crate::bench::common::{
    Kiln, bad, build_kiln, failed, fixture_text, out_dir, positive, report_header, workspace_root,
    write,
};

#[derive(clap::Args, Debug)]
pub struct SpecArgs {
    /// The model (n-gram rows), and the draft model of the draft rows.
    #[arg(long, short = 'm', default_value = "qwen2.5-coder-0.5b")]
    model: String,
    /// A target for the draft-model rows sharing --model's vocabulary (e.g. an F16 copy of
    /// it made with `kiln quantize -t f16`).
    #[arg(long)]
    draft_target: Option<PathBuf>,
    /// Threads.
    #[arg(long, short = 't', default_value_t = 2, value_parser = positive)]
    threads: usize,
    /// Tokens generated per run.
    #[arg(short = 'n', default_value_t = 128, value_parser = positive)]
    n_gen: usize,
    /// Most tokens drafted per step.
    #[arg(long, default_value_t = 16, value_parser = positive)]
    draft_max: usize,
    /// A llama.cpp build directory holding `llama-lookup`, `llama-completion` and (for the
    /// draft rows) `llama-speculative` (its `bin/` or the directory itself).
    #[arg(long)]
    llama_cpp: Option<PathBuf>,
    /// llama.cpp's `llama-lookup` binary (its plain figure comes from the
    /// `llama-completion` beside it); instead of, or overriding the one in, --llama-cpp.
    #[arg(long)]
    llama_lookup: Option<PathBuf>,
    /// Runs of each kiln configuration, plain and speculative alternating (the machine may
    /// be shared: alternating spreads its load over both); tokens/s is their mean.
    #[arg(long, short = 'r', default_value_t = 1, value_parser = positive)]
    repetitions: usize,
    /// Only the workloads whose name contains this (e.g. `code`, `chat`).
    #[arg(long)]
    workload: Option<String>,
}

/// The source file of the code-editing workload, and the rename asked for.
const CODE_FILE: &str = "crates/kiln-sample/src/stop.rs";
const CODE_LINES: usize = 150;

struct Workload {
    name: &'static str,
    prompt: String,
}

fn workloads() -> Result<Vec<Workload>, XtaskError> {
    let read = |p: &Path| {
        std::fs::read_to_string(p)
            .map_err(|e| failed("workload", format!("cannot read {}: {e}", p.display())))
    };
    let code: String = read(&workspace_root().join(CODE_FILE))?
        .lines()
        .take(CODE_LINES)
        .map(|l| format!("{l}\n"))
        .collect();
    let passage: String = read(&fixture_text())?.chars().take(2400).collect();
    Ok(vec![
        Workload {
            name: "code edit",
            prompt: format!(
                "Here is a Rust source file. Return the whole file unchanged except that the \
                 type `StopStrings` is renamed to `StopSet` everywhere. Output only the code.\
                 \n\n```rust\n{code}```\n"
            ),
        },
        Workload {
            name: "summary",
            prompt: format!(
                "Summarise the following passage in a few sentences, quoting its key \
                 phrases.\n\n{passage}\n"
            ),
        },
        Workload {
            name: "open chat",
            prompt: "Write a short friendly paragraph about why people enjoy walking in the \
                     mountains, then give three tips for a first hike."
                .to_string(),
        },
    ])
}

#[derive(Deserialize)]
struct GenJson {
    text: String,
    timings: GenTimings,
}

#[derive(Deserialize)]
struct GenTimings {
    predicted_n: usize,
    predicted_per_second: f64,
    #[serde(default)]
    speculative: Option<SpecJson>,
}

#[derive(Deserialize, Serialize, Clone)]
struct SpecJson {
    drafted: u64,
    accepted: u64,
    acceptance_rate: f64,
    mean_accepted_length: f64,
    passes: u64,
    #[serde(default)]
    draft_ms: f64,
    #[serde(default)]
    verify_ms: f64,
    #[serde(default)]
    sample_ms: f64,
    #[serde(default)]
    rollback_ms: f64,
    /// The passes in decode steps by the measured pass-cost curve (0 without one).
    #[serde(default)]
    pass_steps: f64,
    #[serde(default)]
    calibrate_ms: f64,
}

#[derive(Serialize)]
struct Row {
    workload: &'static str,
    engine: String,
    target: String,
    method: String,
    tokens: usize,
    tokens_per_second: f64,
    speedup: f64,
    identical: Option<bool>,
    spec: Option<SpecJson>,
    /// Milliseconds per token of the plain run this row compares with.
    base_ms_per_token: f64,
}

pub fn run(a: &SpecArgs) -> Result<(), XtaskError> {
    let kiln = build_kiln()?;
    if !kiln.supports("generate", &["--spec", "--draft-model", "--draft-max"]) {
        return Err(bad("this kiln binary has no --spec"));
    }
    let out = out_dir("spec")?;
    let machine = Machine::detect();
    let mut rows = Vec::new();
    let chosen = workloads()?.into_iter().filter(|w| {
        a.workload
            .as_ref()
            .is_none_or(|f| w.name.contains(f.as_str()))
    });
    for w in chosen {
        let prompt_file = out.join(format!("{}.prompt.txt", w.name.replace(' ', "-")));
        write(&prompt_file, &w.prompt)?;
        let dm = a.draft_max.to_string();
        let (mut plains, mut ngrams) = (Vec::new(), Vec::new());
        for _ in 0..a.repetitions {
            plains.push(generate(&kiln, a, &a.model, &w.prompt, &[])?);
            ngrams.push(generate(
                &kiln,
                a,
                &a.model,
                &w.prompt,
                &["--spec", "ngram", "--draft-max", &dm],
            )?);
        }
        let same = ngrams.iter().all(|g| g.text == plains[0].text)
            && plains.iter().all(|g| g.text == plains[0].text);
        let (plain, ngram) = (mean_speed(plains)?, mean_speed(ngrams)?);
        let base = plain.timings.predicted_per_second;
        rows.push(row(&w, "kiln", &a.model, "off", &plain, base, None));
        rows.push(row(&w, "kiln", &a.model, "ngram", &ngram, base, Some(same)));
        if let Some(t) = &a.draft_target {
            let t = t.display().to_string();
            let plain_t = generate(&kiln, a, &t, &w.prompt, &[])?;
            let base_t = plain_t.timings.predicted_per_second;
            rows.push(row(&w, "kiln", &t, "off", &plain_t, base_t, None));
            let args = [
                "--spec",
                "draft",
                "--draft-model",
                a.model.as_str(),
                "--draft-max",
                &dm,
            ];
            let draft = generate(&kiln, a, &t, &w.prompt, &args)?;
            let same = draft.text == plain_t.text;
            rows.push(row(&w, "kiln", &t, "draft", &draft, base_t, Some(same)));
        }
        if a.llama_cpp.is_some() || a.llama_lookup.is_some() {
            // llama.cpp's tools take the prompt as text: the same chat template, rendered.
            let chat_file = out.join(format!("{}.chat-prompt.txt", w.name.replace(' ', "-")));
            let args: Vec<String> = [
                "generate",
                "--chat",
                "--print-prompt",
                "-m",
                a.model.as_str(),
            ]
            .iter()
            .map(|s| s.to_string())
            .chain(["-p".to_string(), w.prompt.clone()])
            .collect();
            let rendered = kiln.run("chat template", &args)?;
            write(&chat_file, &rendered.stdout)?;
            rows.extend(llama_cpp_rows(a, &w, &chat_file)?);
        }
    }
    let json = serde_json::to_string_pretty(&rows)
        .map_err(|e| failed("output", format!("cannot encode the report: {e}")))?;
    write(&out.join("spec.json"), json)?;
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let s = r.spec.as_ref();
            vec![
                r.workload.to_string(),
                r.engine.clone(),
                r.target.clone(),
                r.method.clone(),
                r.tokens.to_string(),
                format!("{:.2}", r.tokens_per_second),
                format!("{:.2}×", r.speedup),
                s.map_or("–".into(), |s| format!("{}/{}", s.accepted, s.drafted)),
                s.map_or("–".into(), |s| {
                    format!("{:.1}%", 100.0 * s.acceptance_rate)
                }),
                s.map_or("–".into(), |s| format!("{:.2}", s.mean_accepted_length)),
                r.identical
                    .map_or("–".into(), |b| if b { "yes" } else { "NO" }.into()),
            ]
        })
        .collect();
    let md = format!(
        "# kiln bench spec\n\n{}- {} threads, greedy, {} tokens, draft max {}, {} run(s) \
         each\n- load average at the end: {}\n\n{}",
        report_header(&machine),
        a.threads,
        a.n_gen,
        a.draft_max,
        a.repetitions,
        std::fs::read_to_string("/proc/loadavg")
            .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
            .unwrap_or_else(|_| "unknown".into()),
        markdown_table(
            &[
                "workload",
                "engine",
                "target",
                "spec",
                "tokens",
                "tokens/s",
                "speed-up",
                "accepted/drafted",
                "acceptance",
                "mean accepted length",
                "identical",
            ],
            &table
        )
    );
    let phases: Vec<Vec<String>> = rows
        .iter()
        .filter_map(|r| Some((r, r.spec.as_ref()?)))
        .map(|(r, s)| {
            let per_pass = s.verify_ms / s.passes.max(1) as f64;
            // The plain run's steps after the prompt's pass (which both runs share), over
            // what the speculative steps cost by the curve.
            let by_count = if s.pass_steps > 0.0 {
                format!("{:.2}×", r.tokens.saturating_sub(1) as f64 / s.pass_steps)
            } else {
                "–".into()
            };
            vec![
                r.workload.to_string(),
                r.target.clone(),
                r.method.clone(),
                s.passes.to_string(),
                format!("{:.0}", s.draft_ms),
                format!("{:.0}", s.verify_ms),
                format!("{:.0}", s.sample_ms),
                format!("{:.1}", s.rollback_ms),
                format!("{per_pass:.1}"),
                format!("{:.1}", r.base_ms_per_token),
                format!("{:.2}", per_pass / r.base_ms_per_token.max(1e-9)),
                format!("{:.1}", s.pass_steps),
                by_count,
                format!("{:.0}", s.calibrate_ms),
            ]
        })
        .collect();
    let md = format!(
        "{md}
## Where the speculative time went

Milliseconds over the whole generation. `pass / step` is a scoring pass's mean time over
the plain run's time per token: what verifying a draft costs in decode steps (a same-run
ratio, less sensitive to machine load than tokens/s). `curve steps` is what the passes
cost by the pass-cost curve measured before generating (`calibrate ms`, not part of the
generation's time), and `speed-up by pass count` the plain run's steps over it: a figure
of counted passes, independent of how the load changed during the runs.

{}",
        markdown_table(
            &[
                "workload",
                "target",
                "spec",
                "passes",
                "draft ms",
                "verify ms",
                "sample ms",
                "rollback ms",
                "ms / pass",
                "plain ms / token",
                "pass / step",
                "curve steps",
                "speed-up by pass count",
                "calibrate ms",
            ],
            &phases
        )
    );
    write(&out.join("spec.md"), &md)?;
    println!("{md}");
    if rows.iter().any(|r| r.identical == Some(false)) {
        return Err(failed(
            "spec",
            "a speculative output differs from the plain one (see spec.md)",
        ));
    }
    Ok(())
}

/// The first run, with tokens/s the mean over all runs.
fn mean_speed(runs: Vec<GenJson>) -> Result<GenJson, XtaskError> {
    let n = runs.len() as f64;
    let mean = runs
        .iter()
        .map(|g| g.timings.predicted_per_second)
        .sum::<f64>()
        / n.max(1.0);
    let mut first = runs
        .into_iter()
        .next()
        .ok_or_else(|| failed("spec", "no run"))?;
    first.timings.predicted_per_second = mean;
    Ok(first)
}

fn row(
    w: &Workload,
    engine: &str,
    target: &str,
    method: &str,
    g: &GenJson,
    base: f64,
    identical: Option<bool>,
) -> Row {
    Row {
        workload: w.name,
        engine: engine.to_string(),
        target: target.to_string(),
        method: method.to_string(),
        tokens: g.timings.predicted_n,
        tokens_per_second: g.timings.predicted_per_second,
        speedup: g.timings.predicted_per_second / base.max(1e-9),
        identical,
        spec: g.timings.speculative.clone(),
        base_ms_per_token: 1e3 / base.max(1e-9),
    }
}

fn generate(
    kiln: &Kiln,
    a: &SpecArgs,
    model: &str,
    prompt: &str,
    extra: &[&str],
) -> Result<GenJson, XtaskError> {
    let mut args: Vec<String> = [
        "generate",
        "--json",
        "--chat",
        "--temperature",
        "0",
        "-m",
        model,
        "-n",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.push(a.n_gen.to_string());
    args.push("-t".into());
    args.push(a.threads.to_string());
    args.extend(extra.iter().map(|s| s.to_string()));
    args.push("-p".into());
    args.push(prompt.to_string());
    kiln.json("generate", &args)
}

/// llama.cpp's own speculative tools on the same chat-templated prompt, each beside a plain
/// `llama-completion` run of the same prompt and length (the baseline of its speed-up):
/// `llama-lookup` (n-gram) on the model and, with a draft target, `llama-speculative`.
/// The decode speeds are the tools' own "speed: X t/s" / "eval time" figures.
fn llama_cpp_rows(a: &SpecArgs, w: &Workload, prompt_file: &Path) -> Result<Vec<Row>, XtaskError> {
    let bin = |name: &str| -> Result<PathBuf, XtaskError> {
        let mut dirs: Vec<PathBuf> = Vec::new();
        if let Some(p) = a.llama_lookup.as_ref().and_then(|p| p.parent()) {
            dirs.push(p.to_path_buf());
        }
        if let Some(d) = &a.llama_cpp {
            dirs.extend([d.clone(), d.join("bin")]);
        }
        if name == "llama-lookup"
            && let Some(p) = &a.llama_lookup
        {
            return if p.is_file() {
                Ok(p.clone())
            } else {
                Err(bad(format!("no llama-lookup at {}", p.display())))
            };
        }
        dirs.iter()
            .map(|d| d.join(name))
            .find(|p| p.is_file())
            .ok_or_else(|| {
                bad(format!(
                    "no {name} beside llama-lookup or under --llama-cpp"
                ))
            })
    };
    let model = kiln_hub::resolve(&a.model)
        .map_err(|e| failed("llama.cpp", format!("{}: {e}", a.model)))?;
    let common = |m: &Path| -> Vec<String> {
        vec![
            "-m".to_string(),
            m.display().to_string(),
            "-f".to_string(),
            prompt_file.display().to_string(),
            "-n".to_string(),
            a.n_gen.to_string(),
            "-t".to_string(),
            a.threads.to_string(),
            "--temp".to_string(),
            "0".to_string(),
        ]
    };
    let draft = ["--spec-draft-n-max".to_string(), a.draft_max.to_string()];
    let mut pairs = vec![(model.clone(), "llama-lookup", {
        let mut v = common(&model);
        v.extend(draft.clone());
        v
    })];
    if let Some(t) = &a.draft_target
        && bin("llama-speculative").is_ok()
    {
        let mut v = common(t);
        v.extend(draft.clone());
        v.extend(["-md".into(), model.display().to_string()]);
        pairs.push((t.clone(), "llama-speculative", v));
    }
    let mut rows = Vec::new();
    for (target, tool, args) in pairs {
        let mut plain_args = common(&target);
        plain_args.extend(["-no-cnv".into(), "--no-display-prompt".into()]);
        let plain = llama_speed(&bin("llama-completion")?, "llama-completion", &plain_args)?;
        let spec = llama_speed(&bin(tool)?, tool, &args)?;
        let target = target.display().to_string();
        for (method, speed) in [("llama-completion", plain), (tool, spec)] {
            rows.push(Row {
                workload: w.name,
                engine: "llama.cpp".into(),
                target: target.clone(),
                method: method.into(),
                tokens: a.n_gen,
                tokens_per_second: speed,
                speedup: speed / plain.max(1e-9),
                identical: None,
                spec: None,
                base_ms_per_token: 1e3 / plain.max(1e-9),
            });
        }
    }
    Ok(rows)
}

/// Runs a llama.cpp tool and returns its decode speed in tokens/s: the last "decoded N
/// tokens … speed: X t/s" line (`llama-lookup`, `llama-speculative`) or the "eval time"
/// line's tokens per second (`llama-completion`).
fn llama_speed(bin: &Path, tool: &str, args: &[String]) -> Result<f64, XtaskError> {
    let out = std::process::Command::new(bin)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| failed("llama.cpp", format!("cannot run {tool}: {e}")))?;
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let lookup = log
        .lines()
        .filter(|l| l.contains("decoded"))
        .filter_map(|l| l.split("speed:").nth(1))
        .filter_map(|s| s.split_whitespace().next()?.parse::<f64>().ok())
        .next_back();
    // "eval time = 1234.56 ms / 95 runs ( 12.99 ms per token, 76.95 tokens per second)"
    let eval = log
        .lines()
        .filter(|l| l.contains(" eval time") && !l.contains("prompt eval"))
        .filter_map(|l| l.split(',').nth(1))
        .filter_map(|s| s.split_whitespace().next()?.parse::<f64>().ok())
        .next_back();
    lookup
        .or(eval)
        .ok_or_else(|| failed("llama.cpp", format!("{tool} printed no speed:\n{log}")))
}
