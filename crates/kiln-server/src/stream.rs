//! SSE streaming in OpenAI's chunk format: `data: {chunk}\n\n` per event; chat streams
//! open each choice with a `delta.role` chunk, sent with the choice's first token (as vLLM
//! does: a stream's first body byte means its prefill is done, which routers such as
//! vllm-router's `kv_aware` read to end a request's prefill load), every choice ends with a chunk carrying its
//! `finish_reason`, an optional usage chunk (`stream_options.include_usage`) follows, and
//! the stream ends with `data: [DONE]`. Dropping the stream (the client went away) drops
//! the request handles, which cancels the requests and frees their KV blocks.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;

use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, SelectAll, Stream, StreamExt};
use kiln_engine::{Event, RequestHandle, TokenLogprob};
use kiln_tokenizer::Tokenizer;

use crate::error::ApiError;
use crate::state::{AppState, InFlight};
use crate::tools::deltas::CallDelta;
use crate::tools::split::{Piece, Splitter};
use crate::tools::{self, OutputSpec};
use crate::wire::{
    ChatChunk, ChatChunkChoice, ChatLogprobs, ChatTokenLogprob, ChatTopLogprob, CompletionChoice,
    CompletionLogprobs, CompletionResponse, Delta, FunctionDelta, ToolCallDelta, UsageJson,
};

/// A delta carrying released pieces (`content` always present, possibly empty, so every
/// token has its chunk).
fn pieces_delta(pieces: Vec<Piece>) -> Delta {
    let mut d = Delta {
        content: Some(String::new()),
        ..Delta::default()
    };
    for p in pieces {
        match p {
            Piece::Content(c) => d.content.get_or_insert_default().push_str(&c),
            Piece::Reasoning(r) => d.reasoning_content.get_or_insert_default().push_str(&r),
        }
    }
    d
}

/// Call deltas as OpenAI's `delta.tool_calls` entries: a call's first entry carries its
/// index, a fresh id, `type` and name (arguments `""` or their first text), later ones the
/// index and more arguments text (consecutive pieces of one call in one entry).
fn tool_call_deltas(deltas: Vec<CallDelta>) -> Option<Vec<ToolCallDelta>> {
    let mut v: Vec<ToolCallDelta> = Vec::new();
    for d in deltas {
        match d {
            CallDelta::Start { index, name } => v.push(ToolCallDelta {
                index,
                id: Some(tools::call_id()),
                kind: Some("function"),
                function: FunctionDelta {
                    name: Some(name),
                    arguments: String::new(),
                },
            }),
            CallDelta::Arguments { index, text } => match v.last_mut() {
                Some(last) if last.index == index => last.function.arguments.push_str(&text),
                _ => v.push(ToolCallDelta {
                    index,
                    id: None,
                    kind: None,
                    function: FunctionDelta {
                        name: None,
                        arguments: text,
                    },
                }),
            },
        }
    }
    (!v.is_empty()).then_some(v)
}

/// A delta with released pieces and call deltas (`content` left out when the chunk
/// carries only calls).
fn split_delta(pieces: Vec<Piece>, deltas: Vec<CallDelta>) -> Delta {
    let mut d = pieces_delta(pieces);
    d.tool_calls = tool_call_deltas(deltas);
    if d.tool_calls.is_some() && d.content.as_deref() == Some("") {
        d.content = None;
    }
    d
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Completion,
    Chat,
}

/// One submitted choice.
pub struct Choice {
    pub index: usize,
    /// Whether its prompt tokens count in the usage (the first choice of each prompt).
    pub counts_prompt: bool,
    /// Its prompt's length (the usage of a choice cut short by the server).
    pub prompt_tokens: usize,
    pub handle: RequestHandle,
}

/// What a response needs besides the tokens.
pub struct StreamCtx {
    pub kind: Kind,
    pub id: String,
    pub created: u64,
    pub model: String,
    pub logprobs: bool,
    pub tokenizer: Option<Arc<Tokenizer>>,
    /// How chat replies split into reasoning, content and tool calls (`None`: all content).
    pub output: Option<Arc<OutputSpec>>,
    /// llama-server's `n_indent` (`/infill`, not streamed): every line after the first
    /// must be indented by at least this many spaces or tabs, else generation stops and
    /// that line is cut ([`crate::fim::IndentLimit`]); 0: no limit.
    pub n_indent: usize,
}

/// Log-probabilities gathered for one choice (in both formats; the endpoint picks one).
#[derive(Default, Debug, Clone)]
pub struct ChoiceOut {
    pub completion: CompletionLogprobs,
    pub chat: ChatLogprobs,
}

impl StreamCtx {
    pub fn new(state: &AppState, kind: Kind, logprobs: bool) -> StreamCtx {
        let prefix = match kind {
            Kind::Completion => "cmpl-",
            Kind::Chat => "chatcmpl-",
        };
        let b = state.backend();
        StreamCtx {
            kind,
            id: format!("{prefix}{}", state.next_id()),
            created: crate::state::unix_now(),
            model: b.map(|b| b.model_id.clone()).unwrap_or_default(),
            logprobs,
            tokenizer: b.map(|b| Arc::clone(&b.tokenizer)),
            output: None,
            n_indent: 0,
        }
    }

