//! `kiln generate`: tokenize a prompt as llama.cpp's `/completion` does, evaluate it as one
//! batch, then sample and stream tokens.

use std::io::{IsTerminal, Read, Write};
use std::sync::Arc;
use std::time::Instant;

use clap::Args;
use kiln_model::Logits;
use kiln_sample::{GrammarCache, Matcher, Sampler, StopReason, TokenLogprob, top_logprobs};
use kiln_spec::SpecConfig;
use kiln_tokenizer::StreamDecoder;
use serde::Serialize;

use crate::error::CliError;

#[derive(Args, Debug)]
pub struct GenerateArgs {
    #[command(flatten)]
    model: crate::args::model::ModelArgs,
    /// The prompt (or use --prompt, or pipe it on stdin).
    #[arg(conflicts_with = "prompt_flag")]
    prompt: Option<String>,
    #[arg(long = "prompt", short = 'p', id = "prompt_flag")]
    prompt_flag: Option<String>,
    /// Tokens to generate.
    #[arg(short = 'n', long = "n-predict", default_value_t = 128)]
    n_predict: usize,
    /// Worker threads (default: all available cores).
    #[arg(long, short = 't')]
    threads: Option<usize>,
    /// Context size in tokens (default: prompt + n-predict, at most the training context).
    #[arg(long, short = 'c')]
    ctx_size: Option<usize>,
    /// Print one JSON object instead of streaming text.
    #[arg(long)]
    json: bool,
    /// With --json: how many alternatives to report per token.
    #[arg(long, default_value_t = 0)]
    top_logprobs: usize,
    /// Keep generating past end-of-generation tokens.
    #[arg(long)]
    ignore_eos: bool,
    #[command(flatten)]
    kv: crate::args::kv::KvArgs,
    #[command(flatten)]
    sampling: crate::args::sampling::SamplingArgs,
    #[command(flatten)]
    chat: crate::args::chat::ChatArgs,
    #[command(flatten)]
    spec: crate::args::spec::SpecArgs,
}

#[derive(Serialize)]
struct JsonOut {
    prompt_tokens: Vec<u32>,
    tokens: Vec<JsonToken>,
    text: String,
    /// `stop` (end of generation or a stop string) or `length`.
    stop_reason: &'static str,
    timings: Timings,
}

#[derive(Serialize)]
struct JsonToken {
    id: u32,
    text: String,
    logprob: f32,
    top_logprobs: Vec<JsonAlt>,
}

#[derive(Serialize)]
struct JsonAlt {
    id: u32,
    logprob: f32,
}

#[derive(Serialize)]
struct Timings {
    load_ms: f64,
    prompt_n: usize,
    prompt_per_second: f64,
    predicted_n: usize,
    predicted_per_second: f64,
    /// Mean time to compute the grammar mask per constrained step.
    #[serde(skip_serializing_if = "Option::is_none")]
    grammar_mask_ms: Option<f64>,
    /// Speculative decoding's counters, with --spec.
    #[serde(skip_serializing_if = "Option::is_none")]
    speculative: Option<SpecOut>,
}

#[derive(Serialize)]
struct SpecOut {
    method: &'static str,
    drafted: u64,
    accepted: u64,
    acceptance_rate: f64,
    mean_accepted_length: f64,
    /// Target passes (one per emitted token without speculation).
    passes: u64,
    /// Where the generation time went, in milliseconds: drafting, the target's scoring
    /// passes, choosing tokens from their logits, cutting rejected positions.
    draft_ms: f64,
    verify_ms: f64,
    sample_ms: f64,
    rollback_ms: f64,
    /// Measuring the target's pass-cost curve before generating (greedy, adaptive only;
    /// not part of the generation time, like the prompt).
    calibrate_ms: f64,
    /// That curve: `[tokens, cost in decode steps]` per measured pass size.
    pass_cost: Vec<(usize, f64)>,
    /// The passes by that curve, in decode steps (0 without it).
    pass_steps: f64,
}

