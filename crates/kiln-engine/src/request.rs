//! What a client submits and what it receives.

use std::sync::Arc;

use kiln_sample::{Grammar, SamplerConfig, TokenLogprob};

use crate::EngineError;
use crate::text::TokenText;

/// One completion request, already tokenized.
#[derive(Clone, Debug)]
pub struct Request {
    /// Prompt token ids (the server renders chat templates and tokenizes).
    pub prompt: Vec<u32>,
    /// Most tokens to generate.
    pub max_tokens: usize,
    /// Sampler settings, including the seed.
    pub sampling: SamplerConfig,
    /// Stop strings; the text never includes the stop string.
    pub stop: Vec<String>,
    /// Constrained output (e.g. a JSON schema).
    pub grammar: Option<Arc<Grammar>>,
    /// `Some(k)`: report the chosen token's log-probability and the `k` most likely.
    pub logprobs: Option<usize>,
    /// Keep generating past end-of-generation tokens.
    pub ignore_eos: bool,
    /// Speculative decoding for this request: `None` follows the engine
    /// ([`crate::EngineConfig::spec`]), `Some(false)` opts out, `Some(true)` opts in (with
    /// the engine's settings, or n-gram defaults when the engine has none). Output does not
    /// depend on it: greedy output is identical, sampled output has the same distribution.
    pub speculate: Option<bool>,
}

impl Request {
    /// A greedy request for `max_tokens` tokens after `prompt`.
    pub fn greedy(prompt: Vec<u32>, max_tokens: usize) -> Request {
        Request {
            prompt,
            max_tokens,
            sampling: SamplerConfig::greedy(),
            stop: Vec::new(),
            grammar: None,
            logprobs: None,
            ignore_eos: false,
            speculate: None,
        }
    }
}

/// What a request's stream carries.
#[derive(Debug)]
pub enum Event {
    /// One generated token. `text` is the newly releasable text (complete UTF-8, stop
    /// strings held back until decided; may be empty), lent from the request's own strings
    /// and given back when dropped ([`TokenText`]).
    Token {
        id: u32,
        text: TokenText,
        logprob: Option<TokenLogprob>,
        top: Vec<TokenLogprob>,
    },
    /// Last event of a successful request.
    Done {
        finish: FinishReason,
        usage: Usage,
        timings: RequestTimings,
    },
    /// Last event of a failed request.
    Error(EngineError),
}

/// Why a request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// An end-of-generation token, a stop string, or the grammar's end.
    Stop,
    /// `max_tokens` reached.
    Length,
    /// Cancelled by the client ([`crate::RequestHandle::cancel`]) or by shutdown.
    Cancelled,
}

impl FinishReason {
    /// `"stop"`, `"length"` or `"cancelled"`.
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Cancelled => "cancelled",
        }
    }
}

/// Token counts of a request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    /// Prompt tokens whose KV came from the prefix cache.
    pub cached_tokens: usize,
}

/// Where a request's time went, in milliseconds from submission.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RequestTimings {
    /// Submission to admission (first prefill chunk scheduled).
    pub queue_ms: f64,
    /// Submission to the first token.
    pub ttft_ms: f64,
    /// Mean gap between consecutive tokens.
    pub itl_ms_mean: f64,
    /// Largest gap between consecutive tokens.
    pub itl_ms_max: f64,
    /// Submission to the last event.
    pub total_ms: f64,
}
