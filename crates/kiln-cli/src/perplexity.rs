//! `kiln perplexity`: perplexity of a text file computed as llama.cpp's `llama-perplexity`
//! computes it (see `kiln_bench::ppl`), and the KL-divergence comparison against saved
//! reference logits (`--kl-base` / `--kl-divergence`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;
use kiln_bench::basefile::{BaseHeader, BaseMeta, BaseReader, BaseWriter};
use kiln_bench::run::ChunkDone;
use kiln_bench::{ChunkPlan, KlRun, PerplexityRun};
use kiln_format::GgufFile;
use kiln_model::{KvOptions, KvType, LoadOptions, Model, ModelError, Session, quantize_types};
use kiln_tokenizer::Tokenizer;
use serde::Serialize;

use crate::error::CliError;

#[derive(Args, Debug)]
pub struct PerplexityArgs {
    /// A GGUF path or a known model name.
    #[arg(long, short = 'm', default_value = kiln_hub::DEFAULT_MODEL)]
    model: String,
    /// The text to score (e.g. wikitext-2's wiki.test.raw). Not needed with
    /// --kl-divergence, which scores the tokens stored in the reference.
    #[arg(long, short = 'f')]
    file: Option<PathBuf>,
    /// Tokens per chunk; the second half of each chunk is scored.
    #[arg(long = "ctx-size", short = 'c', default_value_t = 512)]
    ctx_size: usize,
    /// Evaluate at most this many chunks (default: all that fit).
    #[arg(long)]
    chunks: Option<usize>,
    /// Tokens per forward step while filling the first half of a chunk.
    #[arg(long = "batch-size", short = 'b', default_value_t = 512)]
    batch_size: usize,
    /// Worker threads (default: all available cores).
    #[arg(long, short = 't')]
    threads: Option<usize>,
    /// Also save every scored position's distribution to this file: the reference for a
    /// later --kl-divergence run (llama.cpp's --kl-divergence-base format, plus a trailer
    /// naming the model).
    #[arg(long = "kl-base", value_name = "OUT", conflicts_with = "kl_divergence")]
    kl_base: Option<PathBuf>,
    /// Compare this model's distributions with a reference saved by --kl-base (or by
    /// llama-perplexity --kl-divergence-base): KL divergence, top-1 agreement, Δp.
    #[arg(long = "kl-divergence", value_name = "BASE")]
    kl_divergence: Option<PathBuf>,
    /// KV cache types: one for K and V, or `K,V` (f32, f16, q8_0, q4_0, q4_1, q5_0).
    #[arg(long = "kv-type", value_name = "K[,V]", default_value = "f16")]
    kv_type: String,
    /// Store quantized K/V rotated by a Walsh–Hadamard transform (as llama.cpp; `off` to
    /// measure without it).
    #[arg(long = "kv-rotation", value_name = "on|off", default_value = "on", value_parser = crate::args::kv::parse_on_off, action = clap::ArgAction::Set)]
    kv_rotation: bool,
    /// Quantize the model's float weight matrices to this type when loading (Q8_0, Q4_0,
    /// Q4_K), e.g. to measure a type's quality against the float model.
    #[arg(long, value_name = "TYPE")]
    quantize: Option<String>,
    /// Print one JSON object on stdout instead of the text report.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct PplJson<'a> {
    ppl: f64,
    ppl_stderr: Option<f64>,
    chunks: usize,
    n_ctx: usize,
    model: &'a str,
    model_type: &'a str,
    kv: &'a str,
    n_tokens: usize,
    scored: usize,
    per_chunk: &'a [f64],
    threads: usize,
    seconds: f64,
}

#[derive(Serialize)]
struct KlJson<'a> {
    model: &'a str,
    model_type: &'a str,
    kv: &'a str,
    base: &'a Path,
    base_model: Option<&'a str>,
    chunks: usize,
    n_ctx: usize,
    threads: usize,
    /// `seconds` comes from the flattened run (a second field of that name would make the
    /// JSON object invalid for strict readers).
    #[serde(flatten)]
    run: &'a KlRun,
}

fn progress_line(json: bool) -> impl FnMut(ChunkDone) {
    move |p: ChunkDone| {
        if json {
            return;
        }
        let mut err = std::io::stderr().lock();
        if p.chunk == 1 {
            let eta = p.seconds * (p.n_chunks - 1) as f64;
            let _ = writeln!(
                err,
                "{:.2} seconds per chunk, ETA {:.1} minutes",
                p.seconds,
                eta / 60.0
            );
        }
        let _ = write!(err, "[{}]{:.4},", p.chunk, p.ppl);
        if p.chunk == p.n_chunks {
            let _ = writeln!(err);
        }
    }
}

