//! Aggregate generation throughput at 1, 4 and 8 concurrent streams.
//!
//! `cargo run --release -p kiln-engine --example throughput -- MODEL [TOKENS] [THREADS]`
//!
//! MODEL is a kiln-hub name (`smollm2-135m`) or a GGUF path; each stream generates TOKENS
//! tokens (default 64, end-of-generation ignored) after a distinct short prompt. Prints,
//! per concurrency, the wall time from the first submission to the last token, the
//! aggregate generated tokens/s, and the mean time to first token.

use std::sync::Arc;
use std::time::Instant;

use kiln_engine::{Engine, EngineConfig, Event, Request};
use kiln_model::Model;
use kiln_tokenizer::Tokenizer;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let name = args
        .next()
        .ok_or("usage: throughput MODEL [TOKENS] [THREADS]")?;
    let tokens: usize = args.next().map_or(Ok(64), |s| s.parse())?;
    let path = kiln_hub::resolve(&name)?;
    let model = Arc::new(Model::open(&path)?);
    let md = model
        .gguf()
        .ok_or("a GGUF model is needed for its tokenizer")?;
    let tok = Arc::new(Tokenizer::from_gguf(md.metadata())?);
    let mut cfg = EngineConfig::for_model(&model);
    cfg.n_ctx = 512;
    if let Some(t) = args.next() {
        cfg.threads = t.parse()?;
    }
    let threads = cfg.threads;
    let engine = Engine::start(Arc::clone(&model), Arc::clone(&tok), cfg)?;
    let subjects = [
        "a lighthouse keeper",
        "a robot chef",
        "the last tree on Mars",
        "a lost violin",
        "a clockmaker's cat",
        "an underwater city",
        "a retired astronaut",
        "a paper boat",
    ];
    let prompt = |i: usize, round: usize| -> Result<Vec<u32>, Box<dyn std::error::Error>> {
        let text = format!(
            "Story {round}: write a short tale about {}.",
            subjects[i % 8]
        );
        Ok(tok.encode(&text, true, false)?)
    };
    // Warm-up (page in the weights).
    run(&engine, vec![prompt(0, 0)?], 8)?;
    println!(
        "model {name}, {tokens} tokens per stream, {threads} threads, load average {}",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    let mut single = 0.0;
    for (round, streams) in [1usize, 4, 8].into_iter().enumerate() {
        let prompts = (0..streams)
            .map(|i| prompt(i, round + 1))
            .collect::<Result<Vec<_>, _>>()?;
        let (secs, ttft) = run(&engine, prompts, tokens)?;
        let tps = (streams * tokens) as f64 / secs;
        if streams == 1 {
            single = tps;
        }
        println!(
            "{streams} stream(s): {secs:.2} s, {tps:.1} tokens/s aggregate ({:.2}x single), mean TTFT {:.0} ms",
            tps / single,
            ttft * 1e3
        );
    }
    let m = engine.metrics();
    println!("steps {}, preemptions {}", m.steps, m.preemptions);
    engine.shutdown(true);
    Ok(())
}

/// Runs the requests at once; returns the wall time and the mean time to first token.
fn run(
    engine: &Engine,
    prompts: Vec<Vec<u32>>,
    tokens: usize,
) -> Result<(f64, f64), Box<dyn std::error::Error>> {
    let t0 = Instant::now();
    let handles = prompts
        .into_iter()
        .map(|p| {
            let mut r = Request::greedy(p, tokens);
            r.ignore_eos = true;
            engine.submit(r)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut ttft = 0.0;
    let n = handles.len();
    for h in handles {
        while let Some(ev) = h.recv() {
            match ev {
                Event::Done { timings, .. } => ttft += timings.ttft_ms / 1e3,
                Event::Error(e) => return Err(e.into()),
                Event::Token { .. } => {}
            }
        }
    }
    Ok((t0.elapsed().as_secs_f64(), ttft / n as f64))
}
