//! Runs a model over chunked text: perplexity, writing a reference for KL divergence, and
//! comparing against one. The arithmetic is in [`crate::ppl`] and [`crate::kl`]; this module
//! only feeds them logits from a [`Session`].

use std::time::Instant;

use kiln_model::{Logits, Session};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::BenchError;
use crate::basefile::{BaseReader, BaseWriter};
use crate::kl::{BaseRow, KlAccumulator, KlReport, compare_row, encode_row, row_len};
use crate::ppl::{ChunkPlan, NllSum, PplEstimate, score_token};

/// Logit rows requested from the model per call are capped so that they take at most this
/// many bytes (Gemma-3's 262 144-token vocabulary: 64 rows).
pub const DEFAULT_LOGITS_BUDGET: usize = 64 << 20;

/// One batch of scored positions: `logits` holds `targets.len()` rows of `n_vocab`, the row
/// at position `p` predicting `targets[i]` = the token at `p + 1`.
struct Rows<'a> {
    chunk: usize,
    /// Index of the first row among the chunk's scored rows.
    row0: usize,
    logits: &'a [f32],
    targets: &'a [u32],
}

/// What [`evaluate`] reports: a batch of scored rows, or the end of a chunk.
enum Event<'a> {
    Rows(Rows<'a>),
    ChunkDone(usize),
}

/// Progress after each chunk.
#[derive(Clone, Copy, Debug)]
pub struct ChunkDone {
    /// 1-based chunk number and the total.
    pub chunk: usize,
    pub n_chunks: usize,
    /// Running estimate over the chunks so far.
    pub ppl: f64,
    pub seconds: f64,
}

/// Evaluates each chunk of `plan` from an empty cache. The first position of a chunk gets
/// `bos` when given; positions before `n_ctx/2` are evaluated without logits; the scored
/// positions are evaluated in calls of at most `rows_per_call`; the chunk's last token is
/// never evaluated (nothing after it is scored).
fn evaluate(
    session: &mut Session,
    tokens: &[u32],
    plan: &ChunkPlan,
    bos: Option<u32>,
    rows_per_call: usize,
    mut on: impl FnMut(Event<'_>) -> Result<(), BenchError>,
) -> Result<(), BenchError> {
    if session.n_ctx() < plan.n_ctx {
        return Err(BenchError::SessionTooSmall {
            session: session.n_ctx(),
            n_ctx: plan.n_ctx,
        });
    }
    if tokens.len() < plan.n_chunks * plan.n_ctx {
        return Err(BenchError::TooFewTokens {
            n_tokens: tokens.len(),
            needed: plan.n_chunks * plan.n_ctx,
            n_ctx: plan.n_ctx,
        });
    }
    let first = plan.first();
    let mut input = Vec::with_capacity(plan.n_ctx);
    for c in 0..plan.n_chunks {
        input.clear();
        input.extend_from_slice(&tokens[plan.chunk(c)]);
        if let Some(b) = bos {
            input[0] = b;
        }
        session.truncate(0);
        session.forward(&input[..first], Logits::Last)?;
        let mut p = first;
        while p < plan.n_ctx - 1 {
            let end = (p + rows_per_call.max(1)).min(plan.n_ctx - 1);
            let logits = session.forward(&input[p..end], Logits::All)?;
            on(Event::Rows(Rows {
                chunk: c,
                row0: p - first,
                logits,
                targets: &input[p + 1..end + 1],
            }))?;
            p = end;
        }
        on(Event::ChunkDone(c))?;
    }
    Ok(())
}

/// How many logit rows to request per call for a vocabulary.
pub fn rows_per_call(n_vocab: usize, budget_bytes: usize) -> usize {
    (budget_bytes / (4 * n_vocab.max(1))).max(1)
}

/// The outcome of a perplexity run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PerplexityRun {
    pub estimate: PplEstimate,
    pub plan: ChunkPlan,
    /// Running perplexity after each chunk (llama.cpp's `[i]value` line).
    pub per_chunk: Vec<f64>,
    pub seconds: f64,
}

