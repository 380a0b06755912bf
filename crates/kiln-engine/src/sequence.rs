//! One request inside the scheduler: its tokens, KV sequence, sampler, stop strings,
//! streaming decoder and timings, and what happens when its logits arrive.

use std::sync::Arc;
use std::time::Instant;

use kiln_model::SeqId;
use kiln_sample::{Matcher, Sampler, StopStrings, TokenLogprob, Vocab, top_logprobs};
use kiln_spec::SpecConfig;
use kiln_tokenizer::{StreamDecoder, Tokenizer};

use crate::channel::Sender;
use crate::spec::SeqSpec;
use crate::text::TextPool;
use crate::{EngineError, Event, FinishReason, Request, RequestTimings, Usage};

/// What a request's latest token did.
pub(crate) enum Outcome {
    /// Keep decoding.
    Continue,
    /// The request ended normally (its last events are sent by the caller).
    Finished(FinishReason),
    /// Its client went away.
    Disconnected,
}

/// A request the scheduler holds, waiting or running.
pub(crate) struct Seq<'t> {
    pub id: u64,
    tx: Sender<Event>,
    pub max_tokens: usize,
    logprobs: Option<usize>,
    ignore_eos: bool,
    /// Prompt then generated tokens: what the KV sequence must eventually hold.
    pub tokens: Vec<u32>,
    pub n_prompt: usize,
    /// The KV sequence, while admitted.
    pub kv: Option<SeqId>,
    /// Positions of `tokens` evaluated into `kv`.
    pub done: usize,
    pub generated: usize,
    /// Prompt tokens taken from the prefix cache at first admission.
    pub cached: usize,
    sampler: Sampler,
    stop: StopStrings,
    decoder: StreamDecoder<'t>,
    tok: &'t Tokenizer,
    alts: Vec<TokenLogprob>,
    /// The text the last token completed (kept for its allocation).
    piece: String,
    /// The text the last token emits (kept for its allocation; each event gets a copy in a
    /// string lent from `texts`).
    emit: String,
    /// The strings the events' texts are lent in.
    texts: Arc<TextPool>,
    pub submitted: Instant,
    pub admitted: Option<Instant>,
    /// While in prefill: when it was (re)admitted or last got a chunk (its prefill
    /// priority grows with the time since, see `scheduler::order_prefill`).
    pub prefill_progress: Option<Instant>,
    first: Option<Instant>,
    last: Option<Instant>,
    itl_sum: f64,
    itl_max: f64,
    /// Its speculative decoding, when it speculates.
    pub spec: Option<SeqSpec>,
}