pub fn run(args: GenerateArgs) -> Result<(), CliError> {
    let prompt = match (args.prompt.clone(), args.prompt_flag.clone()) {
        (Some(p), _) | (None, Some(p)) => p,
        (None, None) => {
            let mut s = String::new();
            if std::io::stdin().is_terminal() {
                return Err(CliError::Usage(
                    "no prompt: give one as an argument, with --prompt, or on stdin".into(),
                ));
            }
            std::io::stdin().read_to_string(&mut s)?;
            s
        }
    };
    let mut stops = args.sampling.stop_strings()?;
    let grammar = args.sampling.grammar(&GrammarCache::new(1))?;
    args.kv.validate()?;
    let threads = crate::threads::count(args.threads)?;
    let pool = crate::threads::pool(threads)?;

    let t_load = Instant::now();
    let loaded = args.model.load()?;
    let spec_cfg = args.spec.config()?;
    let load_ms = t_load.elapsed().as_secs_f64() * 1e3;

    let crate::args::model::Loaded { model, tokenizer } = &loaded;
    let (model, tokenizer) = (Arc::clone(model), tokenizer);
    let Some(prompt_tokens) =
        crate::chat::prompt_tokens(&args.chat, &prompt, tokenizer, &model, &args.model)?
    else {
        return Ok(()); // --print-prompt
    };
    if prompt_tokens.is_empty() {
        return Err(CliError::Usage(
            "the prompt is empty after tokenization".into(),
        ));
    }
    let n_ctx_train = model.config().n_ctx_train;
    let n_ctx = args
        .ctx_size
        .unwrap_or((prompt_tokens.len() + args.n_predict).min(n_ctx_train));
    if prompt_tokens.len() >= n_ctx {
        return Err(CliError::Usage(format!(
            "the prompt has {} tokens, which does not fit a context of {n_ctx} with room to generate",
            prompt_tokens.len()
        )));
    }
    let n_predict = args.n_predict.min(n_ctx - prompt_tokens.len());
    let sampler_cfg = args.sampling.config(n_ctx)?;
    let vocab = kiln_engine::sampler_vocab(tokenizer);
    let mut spec = args.spec.decoder(&loaded, n_ctx, sampler_cfg.seed)?;
    if spec.is_some() && args.kv.samples > 1 {
        return Err(CliError::Usage(
            "--spec does not yet work with --samples".into(),
        ));
    }
    let matcher = match grammar {
        Some(g) => Some(Matcher::new(g, Arc::clone(&vocab))?),
        None => None,
    };

    pool.install(|| {
        let mut session = args.kv.session(&model, n_ctx, 512, prompt_tokens.len())?;
        eprintln!("{}", session.memory_plan());
        if args.kv.samples > 1 && args.sampling.controls_output() {
            return Err(CliError::Usage(
                "--stop, --json-schema and --grammar do not yet work with --samples".into(),
            ));
        }
        if args.kv.samples > 1 {
            let run = crate::samples::SampleRun {
                tokenizer,
                prompt: &prompt_tokens,
                sampler: &sampler_cfg,
                samples: args.kv.samples,
                n_predict,
                ignore_eos: args.ignore_eos,
                json: args.json,
            };
            return crate::samples::run(&mut session, &run);
        }
        let mut sampler = Sampler::with_vocab(sampler_cfg, Arc::clone(&vocab));
        if let Some(m) = matcher {
            sampler.set_grammar(m);
        }
        for &t in &prompt_tokens {
            sampler.accept(t);
        }
        let stdout = std::io::stdout();
        let mut out = stdout.lock();
        let mut decoder = StreamDecoder::continuing(tokenizer);
        let mut alts: Vec<TokenLogprob> = Vec::with_capacity(args.top_logprobs);
        let mut json_tokens = Vec::new();
        let mut text = String::new();
        let mut emit = String::new();
        let mut stop_reason = StopReason::Length;

        let t_prompt = Instant::now();
        let mut logits = session.forward(&prompt_tokens, Logits::Last)?;
        let prompt_s = t_prompt.elapsed().as_secs_f64();

        let t_gen = Instant::now();
        let mut generated = 0usize;
        // Streams one chosen token (chosen from `logits`); true when generation stops.
        let mut handle = |id: u32, logits: &[f32], grammar_done: bool| -> Result<bool, CliError> {
            if args.json {
                let lp = top_logprobs(logits, id, args.top_logprobs, &mut alts);
                json_tokens.push(JsonToken {
                    id,
                    text: String::from_utf8_lossy(tokenizer.token_bytes(id)).into_owned(),
                    logprob: lp,
                    top_logprobs: alts.iter().map(|a| JsonAlt { id: a.id, logprob: a.logprob }).collect(),
                });
            }
            if (tokenizer.is_eog(id) && !args.ignore_eos) || grammar_done {
                stop_reason = StopReason::EndOfGeneration { token: id };
                return Ok(true);
            }
            let piece = decoder.push(id);
            emit.clear();
            let hit = stops.push(&piece, &mut emit);
            if args.json {
                text.push_str(&emit);
            } else if !emit.is_empty() {
                out.write_all(emit.as_bytes())?;
                out.flush()?;
            }
            if let Some(index) = hit {
                stop_reason = StopReason::StopString { index };
                return Ok(true);
            }
            Ok(false)
        };
        let mut passes = 1u64;
        let mut calibrate = std::time::Duration::ZERO;
        let mut pass_cost = None;
        match spec.as_mut() {
            None => {
                while generated < n_predict {
                    let id = sampler.try_sample(logits)?;
                    generated += 1;
                    let grammar_done = sampler.matcher().is_some_and(|m| m.is_finished());
                    if handle(id, logits, grammar_done)? {
                        break;
                    }
                    sampler.accept(id);
                    if generated == n_predict {
                        break;
                    }
                    logits = session.forward(&[id], Logits::Last)?;
                    passes += 1;
                }
            }
            Some(spec) => {
                // The first token comes from the prompt's pass; then each pass scores a
                // draft and emits the accepted tokens plus the target's own.
                let first = sampler.try_sample(logits)?;
                generated += 1;
                let grammar_done = sampler.matcher().is_some_and(|m| m.is_finished());
                let mut stopped = handle(first, logits, grammar_done)?;
                sampler.accept(first);
                // The pass-cost curve is measured once, after the prompt, outside the
                // generation's time (as the prompt is).
                let t_cal = Instant::now();
                pass_cost = spec.calibrate(&mut session, first, &sampler)?;
                calibrate = t_cal.elapsed();
                let mut history = prompt_tokens.clone();
                history.push(first);
                let mut step = Vec::with_capacity(SpecConfig::DRAFT_MAX_LIMIT + 1);
                let ends = |id: u32| tokenizer.is_eog(id) && !args.ignore_eos;
                while !stopped && generated < n_predict {
                    spec.step(&mut session, &mut sampler, &history, n_predict - generated, &ends, &mut step)?;
                    passes += 1;
                    for (i, &id) in step.iter().enumerate() {
                        generated += 1;
                        let grammar_done = i + 1 == step.len()
                            && sampler.matcher().is_some_and(|m| m.is_finished());
                        if handle(id, spec.logits(i), grammar_done)? {
                            stopped = true;
                            break;
                        }
                    }
                    history.extend_from_slice(&step);
                }
            }
        }
        let mut tail = String::new();
        if !matches!(stop_reason, StopReason::StopString { .. }) {
            if let Some(index) = stops.push(&decoder.finish(), &mut tail) {
                stop_reason = StopReason::StopString { index };
            }
            stops.finish(&mut tail);
        }
        let gen_s = t_gen.elapsed().saturating_sub(calibrate).as_secs_f64();
        let mask = sampler.mask_stats();
        let timings = Timings {
            load_ms,
            prompt_n: prompt_tokens.len(),
            prompt_per_second: prompt_tokens.len() as f64 / prompt_s.max(1e-9),
            predicted_n: generated,
            predicted_per_second: generated as f64 / gen_s.max(1e-9),
            grammar_mask_ms: (mask.steps > 0)
                .then(|| mask.total.as_secs_f64() * 1e3 / mask.steps as f64),
            speculative: spec.as_ref().zip(spec_cfg.as_ref()).map(|(d, c)| {
                let st = d.stats();
                SpecOut {
                    method: c.method.as_str(),
                    drafted: st.drafted,
                    accepted: st.accepted,
                    acceptance_rate: st.acceptance_rate(),
                    mean_accepted_length: st.mean_accepted_length(),
                    passes,
                    draft_ms: st.draft_time.as_secs_f64() * 1e3,
                    verify_ms: st.verify_time.as_secs_f64() * 1e3,
                    sample_ms: st.sample_time.as_secs_f64() * 1e3,
                    rollback_ms: st.rollback_time.as_secs_f64() * 1e3,
                    calibrate_ms: calibrate.as_secs_f64() * 1e3,
                    pass_cost: pass_cost.as_ref().map_or_else(Vec::new, |c| c.points().to_vec()),
                    pass_steps: d.pass_steps(),
                }
            }),
        };
        if args.json {
            text.push_str(&tail);
            let obj = JsonOut {
                prompt_tokens: prompt_tokens.clone(),
                tokens: json_tokens,
                text,
                stop_reason: stop_reason.as_str(),
                timings,
            };
            serde_json::to_writer(&mut out, &obj).map_err(std::io::Error::other)?;
            writeln!(out)?;
        } else {
            out.write_all(tail.as_bytes())?;
            writeln!(out)?;
            eprintln!(
                "load {:.0} ms | prompt {} tokens, {:.1} tokens/s | generated {} tokens, {:.1} tokens/s | {} threads | stop: {}",
                timings.load_ms, timings.prompt_n, timings.prompt_per_second, timings.predicted_n, timings.predicted_per_second, threads, stop_reason.as_str()
            );
            if let Some(sp) = &timings.speculative {
                eprintln!(
                    "speculative ({}): drafted {}, accepted {} ({:.1}%), mean accepted length {:.2}, {} target passes for {} tokens",
                    sp.method, sp.drafted, sp.accepted, 100.0 * sp.acceptance_rate, sp.mean_accepted_length, sp.passes, timings.predicted_n
                );
                eprintln!(
                    "speculative time: draft {:.0} ms, verify {:.0} ms, sample {:.0} ms, rollback {:.1} ms",
                    sp.draft_ms, sp.verify_ms, sp.sample_ms, sp.rollback_ms
                );
                if !sp.pass_cost.is_empty() {
                    let curve: Vec<String> =
                        sp.pass_cost.iter().map(|(n, c)| format!("{n}: {c:.2}")).collect();
                    eprintln!(
                        "pass cost in decode steps (measured in {:.0} ms) {}; the passes cost {:.1} steps",
                        sp.calibrate_ms,
                        curve.join(", "),
                        sp.pass_steps
                    );
                }
            }
            if mask.steps > 0 {
                eprintln!(
                    "grammar mask: {} steps, mean {:.3} ms, max {:.3} ms",
                    mask.steps,
                    mask.total.as_secs_f64() * 1e3 / mask.steps as f64,
                    mask.max.as_secs_f64() * 1e3
                );
            }
        }
        Ok(())
    })
}
