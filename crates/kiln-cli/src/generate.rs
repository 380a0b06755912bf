//! `kiln generate`: tokenize a prompt as llama.cpp's `/completion` does, evaluate it as one
//! batch, then sample and stream tokens.

use std::io::{IsTerminal, Read, Write};
use std::sync::Arc;
use std::time::Instant;

use clap::Args;
use kiln_format::GgufFile;
use kiln_model::{Logits, Model, Session};
use kiln_sample::{Sampler, SamplerConfig, TokenLogprob, top_logprobs};
use kiln_tokenizer::{StreamDecoder, Tokenizer};
use serde::Serialize;

use crate::error::CliError;

#[derive(Args, Debug)]
pub struct GenerateArgs {
    /// A GGUF path or a known model name (smollm2-135m, gemma3-270m, qwen2.5-coder-0.5b).
    #[arg(long, short = 'm', default_value = kiln_hub::DEFAULT_MODEL)]
    model: String,
    /// The prompt (or use --prompt, or pipe it on stdin).
    #[arg(conflicts_with = "prompt_flag")]
    prompt: Option<String>,
    #[arg(long = "prompt", short = 'p', id = "prompt_flag")]
    prompt_flag: Option<String>,
    /// Tokens to generate.
    #[arg(short = 'n', long = "n-predict", default_value_t = 128)]
    n_predict: usize,
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.8)]
    temperature: f32,
    #[arg(long, default_value_t = 40)]
    top_k: usize,
    #[arg(long, default_value_t = 0.95)]
    top_p: f32,
    #[arg(long, default_value_t = 0.05)]
    min_p: f32,
    #[arg(long, default_value_t = 1.0)]
    repeat_penalty: f32,
    #[arg(long, default_value_t = 64)]
    repeat_last_n: usize,
    /// Seed of the sampler's random stream.
    #[arg(long, default_value_t = 0)]
    seed: u64,
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
}

#[derive(Serialize)]
struct JsonOut {
    prompt_tokens: Vec<u32>,
    tokens: Vec<JsonToken>,
    text: String,
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
    let sampler_cfg = SamplerConfig {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
        min_p: args.min_p,
        repeat_penalty: args.repeat_penalty,
        repeat_last_n: args.repeat_last_n,
        seed: args.seed,
    };
    sampler_cfg.validate()?;
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    if threads == 0 {
        return Err(CliError::Usage("--threads must be at least 1".into()));
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| CliError::Usage(format!("cannot start {threads} threads: {e}")))?;

    let t_load = Instant::now();
    let path = kiln_hub::resolve(&args.model)?;
    let file = Arc::new(GgufFile::open(&path)?);
    let tokenizer = Tokenizer::from_gguf(file.metadata())?;
    let model = Arc::new(Model::from_gguf(Arc::clone(&file))?);
    let load_ms = t_load.elapsed().as_secs_f64() * 1e3;

    let prompt_tokens = tokenizer.encode(&prompt, true, true)?;
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

    pool.install(|| {
        let mut session = Session::new(Arc::clone(&model), n_ctx, 512);
        let mut sampler = Sampler::new(sampler_cfg);
        for &t in &prompt_tokens {
            sampler.accept(t);
        }
        let stdout = std::io::stdout();
        let mut out = stdout.lock();
        let mut decoder = StreamDecoder::continuing(&tokenizer);
        let mut alts: Vec<TokenLogprob> = Vec::with_capacity(args.top_logprobs);
        let mut json_tokens = Vec::new();
        let mut text = String::new();

        let t_prompt = Instant::now();
        let mut logits = session.forward(&prompt_tokens, Logits::Last)?;
        let prompt_s = t_prompt.elapsed().as_secs_f64();

        let t_gen = Instant::now();
        let mut generated = 0usize;
        while generated < n_predict {
            let id = sampler.sample(logits);
            generated += 1;
            if args.json {
                let lp = top_logprobs(logits, id, args.top_logprobs, &mut alts);
                json_tokens.push(JsonToken {
                    id,
                    text: String::from_utf8_lossy(tokenizer.token_bytes(id)).into_owned(),
                    logprob: lp,
                    top_logprobs: alts.iter().map(|a| JsonAlt { id: a.id, logprob: a.logprob }).collect(),
                });
            }
            if tokenizer.is_eog(id) && !args.ignore_eos {
                break;
            }
            let piece = decoder.push(id);
            if args.json {
                text.push_str(&piece);
            } else if !piece.is_empty() {
                out.write_all(piece.as_bytes())?;
                out.flush()?;
            }
            sampler.accept(id);
            if generated == n_predict {
                break;
            }
            logits = session.forward(&[id], Logits::Last)?;
        }
        let tail = decoder.finish();
        let gen_s = t_gen.elapsed().as_secs_f64();
        let timings = Timings {
            load_ms,
            prompt_n: prompt_tokens.len(),
            prompt_per_second: prompt_tokens.len() as f64 / prompt_s.max(1e-9),
            predicted_n: generated,
            predicted_per_second: generated as f64 / gen_s.max(1e-9),
        };
        if args.json {
            text.push_str(&tail);
            let obj = JsonOut { prompt_tokens: prompt_tokens.clone(), tokens: json_tokens, text, timings };
            serde_json::to_writer(&mut out, &obj).map_err(std::io::Error::other)?;
            writeln!(out)?;
        } else {
            out.write_all(tail.as_bytes())?;
            writeln!(out)?;
            eprintln!(
                "load {:.0} ms | prompt {} tokens, {:.1} tokens/s | generated {} tokens, {:.1} tokens/s | {} threads",
                timings.load_ms, timings.prompt_n, timings.prompt_per_second, timings.predicted_n, timings.predicted_per_second, threads
            );
        }
        Ok(())
    })
}