    fn piece(&self, id: u32) -> (String, Vec<u8>) {
        let bytes = self
            .tokenizer
            .as_ref()
            .map(|t| t.token_bytes(id).to_vec())
            .unwrap_or_default();
        (String::from_utf8_lossy(&bytes).into_owned(), bytes)
    }

    /// Adds one token's log-probabilities (`offset`: text length before it).
    pub fn record_logprobs(
        &self,
        out: &mut ChoiceOut,
        offset: usize,
        id: u32,
        logprob: Option<TokenLogprob>,
        top: &[TokenLogprob],
    ) {
        if !self.logprobs {
            return;
        }
        let lp = logprob.map_or(f32::NAN, |l| l.logprob);
        let (token, bytes) = self.piece(id);
        match self.kind {
            Kind::Completion => {
                let c = &mut out.completion;
                c.tokens.push(token);
                c.token_logprobs.push(lp);
                c.top_logprobs.push(
                    top.iter()
                        .map(|t| (self.piece(t.id).0, t.logprob))
                        .collect(),
                );
                c.text_offset.push(offset);
            }
            Kind::Chat => out.chat.content.push(ChatTokenLogprob {
                token,
                logprob: lp,
                bytes,
                top_logprobs: top
                    .iter()
                    .map(|t| {
                        let (token, bytes) = self.piece(t.id);
                        ChatTopLogprob {
                            token,
                            logprob: t.logprob,
                            bytes,
                        }
                    })
                    .collect(),
            }),
        }
    }

    fn completion_chunk(
        &self,
        index: usize,
        text: String,
        logprobs: Option<CompletionLogprobs>,
        finish: Option<&'static str>,
        usage: Option<UsageJson>,
    ) -> String {
        let choices = if usage.is_some() {
            Vec::new()
        } else {
            vec![CompletionChoice {
                index,
                text,
                logprobs,
                finish_reason: finish,
            }]
        };
        serde_json::to_string(&CompletionResponse {
            id: self.id.clone(),
            object: "text_completion",
            created: self.created,
            model: self.model.clone(),
            choices,
            usage,
        })
        .unwrap_or_default()
    }

    fn chat_chunk(
        &self,
        index: usize,
        delta: Delta,
        logprobs: Option<ChatLogprobs>,
        finish: Option<&'static str>,
        usage: Option<UsageJson>,
    ) -> String {
        let choices = if usage.is_some() {
            Vec::new()
        } else {
            vec![ChatChunkChoice {
                index,
                delta,
                logprobs,
                finish_reason: finish,
            }]
        };
        serde_json::to_string(&ChatChunk {
            id: self.id.clone(),
            object: "chat.completion.chunk",
            created: self.created,
            model: self.model.clone(),
            choices,
            usage,
        })
        .unwrap_or_default()
    }
}

type ChoiceStream = Pin<Box<dyn Stream<Item = (usize, bool, Event)> + Send>>;

/// The events of one choice, ending after its last event.
fn choice_stream(c: Choice) -> ChoiceStream {
    let Choice {
        index,
        counts_prompt,
        handle,
        ..
    } = c;
    Box::pin(stream::unfold(Some(handle), move |h| async move {
        let h = h?;
        let ev = h.recv_async().await?;
        let last = matches!(ev, Event::Done { .. } | Event::Error(_));
        Some(((index, counts_prompt, ev), (!last).then_some(h)))
    }))
}

struct SseState {
    state: AppState,
    ctx: StreamCtx,
    inner: SelectAll<ChoiceStream>,
    pending: VecDeque<String>,
    /// Text length released so far, per choice (for `text_offset`).
    offsets: Vec<usize>,
    ended: Vec<bool>,
    /// Per choice, whether its first chunk went out (a chat choice's first chunk is its
    /// `delta.role` chunk, made when its first event arrives rather than up front).
    opened: Vec<bool>,
    /// Per chat choice, when replies are split (tools or reasoning).
    splitters: Vec<Option<Splitter>>,
    usage: UsageJson,
    include_usage: bool,
    finished: bool,
    /// The request's slot under `max_concurrent_requests`, freed with the stream.
    _slot: InFlight,
}