pub fn run(args: PerplexityArgs) -> Result<(), CliError> {
    let threads = crate::threads::count(args.threads)?;
    let pool = crate::threads::pool(threads)?;

    let path = kiln_hub::resolve(&args.model)?;
    let file = Arc::new(GgufFile::open(&path)?);
    let tokenizer = Tokenizer::from_gguf(file.metadata())?;
    let (k_type, v_type) = KvType::parse_pair(&args.kv_type).map_err(ModelError::from)?;
    let kv = KvOptions {
        k_type,
        v_type,
        rotation: args.kv_rotation,
        ..KvOptions::default()
    };
    let quantize = match &args.quantize {
        None => None,
        Some(name) => Some(
            kiln_format::GgmlType::from_name(&name.to_ascii_uppercase())
                .filter(|t| quantize_types().contains(t))
                .ok_or_else(|| ModelError::UnsupportedQuantization {
                    requested: name.clone(),
                    supported: quantize_types().iter().map(|t| t.name()).collect(),
                })?,
        ),
    };
    let model = Arc::new(Model::from_gguf_with(
        Arc::clone(&file),
        &LoadOptions { quantize },
    )?);
    let kv_desc = format!("KV {}/{}", k_type.name(), v_type.name());
    let model_type = match quantize {
        Some(t) => format!(
            "{} (quantized on load from {})",
            t.name(),
            kiln_bench::convert::dominant_type(&file)
        ),
        None => kiln_bench::convert::dominant_type(&file),
    };
    for note in model.load_notes() {
        if !args.json {
            eprintln!("note: {note}");
        }
    }
    // llama.cpp replaces each chunk's first token by BOS when the vocabulary adds one.
    let bos = if tokenizer.add_bos() {
        tokenizer.bos()
    } else {
        None
    };

    if let Some(base_path) = &args.kl_divergence {
        let mut base = BaseReader::open(base_path)?;
        let n_ctx = base.header().n_ctx;
        if !args.json {
            let from = base
                .meta()
                .map_or("llama.cpp (no Kiln trailer)".to_string(), |m| {
                    format!("{} ({}, {})", m.model, m.model_type, m.kv)
                });
            eprintln!(
                "comparing {} ({}, {kv_desc}) with {}: {} chunks of {n_ctx} tokens stored, {threads} threads",
                args.model,
                model_type,
                from,
                base.header().n_chunks
            );
        }
        let run = pool.install(|| {
            let mut session = Session::with_kv(Arc::clone(&model), n_ctx, args.batch_size, &kv)?;
            kiln_bench::kl_divergence(
                &mut session,
                &mut base,
                args.chunks,
                bos,
                progress_line(args.json),
            )
        })?;
        let mut out = std::io::stdout().lock();
        if args.json {
            let obj = KlJson {
                model: &args.model,
                model_type: &model_type,
                kv: &kv_desc,
                base: base_path,
                base_model: base.meta().map(|m| m.model.as_str()),
                chunks: run.plan.n_chunks,
                n_ctx,
                threads,
                run: &run,
            };
            serde_json::to_writer(&mut out, &obj).map_err(std::io::Error::other)?;
            writeln!(out)?;
        } else {
            write!(out, "{}", run.report.to_text())?;
        }
        return Ok(());
    }

    let Some(text_path) = &args.file else {
        return Err(CliError::Usage(
            "give the text to score with --file (or a reference with --kl-divergence)".into(),
        ));
    };
    let text = std::fs::read_to_string(text_path)
        .map_err(|e| CliError::Usage(format!("{}: {e}", text_path.display())))?;
    let t_tok = std::time::Instant::now();
    // As llama-perplexity: special tokens added, special-token text not parsed.
    let tokens = tokenizer.encode(&text, true, false)?;
    let plan = ChunkPlan::new(tokens.len(), args.ctx_size, args.chunks)?;
    if !args.json {
        eprintln!(
            "{}: {} tokens in {:.2} s; {} chunks of {}, scoring {} per chunk; {} ({}, {kv_desc}), {threads} threads",
            text_path.display(),
            tokens.len(),
            t_tok.elapsed().as_secs_f64(),
            plan.n_chunks,
            plan.n_ctx,
            plan.scored_per_chunk(),
            args.model,
            model_type
        );
    }
    let mut writer = match &args.kl_base {
        Some(p) => Some(BaseWriter::create(
            p,
            &BaseHeader {
                n_ctx: plan.n_ctx,
                n_vocab: model.config().vocab_size,
                n_chunks: plan.n_chunks,
                tokens: tokens[..plan.n_chunks * plan.n_ctx].to_vec(),
            },
        )?),
        None => None,
    };
    let run: PerplexityRun = pool.install(|| {
        let mut session = Session::with_kv(Arc::clone(&model), plan.n_ctx, args.batch_size, &kv)?;
        kiln_bench::perplexity(
            &mut session,
            &tokens,
            plan,
            bos,
            writer.as_mut(),
            progress_line(args.json),
        )
    })?;
    if let Some(w) = writer {
        w.finish(&BaseMeta {
            model: args.model.clone(),
            model_file: path
                .file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
            model_bytes: file.file_size(),
            model_type: model_type.clone(),
            kv: kv_desc.clone(),
            text: text_path.display().to_string(),
            bos,
            kiln_version: env!("CARGO_PKG_VERSION").to_string(),
        })?;
    }
    let mut out = std::io::stdout().lock();
    if args.json {
        let obj = PplJson {
            ppl: run.estimate.ppl,
            ppl_stderr: run.estimate.ppl_stderr,
            chunks: plan.n_chunks,
            n_ctx: plan.n_ctx,
            model: &args.model,
            model_type: &model_type,
            kv: &kv_desc,
            n_tokens: tokens.len(),
            scored: run.estimate.count,
            per_chunk: &run.per_chunk,
            threads,
            seconds: run.seconds,
        };
        serde_json::to_writer(&mut out, &obj).map_err(std::io::Error::other)?;
        writeln!(out)?;
    } else {
        match run.estimate.ppl_stderr {
            Some(se) => writeln!(
                out,
                "Final estimate: PPL = {:.4} +/- {:.5}",
                run.estimate.ppl, se
            )?,
            None => writeln!(
                out,
                "Final estimate: PPL = {:.4} (no uncertainty: too few predictions)",
                run.estimate.ppl
            )?,
        }
    }
    Ok(())
}
