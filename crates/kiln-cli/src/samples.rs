//! `kiln generate --samples N`: N continuations of one prompt. The prompt is evaluated once;
//! every continuation is a fork of its KV sequence (pages shared, copied on first write) and
//! samples with its own sampler, seeded from `(--seed, index)`.

use std::io::Write;
use std::time::Instant;

use kiln_model::{Logits, Session};
use kiln_sample::{Sampler, SamplerConfig};
use kiln_tokenizer::{StreamDecoder, Tokenizer};
use serde::Serialize;

use crate::args::kv::sample_seed;
use crate::error::CliError;

/// What each continuation needs besides the session.
pub struct SampleRun<'a> {
    pub tokenizer: &'a Tokenizer,
    pub prompt: &'a [u32],
    pub sampler: &'a SamplerConfig,
    pub samples: usize,
    pub n_predict: usize,
    pub ignore_eos: bool,
    pub json: bool,
}

#[derive(Serialize)]
struct JsonSample<'a> {
    sample: usize,
    seed: u64,
    tokens: &'a [u32],
    text: &'a str,
}

pub fn run(session: &mut Session, r: &SampleRun<'_>) -> Result<(), CliError> {
    let t_prompt = Instant::now();
    let prompt_logits = session.forward(r.prompt, Logits::Last)?.to_vec();
    let prompt_s = t_prompt.elapsed().as_secs_f64();
    let mut seqs = vec![session.sequence()];
    for _ in 1..r.samples {
        seqs.push(session.fork()?);
    }
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let t_gen = Instant::now();
    let mut total = 0usize;
    let mut ids = Vec::with_capacity(r.n_predict);
    for (i, &seq) in seqs.iter().enumerate() {
        session.select(seq)?;
        let seed = sample_seed(r.sampler.seed, i);
        let mut sampler = Sampler::new(SamplerConfig {
            seed,
            ..r.sampler.clone()
        });
        for &t in r.prompt {
            sampler.accept(t);
        }
        let mut decoder = StreamDecoder::continuing(r.tokenizer);
        let mut text = String::new();
        ids.clear();
        let mut logits: &[f32] = &prompt_logits;
        while ids.len() < r.n_predict {
            let id = sampler.sample(logits);
            ids.push(id);
            if r.tokenizer.is_eog(id) && !r.ignore_eos {
                break;
            }
            text.push_str(&decoder.push(id));
            sampler.accept(id);
            if ids.len() == r.n_predict {
                break;
            }
            logits = session.forward(&[id], Logits::Last)?;
        }
        text.push_str(&decoder.finish());
        total += ids.len();
        if r.json {
            let obj = JsonSample {
                sample: i,
                seed,
                tokens: &ids,
                text: &text,
            };
            serde_json::to_writer(&mut out, &obj).map_err(std::io::Error::other)?;
            writeln!(out)?;
        } else {
            writeln!(out, "--- sample {i} (seed {seed}) ---\n{text}")?;
        }
    }
    let gen_s = t_gen.elapsed().as_secs_f64();
    let st = session.kv().stats();
    eprintln!(
        "prompt {} tokens, {:.1} tokens/s | {} samples, {} tokens, {:.1} tokens/s | KV: {} of {} blocks held, {} shared, {} copied on write",
        r.prompt.len(),
        r.prompt.len() as f64 / prompt_s.max(1e-9),
        r.samples,
        total,
        total as f64 / gen_s.max(1e-9),
        st.used_blocks,
        st.n_blocks,
        st.shared_blocks,
        st.cow_copies
    );
    Ok(())
}