impl<'t> Seq<'t> {
    /// Prepares a submitted request (compiles nothing: the grammar is already compiled).
    /// Its text buffers reserve room for pieces of `longest_piece` bytes (the vocabulary's
    /// longest token), so no token's text grows them. `spec`: how it speculates, if it
    /// does.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        id: u64,
        request: Request,
        tx: Sender<Event>,
        submitted: Instant,
        tok: &'t Tokenizer,
        vocab: &Arc<Vocab>,
        longest_piece: usize,
        spec: Option<&SpecConfig>,
    ) -> Result<Seq<'t>, (Sender<Event>, EngineError)> {
        let mut stop = match StopStrings::new(request.stop.iter().cloned()) {
            Ok(s) => s,
            Err(e) => return Err((tx, EngineError::InvalidRequest(e.to_string()))),
        };
        let mut sampler = Sampler::with_vocab(request.sampling.clone(), Arc::clone(vocab));
        if let Some(g) = &request.grammar {
            match Matcher::new(Arc::clone(g), Arc::clone(vocab)) {
                Ok(m) => sampler.set_grammar(m),
                Err(e) => return Err((tx, EngineError::InvalidRequest(e.to_string()))),
            }
        }
        for &t in &request.prompt {
            sampler.accept(t);
        }
        // A piece is at most the longest token plus an incomplete character's bytes (< 4);
        // held-back text is at most the longest stop string and one piece; one token's
        // text is at most what was held back, its piece and the decoder's tail.
        let piece_bytes = longest_piece + 4;
        let text_bytes = stop.longest() + 2 * piece_bytes;
        stop.reserve(stop.longest() + piece_bytes);
        let mut decoder = StreamDecoder::continuing(tok);
        decoder.reserve(piece_bytes);
        let n_prompt = request.prompt.len();
        let mut tokens = request.prompt;
        tokens.reserve(request.max_tokens);
        Ok(Seq {
            id,
            tx,
            max_tokens: request.max_tokens,
            logprobs: request.logprobs,
            ignore_eos: request.ignore_eos,
            tokens,
            n_prompt,
            kv: None,
            done: 0,
            generated: 0,
            cached: 0,
            sampler,
            stop,
            decoder,
            tok,
            alts: Vec::with_capacity(request.logprobs.unwrap_or(0)),
            piece: String::with_capacity(piece_bytes),
            emit: String::with_capacity(text_bytes),
            // Two steps' texts: one token a step, or a whole accepted draft and its bonus
            // token when speculating.
            texts: TextPool::new(text_bytes, 2 * (1 + spec.map_or(0, |cfg| cfg.draft_max))),
            submitted,
            admitted: None,
            prefill_progress: None,
            first: None,
            last: None,
            itl_sum: 0.0,
            itl_max: 0.0,
            spec: spec.map(SeqSpec::new),
        })
    }

    /// Tokens still to evaluate before the next logits.
    pub fn remaining(&self) -> usize {
        self.tokens.len() - self.done
    }

    /// Samples the next token from `logits` (this sequence's last position), streams it
    /// and decides whether the request goes on. `itl` receives each inter-token gap (s).
    pub fn on_logits(
        &mut self,
        logits: &[f32],
        now: Instant,
        itl: impl FnMut(f64),
    ) -> Result<Outcome, EngineError> {
        let id = self.sample(logits)?;
        self.on_token(id, logits, now, itl)
    }

    /// The token its sampler picks from `logits` (hand it to [`Seq::on_token`]).
    pub fn sample(&mut self, logits: &[f32]) -> Result<u32, EngineError> {
        Ok(self.sampler.try_sample(logits)?)
    }

    /// Streams token `id`, chosen from `logits` by [`Seq::sample`], and decides whether
    /// the request goes on.
    pub fn on_token(
        &mut self,
        id: u32,
        logits: &[f32],
        now: Instant,
        mut itl: impl FnMut(f64),
    ) -> Result<Outcome, EngineError> {
        self.generated += 1;
        self.tokens.push(id);
        if let Some(prev) = self.last {
            let gap = now.duration_since(prev).as_secs_f64();
            self.itl_sum += gap;
            self.itl_max = self.itl_max.max(gap);
            itl(gap);
        } else {
            self.first = Some(now);
        }
        self.last = Some(now);
        let (logprob, top) = match self.logprobs {
            Some(k) => {
                let lp = top_logprobs(logits, id, k, &mut self.alts);
                (Some(TokenLogprob { id, logprob: lp }), self.alts.clone())
            }
            None => (None, Vec::new()),
        };

        self.emit.clear();
        let grammar_done = self.sampler.matcher().is_some_and(|m| m.is_finished());
        let mut finish = None;
        if (self.tok.is_eog(id) && !self.ignore_eos) || grammar_done {
            finish = Some(FinishReason::Stop);
        } else {
            self.piece.clear();
            self.decoder.push_into(id, &mut self.piece);
            if self.stop.push(&self.piece, &mut self.emit).is_some() {
                finish = Some(FinishReason::Stop);
            } else {
                self.sampler.accept(id);
                if self.generated >= self.max_tokens {
                    finish = Some(FinishReason::Length);
                }
            }
        }
        if finish.is_some() {
            // Release what the decoder and the stop strings held back (unless a stop
            // string already ended the text: then nothing more is emitted).
            let tail = self.decoder.finish();
            if self.stop.push(&tail, &mut self.emit).is_some() {
                finish = Some(FinishReason::Stop);
            }
            self.stop.finish(&mut self.emit);
        }
        // A string the receiver gave back (a new one only while it holds many).
        let text = self.texts.lend(&self.emit);
        let event = Event::Token {
            id,
            text,
            logprob,
            top,
        };
        if self.tx.send(event).is_err() {
            return Ok(Outcome::Disconnected);
        }
        Ok(match finish {
            Some(f) => Outcome::Finished(f),
            None => Outcome::Continue,
        })
    }

    /// Whether the last token's event carried text.
    pub fn emitted_text(&self) -> bool {
        !self.emit.is_empty()
    }

    /// The request's timings so far.
    pub fn timings(&self, now: Instant) -> RequestTimings {
        let ms = |a: Instant, b: Instant| b.duration_since(a).as_secs_f64() * 1e3;
        let gaps = self.generated.saturating_sub(1);
        RequestTimings {
            queue_ms: self.admitted.map_or(0.0, |a| ms(self.submitted, a)),
            ttft_ms: self.first.map_or(0.0, |f| ms(self.submitted, f)),
            itl_ms_mean: if gaps > 0 {
                self.itl_sum * 1e3 / gaps as f64
            } else {
                0.0
            },
            itl_ms_max: self.itl_max * 1e3,
            total_ms: ms(self.submitted, now),
        }
    }

    /// Token counts so far.
    pub fn usage(&self) -> Usage {
        Usage {
            prompt_tokens: self.n_prompt,
            completion_tokens: self.generated,
            cached_tokens: self.cached,
        }
    }

    /// Time to first token, once there is one.
    pub fn ttft(&self) -> Option<f64> {
        self.first
            .map(|f| f.duration_since(self.submitted).as_secs_f64())
    }

    /// Sends the last event of a successful (or cancelled) request.
    pub fn send_done(&self, finish: FinishReason, now: Instant) {
        // A client that went away needs no last event.
        let _ = self.tx.send(Event::Done {
            finish,
            usage: self.usage(),
            timings: self.timings(now),
        });
    }

    /// Sends the last event of a failed request.
    pub fn send_error(&self, e: EngineError) {
        let _ = self.tx.send(Event::Error(e));
    }
}