/// Computes perplexity over `plan`'s chunks of `tokens`; when `base` is given, also writes
/// every scored position's distribution to it (a reference for [`kl_divergence`]).
pub fn perplexity(
    session: &mut Session,
    tokens: &[u32],
    plan: ChunkPlan,
    bos: Option<u32>,
    mut base: Option<&mut BaseWriter>,
    mut progress: impl FnMut(ChunkDone),
) -> Result<PerplexityRun, BenchError> {
    let n_vocab = session.model().config().vocab_size;
    let rl = row_len(n_vocab);
    let per_call = rows_per_call(n_vocab, DEFAULT_LOGITS_BUDGET);
    let mut sum = NllSum::default();
    let mut per_chunk = Vec::with_capacity(plan.n_chunks);
    let mut chunk_rows: Vec<u16> = Vec::new();
    let mut nll = Vec::with_capacity(per_call);
    if base.is_some() {
        chunk_rows.resize(plan.scored_per_chunk() * rl, 0);
    }
    let start = Instant::now();
    evaluate(session, tokens, &plan, bos, per_call, |event| match event {
        Event::Rows(rows) => {
            nll.clear();
            if base.is_some() {
                let out = &mut chunk_rows[rows.row0 * rl..(rows.row0 + rows.targets.len()) * rl];
                rows.logits
                    .par_chunks(n_vocab)
                    .zip(out.par_chunks_mut(rl))
                    .zip(rows.targets.par_iter())
                    .map(|((l, o), &t)| encode_row(l, t as usize, o))
                    .collect_into_vec(&mut nll);
            } else {
                rows.logits
                    .par_chunks(n_vocab)
                    .zip(rows.targets.par_iter())
                    .map(|(l, &t)| score_token(l, t as usize).nll)
                    .collect_into_vec(&mut nll);
            }
            // Summed in position order: the figure does not depend on the thread count.
            nll.iter().for_each(|&v| sum.add(v));
            Ok(())
        }
        Event::ChunkDone(c) => {
            if let Some(w) = base.as_deref_mut() {
                w.write_chunk(&chunk_rows)?;
            }
            let ppl = sum.ppl().unwrap_or(f64::NAN);
            per_chunk.push(ppl);
            progress(ChunkDone {
                chunk: c + 1,
                n_chunks: plan.n_chunks,
                ppl,
                seconds: start.elapsed().as_secs_f64(),
            });
            Ok(())
        }
    })?;
    Ok(PerplexityRun {
        estimate: sum.estimate().ok_or(BenchError::NoChunks)?,
        plan,
        per_chunk,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// The outcome of a KL-divergence run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KlRun {
    pub report: KlReport,
    pub plan: ChunkPlan,
    /// Mean KL after each chunk.
    pub per_chunk_kld: Vec<f64>,
    pub seconds: f64,
}

/// Evaluates the chunks stored in `base` (its tokens, its context) and compares every
/// scored position with the stored reference. `n_chunks` limits how many are used.
pub fn kl_divergence(
    session: &mut Session,
    base: &mut BaseReader,
    n_chunks: Option<usize>,
    bos: Option<u32>,
    mut progress: impl FnMut(ChunkDone),
) -> Result<KlRun, BenchError> {
    let header = base.header().clone();
    let n_vocab = session.model().config().vocab_size;
    if header.n_vocab != n_vocab {
        return Err(BenchError::VocabMismatch {
            base: header.n_vocab,
            model: n_vocab,
        });
    }
    let plan = ChunkPlan {
        n_ctx: header.n_ctx,
        n_chunks: n_chunks.map_or(header.n_chunks, |n| n.min(header.n_chunks)),
    };
    if plan.n_chunks == 0 {
        return Err(BenchError::NoChunks);
    }
    let rl = row_len(n_vocab);
    let mut acc = KlAccumulator::new();
    let mut base_rows: Vec<u16> = Vec::new();
    let mut loaded = usize::MAX;
    let mut positions = Vec::new();
    let mut per_chunk_kld = Vec::with_capacity(plan.n_chunks);
    let start = Instant::now();
    evaluate(
        session,
        &header.tokens,
        &plan,
        bos,
        rows_per_call(n_vocab, DEFAULT_LOGITS_BUDGET),
        |event| match event {
            Event::Rows(rows) => {
                if loaded != rows.chunk {
                    base.read_chunk(&mut base_rows)?;
                    loaded = rows.chunk;
                }
                let stored = &base_rows[rows.row0 * rl..(rows.row0 + rows.targets.len()) * rl];
                rows.logits
                    .par_chunks(n_vocab)
                    .zip(stored.par_chunks(rl))
                    .zip(rows.targets.par_iter())
                    .map(|((l, b), &t)| compare_row(l, &BaseRow::new(b, n_vocab), t as usize))
                    .collect_into_vec(&mut positions);
                positions.iter().for_each(|&p| acc.add(p));
                Ok(())
            }
            Event::ChunkDone(c) => {
                let kld = acc.mean_kld();
                per_chunk_kld.push(kld);
                progress(ChunkDone {
                    chunk: c + 1,
                    n_chunks: plan.n_chunks,
                    ppl: acc.ppl(),
                    seconds: start.elapsed().as_secs_f64(),
                });
                Ok(())
            }
        },
    )?;
    Ok(KlRun {
        report: acc.report().ok_or(BenchError::NoChunks)?,
        plan,
        per_chunk_kld,
        seconds: start.elapsed().as_secs_f64(),
    })
}