impl SseState {
    fn on_event(&mut self, index: usize, counts_prompt: bool, ev: Event) {
        let slot = self.slot(index);
        if !self.opened[slot] {
            self.opened[slot] = true;
            if self.ctx.kind == Kind::Chat {
                self.pending.push_back(role_chunk(&self.ctx, index));
            }
        }
        match ev {
            Event::Token {
                id,
                text,
                logprob,
                top,
            } => {
                let mut out = ChoiceOut::default();
                self.ctx
                    .record_logprobs(&mut out, self.offsets[slot], id, logprob, &top);
                self.offsets[slot] += text.len();
                // One chunk per generated token, also when the token completes no character
                // yet (the first bytes of a multi-byte one: empty `content`, the bytes follow
                // with the token that completes them). A stream thus shows every token as
                // it is produced, and a client's inter-chunk gap is the server's inter-token
                // gap (the convoy suite's head-of-line figure reads exactly that).
                let chunk = match self.ctx.kind {
                    Kind::Completion => self.ctx.completion_chunk(
                        index,
                        text.to_string(),
                        self.ctx.logprobs.then_some(out.completion),
                        None,
                        None,
                    ),
                    Kind::Chat => {
                        let delta = match &mut self.splitters[slot] {
                            Some(sp) => {
                                let mut pieces = Vec::new();
                                let spec = self.ctx.output.as_deref();
                                sp.push(
                                    spec.map_or(text.as_str(), |o| o.token_text(id, &text)),
                                    &mut pieces,
                                );
                                split_delta(pieces, sp.take_deltas())
                            }
                            None => Delta {
                                content: Some(text.to_string()),
                                ..Delta::default()
                            },
                        };
                        self.ctx.chat_chunk(
                            index,
                            delta,
                            self.ctx.logprobs.then_some(out.chat),
                            None,
                            None,
                        )
                    }
                };
                self.pending.push_back(chunk);
            }
            Event::Done { finish, usage, .. } => {
                self.ended[slot] = true;
                self.usage.add(&usage, counts_prompt);
                let mut f = Some(finish.as_str());
                if let Some(sp) = self.splitters[slot].take() {
                    let mut pieces = Vec::new();
                    let (calls, deltas) = sp.finish_streamed(&mut pieces);
                    if !calls.is_empty() {
                        f = Some(tools::finish_reason(finish, true));
                    }
                    if !pieces.is_empty() || !deltas.is_empty() {
                        let delta = split_delta(pieces, deltas);
                        let chunk = self.ctx.chat_chunk(index, delta, None, None, None);
                        self.pending.push_back(chunk);
                    }
                }
                let chunk = match self.ctx.kind {
                    Kind::Completion => {
                        self.ctx
                            .completion_chunk(index, String::new(), None, f, None)
                    }
                    Kind::Chat => self.ctx.chat_chunk(index, Delta::default(), None, f, None),
                };
                self.pending.push_back(chunk);
            }
            Event::Error(e) => {
                self.ended[slot] = true;
                let e = ApiError::from(e);
                self.state.count_error(&e, true);
                self.pending.push_back(e.body());
            }
        }
    }

    fn slot(&mut self, index: usize) -> usize {
        if index >= self.offsets.len() {
            self.offsets.resize(index + 1, 0);
            self.ended.resize(index + 1, false);
            self.opened.resize(index + 1, false);
            self.splitters.resize_with(index + 1, || None);
        }
        index
    }

    fn on_end(&mut self) {
        if self.ended.iter().any(|e| !e) {
            self.pending.push_back(
                ApiError::internal("the engine stopped before the request ended").body(),
            );
        }
        if self.include_usage {
            let chunk = match self.ctx.kind {
                Kind::Completion => {
                    self.ctx
                        .completion_chunk(0, String::new(), None, None, Some(self.usage))
                }
                Kind::Chat => {
                    self.ctx
                        .chat_chunk(0, Delta::default(), None, None, Some(self.usage))
                }
            };
            self.pending.push_back(chunk);
        }
        self.pending.push_back("[DONE]".to_string());
        self.finished = true;
    }
}

impl Drop for SseState {
    fn drop(&mut self) {
        if !self.finished {
            self.state.count(|c| c.client_disconnects += 1);
        }
    }
}

/// A chat choice's opening chunk: `delta.role` with empty content.
fn role_chunk(ctx: &StreamCtx, index: usize) -> String {
    ctx.chat_chunk(
        index,
        Delta {
            role: Some("assistant"),
            content: Some(String::new()),
            ..Delta::default()
        },
        None,
        None,
        None,
    )
}

/// The streaming response for `choices`. Nothing of the body goes out before the first
/// engine event (the headers do): a chat choice's role chunk waits for its first token.
pub fn sse(
    state: AppState,
    ctx: StreamCtx,
    choices: Vec<Choice>,
    include_usage: bool,
    slot: InFlight,
) -> Response {
    let n = choices.iter().map(|c| c.index + 1).max().unwrap_or(0);
    let splitters = (0..n)
        .map(|_| {
            ctx.output
                .as_ref()
                .filter(|_| ctx.kind == Kind::Chat)
                .map(|o| Splitter::new(Arc::clone(o)))
        })
        .collect();
    let st = SseState {
        state,
        ctx,
        inner: stream::select_all(choices.into_iter().map(choice_stream)),
        pending: VecDeque::new(),
        offsets: vec![0; n],
        ended: vec![false; n],
        opened: vec![false; n],
        splitters,
        usage: UsageJson::default(),
        include_usage,
        finished: false,
        _slot: slot,
    };
    let events = stream::unfold(st, |mut st| async move {
        loop {
            if let Some(data) = st.pending.pop_front() {
                return Some((Ok::<_, Infallible>(SseEvent::default().data(data)), st));
            }
            if st.finished {
                return None;
            }
            match st.inner.next().await {
                Some((index, counts_prompt, ev)) => st.on_event(index, counts_prompt, ev),
                None => st.on_end(),
            }
        }
    });
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}
