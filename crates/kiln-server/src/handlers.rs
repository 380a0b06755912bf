//! The endpoints: request validation, prompt building (chat template), submission to the
//! engine, and the answer (one JSON body, or an SSE stream: see [`crate::stream`]).

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

use kiln_engine::{Event, FinishReason, Grammar, Request};
use kiln_tokenizer::Tokenizer;
use kiln_tokenizer::chat::ChatTemplate;
use serde_json::Value;

use crate::error::ApiError;
use crate::fields::{self, Endpoint};
use crate::params::{self, Params};
use crate::state::{AppState, Backend, ServerConfig};
use crate::stream::{self, Choice, Kind, StreamCtx};
use crate::tools::{self, ChatRender};
use crate::wire::{
    ChatChoice, ChatRequest, ChatResponse, CompletionChoice, CompletionRequest, CompletionResponse,
    ModelCard, ModelList, Prompt, UsageJson,
};

/// The body as bytes: 413 over the limit, 400 when unreadable.
pub(crate) fn body_bytes(
    body: Result<Bytes, BytesRejection>,
    limit: usize,
) -> Result<Bytes, ApiError> {
    body.map_err(|r| {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::too_large(limit)
        } else {
            ApiError::bad_request(format!("cannot read the request body: {r}"), None)
        }
    })
}

pub(crate) fn parse_json<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes).map_err(|e| {
        ApiError::bad_request(
            format!("We could not parse the JSON body of your request: {e}"),
            None,
        )
    })
}

/// Parses a generation request: JSON, then every field checked against the list in
/// [`crate::fields`] (unknown or refused fields are a 400), then the typed body.
pub(crate) fn read_request<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
    endpoint: Endpoint,
    limits: &ServerConfig,
) -> Result<T, ApiError> {
    let mut v: Value = parse_json(bytes)?;
    fields::check(endpoint, &mut v, limits.lenient_params)?;
    serde_json::from_value(v).map_err(|e| {
        ApiError::bad_request(
            format!("We could not parse the JSON body of your request: {e}"),
            None,
        )
    })
}

/// The backend, unless the server is loading or shutting down (503).
pub(crate) fn ready(state: &AppState) -> Result<&Backend, ApiError> {
    if state.is_shutting_down() {
        return Err(ApiError::unavailable("the server is shutting down"));
    }
    state
        .backend()
        .ok_or_else(|| ApiError::unavailable("the model is still loading; retry shortly"))
}

pub(crate) fn check_model(b: &Backend, model: Option<&str>) -> Result<(), ApiError> {
    if b.serves(model) {
        Ok(())
    } else {
        Err(ApiError::model_not_found(model.unwrap_or(""), &b.model_id))
    }
}

/// Counts the answer's class and turns it into a response (OpenAI's error shape).
pub(crate) fn finish(state: &AppState, r: Result<Response, ApiError>) -> Response {
    finish_as(state, r, IntoResponse::into_response)
}

/// Counts the answer's class; an error becomes the response `answer` makes of it.
pub(crate) fn finish_as(
    state: &AppState,
    r: Result<Response, ApiError>,
    answer: impl FnOnce(ApiError) -> Response,
) -> Response {
    match r {
        Ok(r) => r,
        Err(e) => {
            state.count_error(&e, false);
            answer(e)
        }
    }
}

pub async fn completions(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    state.count(|c| c.http_requests += 1);
    let r = completions_inner(&state, body).await;
    finish(&state, r)
}

async fn completions_inner(
    state: &AppState,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let bytes = body_bytes(body, state.config().max_body_bytes)?;
    let req: CompletionRequest = read_request(&bytes, Endpoint::Completions, state.config())?;
    let b = ready(state)?;
    check_model(b, req.common.model.as_deref())?;
    let (p, prompts, logprobs) = prepare_completion(req, &b.tokenizer, state.config())?;
    let ctx = StreamCtx::new(state, Kind::Completion, logprobs.is_some());
    respond(state, b, &p, prompts, ctx, "prompt").await
}

/// A validated request: its shared settings, its prompt(s), and the logprobs asked for.
pub(crate) type Prepared<P> = (Params, P, Option<usize>);

/// Validates a completion request (everything but the model name) and tokenizes its
/// prompts: the shared settings, the prompts, and the logprobs asked for.
pub(crate) fn prepare_completion(
    req: CompletionRequest,
    tokenizer: &Tokenizer,
    limits: &ServerConfig,
) -> Result<Prepared<Vec<Vec<u32>>>, ApiError> {
    // `echo` and `best_of` asking for something were refused by the field list.
    let logprobs = match req.logprobs {
        None => None,
        Some(k) if k >= 0 => Some(k as usize),
        Some(k) => {
            return Err(ApiError::bad_request(
                format!(
                    "logprobs must be between 0 and {} (got {k})",
                    params::MAX_TOP_LOGPROBS
                ),
                Some("logprobs"),
            ));
        }
    };
    let vocab = tokenizer.vocab_size();
    let p = params::parse(
        &req.common,
        Some(req.common.max_tokens.unwrap_or(16)),
        logprobs,
        vocab,
        limits,
    )?;
    let prompt = req
        .prompt
        .ok_or_else(|| ApiError::bad_request("prompt is required", Some("prompt")))?;
    let prompts = match req.suffix.as_deref() {
        // Fill in the middle: each prompt is a prefix (text only).
        Some(suffix) if !suffix.is_empty() => {
            let texts = match prompt {
                Prompt::Text(t) => vec![t],
                Prompt::Texts(ts) => ts,
                Prompt::Tokens(_) | Prompt::TokenLists(_) => {
                    return Err(ApiError::bad_request(
                        "with suffix, prompt must be text (a string or strings), not token ids",
                        Some("prompt"),
                    ));
                }
            };
            if texts.is_empty() {
                return Err(ApiError::bad_request("prompt is empty", Some("prompt")));
            }
            texts
                .iter()
                .map(|prefix| {
                    let input = crate::fim::FimInput {
                        prefix,
                        suffix,
                        extra: &[],
                        prompt: "",
                    };
                    crate::fim::fim_prompt(tokenizer, &input, "suffix")
                })
                .collect::<Result<Vec<_>, _>>()?
        }
        _ => completion_prompts(tokenizer, prompt)?,
    };
    if prompts.len().saturating_mul(p.n) > limits.max_n {
        return Err(ApiError::bad_request(
            format!(
                "this request asks for {} choices ({} prompts × n {}); at most {} (the server's max_n limit)",
                prompts.len() * p.n,
                prompts.len(),
                p.n,
                limits.max_n
            ),
            Some("n"),
        ));
    }
    Ok((p, prompts, logprobs))
}

/// The token ids of each prompt of a completion request.
fn completion_prompts(tokenizer: &Tokenizer, prompt: Prompt) -> Result<Vec<Vec<u32>>, ApiError> {
    let encode = |text: &str| {
        tokenizer.encode(text, true, true).map_err(|e| {
            ApiError::bad_request(format!("cannot tokenize the prompt: {e}"), Some("prompt"))
        })
    };
    let vocab = tokenizer.vocab_size();
    let check_ids = |ids: Vec<u32>| match ids.iter().find(|&&id| id as usize >= vocab) {
        Some(bad) => Err(ApiError::bad_request(
            format!("token id {bad} is outside the vocabulary of {vocab}"),
            Some("prompt"),
        )),
        None => Ok(ids),
    };
    let prompts = match prompt {
        Prompt::Text(t) => vec![encode(&t)?],
        Prompt::Texts(ts) => ts.iter().map(|t| encode(t)).collect::<Result<_, _>>()?,
        Prompt::Tokens(ids) => vec![check_ids(ids)?],
        Prompt::TokenLists(lists) => lists.into_iter().map(check_ids).collect::<Result<_, _>>()?,
    };
    if prompts.is_empty() {
        return Err(ApiError::bad_request("prompt is empty", Some("prompt")));
    }
    Ok(prompts)
}

pub async fn chat(State(state): State<AppState>, body: Result<Bytes, BytesRejection>) -> Response {
    state.count(|c| c.http_requests += 1);
    let r = chat_inner(&state, body).await;
    finish(&state, r)
}

async fn chat_inner(
    state: &AppState,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let bytes = body_bytes(body, state.config().max_body_bytes)?;
    let req: ChatRequest = read_request(&bytes, Endpoint::Chat, state.config())?;
    let b = ready(state)?;
    check_model(b, req.common.model.as_deref())?;
    let (p, (prompt, spec), logprobs) =
        prepare_chat(req, &b.tokenizer, b.template.as_deref(), state.config())?;
    let mut ctx = StreamCtx::new(state, Kind::Chat, logprobs.is_some());
    ctx.output = Some(spec);
    respond(state, b, &p, vec![prompt], ctx, "messages").await
}

/// A chat prompt's ids and how to split its reply.
pub(crate) type ChatPrompt = (Vec<u32>, Arc<tools::OutputSpec>);

/// A chat prompt's ids, the grammar a required tool call is held to, and how to split the
/// reply.
type RenderedChat = (Vec<u32>, Option<Arc<Grammar>>, Arc<tools::OutputSpec>);

/// Validates a chat request (everything but the model name) and renders and tokenizes
/// its messages: the shared settings, the prompt with how to split its reply, and the
/// logprobs asked for.
pub(crate) fn prepare_chat(
    req: ChatRequest,
    tokenizer: &Tokenizer,
    template: Option<&ChatTemplate>,
    limits: &ServerConfig,
) -> Result<Prepared<ChatPrompt>, ApiError> {
    let logprobs = match (req.logprobs, req.top_logprobs) {
        (Some(true), k) => match k.unwrap_or(0) {
            k if k >= 0 => Some(k as usize),
            k => {
                return Err(ApiError::bad_request(
                    format!("top_logprobs must be between 0 and 20 (got {k})"),
                    Some("top_logprobs"),
                ));
            }
        },
        (_, Some(k)) if k > 0 => {
            return Err(ApiError::bad_request(
                "top_logprobs needs logprobs: true",
                Some("top_logprobs"),
            ));
        }
        _ => None,
    };
    let max_tokens = req.max_completion_tokens.or(req.common.max_tokens);
    let mut p = params::parse(
        &req.common,
        max_tokens,
        logprobs,
        tokenizer.vocab_size(),
        limits,
    )?;
    let messages = req
        .messages
        .ok_or_else(|| ApiError::bad_request("messages is required", Some("messages")))?;
    let opts = render_options(req.add_generation_prompt, req.continue_final_message)?;
    let fields = tools::ToolFields {
        tools: req.tools.as_ref(),
        tool_choice: req.tool_choice.as_ref(),
        parallel_tool_calls: req.parallel_tool_calls,
        chat_template_kwargs: req.chat_template_kwargs.as_ref(),
    };
    let (prompt, rendered_grammar, spec) =
        chat_prompt(tokenizer, template, messages, fields, &opts)?;
    if let Some(g) = rendered_grammar {
        if p.grammar.is_some() {
            return Err(ApiError::bad_request(
                "response_format cannot be combined with a required tool call",
                Some("response_format"),
            ));
        }
        p.grammar = Some(g);
    }
    Ok((p, (prompt, spec), logprobs))
}

/// The [`ChatRender`] options of a request: `add_generation_prompt` (default true) and
/// `continue_final_message` (default false; not both true).
pub(crate) fn render_options(
    add_generation_prompt: Option<bool>,
    continue_final_message: Option<bool>,
) -> Result<ChatRender, ApiError> {
    let continue_final_message = continue_final_message.unwrap_or(false);
    if continue_final_message && add_generation_prompt == Some(true) {
        return Err(ApiError::bad_request(
            "continue_final_message and add_generation_prompt cannot both be true",
            Some("continue_final_message"),
        ));
    }
    Ok(ChatRender {
        add_generation_prompt: add_generation_prompt.unwrap_or(!continue_final_message),
        continue_final_message,
    })
}

/// Renders `messages` with the model's chat template, the tool fields and `opts` applied:
/// the one render path of `/v1/chat/completions`, its `/render` and `/apply-template`.
/// `tokenizer` tells which markup is a control token (the reply splitter needs them).
pub(crate) fn render_chat(
    tokenizer: &Tokenizer,
    template: Option<&ChatTemplate>,
    messages: Vec<Value>,
    fields: tools::ToolFields<'_>,
    opts: &ChatRender,
) -> Result<tools::Rendered, ApiError> {
    let template = template.ok_or_else(|| {
        ApiError::bad_request(
            "this model has no chat template; use /v1/completions",
            Some("messages"),
        )
    })?;
    if messages.is_empty() {
        return Err(ApiError::bad_request("messages is empty", Some("messages")));
    }
    let messages = messages
        .into_iter()
        .map(normalize_message)
        .collect::<Result<Vec<_>, _>>()?;
    let control_id = |text: &str| {
        tokenizer
            .token_id(text)
            .filter(|&id| tokenizer.is_control(id))
    };
    tools::render(template, &control_id, messages, fields, opts)
}

/// [`render_chat`], tokenized: the prompt's ids, the grammar a required tool call is held
/// to, and how to split the reply.
fn chat_prompt(
    tokenizer: &Tokenizer,
    template: Option<&ChatTemplate>,
    messages: Vec<Value>,
    fields: tools::ToolFields<'_>,
    opts: &ChatRender,
) -> Result<RenderedChat, ApiError> {
    let rendered = render_chat(tokenizer, template, messages, fields, opts)?;
    let template = template.ok_or_else(|| {
        ApiError::bad_request("this model has no chat template", Some("messages"))
    })?;
    let ids = template
        .prompt_tokens(tokenizer, &rendered.text)
        .map_err(|e| {
            ApiError::bad_request(
                format!("cannot tokenize the messages: {e}"),
                Some("messages"),
            )
        })?;
    Ok((ids, rendered.grammar, rendered.spec))
}

/// The message roles OpenAI accepts.
const MESSAGE_ROLES: &[&str] = &[
    "system",
    "developer",
    "user",
    "assistant",
    "tool",
    "function",
];

/// Checks one message and flattens content parts (`[{"type":"text","text":…}]`) to a
/// string, as templates expect.
fn normalize_message(mut m: Value) -> Result<Value, ApiError> {
    let bad = |why: &str| ApiError::bad_request(why.to_string(), Some("messages"));
    let obj = m
        .as_object_mut()
        .ok_or_else(|| bad("every message must be an object"))?;
    match obj.get("role").and_then(Value::as_str) {
        None => return Err(bad("every message needs a string role")),
        Some(r) if !MESSAGE_ROLES.contains(&r) => {
            return Err(bad(&format!(
                "Invalid value: '{r}'. Supported values are: {}.",
                MESSAGE_ROLES
                    .iter()
                    .map(|r| format!("'{r}'"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        Some(_) => {}
    }
    if let Some(Value::Array(parts)) = obj.get("content") {
        let mut text = Vec::with_capacity(parts.len());
        for part in parts {
            match (part.get("type").and_then(Value::as_str), part.get("text")) {
                (Some("text"), Some(Value::String(t))) => text.push(t.clone()),
                (kind, _) => {
                    return Err(bad(&format!(
                        "content parts of type {} are not supported (text only)",
                        kind.unwrap_or("?")
                    )));
                }
            }
        }
        obj.insert("content".into(), Value::String(text.join("\n")));
    }
    Ok(m)
}

/// The engine requests of every choice, in order: (choice index, first choice of its
/// prompt, request). Generation submits them; the render endpoints show their prompts.
fn engine_requests(
    state: &AppState,
    b: &Backend,
    p: &Params,
    prompts: Vec<Vec<u32>>,
    param: &'static str,
) -> Result<Vec<(usize, bool, Request)>, ApiError> {
    let n_ctx = b.engine.config().n_ctx;
    let mut requests: Vec<(usize, bool, Request)> = Vec::new();
    for (pi, prompt) in prompts.into_iter().enumerate() {
        let rs = params::requests(p, prompt, n_ctx, state.config(), param)?;
        for (j, r) in rs.into_iter().enumerate() {
            requests.push((pi * p.n + j, j == 0, r));
        }
    }
    Ok(requests)
}

/// The answer of the render endpoints: the token ids the engine would be given, one entry
/// per prompt (the first prompt's also at the top level, as `prompt_token_ids` and as
/// `token_ids`, the name vLLM's render answer and vllm-router's `kv_aware` policy use).
fn rendered(b: &Backend, requests: Vec<(usize, bool, Request)>) -> Result<Response, ApiError> {
    let prompts: Vec<Value> = requests
        .into_iter()
        .filter(|(_, first, _)| *first)
        .map(|(_, _, r)| {
            serde_json::json!({ "num_tokens": r.prompt.len(), "prompt_token_ids": r.prompt })
        })
        .collect();
    let first = prompts
        .first()
        .map_or(Value::Null, |p| p["prompt_token_ids"].clone());
    Ok(axum::Json(serde_json::json!({
        "object": "render",
        "model": b.model_id,
        "token_ids": first.clone(),
        "prompt_token_ids": first,
        "prompts": prompts,
    }))
    .into_response())
}

/// `POST /v1/completions/render`: the request validated and tokenized exactly as
/// `/v1/completions` would (same code), answered with its token ids; nothing generated.
pub async fn completions_render(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let r = async {
        let bytes = body_bytes(body, state.config().max_body_bytes)?;
        let req: CompletionRequest = read_request(&bytes, Endpoint::Completions, state.config())?;
        let b = ready(&state)?;
        check_model(b, req.common.model.as_deref())?;
        let (p, prompts, _) = prepare_completion(req, &b.tokenizer, state.config())?;
        rendered(b, engine_requests(&state, b, &p, prompts, "prompt")?)
    }
    .await;
    finish(&state, r)
}

/// `POST /v1/chat/completions/render`: the messages rendered with the chat template and
/// tokenized exactly as `/v1/chat/completions` would (same code); nothing generated.
pub async fn chat_render(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let r = async {
        let bytes = body_bytes(body, state.config().max_body_bytes)?;
        let req: ChatRequest = read_request(&bytes, Endpoint::Chat, state.config())?;
        let b = ready(&state)?;
        check_model(b, req.common.model.as_deref())?;
        let (p, (prompt, _), _) =
            prepare_chat(req, &b.tokenizer, b.template.as_deref(), state.config())?;
        rendered(b, engine_requests(&state, b, &p, vec![prompt], "messages")?)
    }
    .await;
    finish(&state, r)
}

/// Submits every choice and answers: a stream, or one body once all are done.
pub(crate) async fn respond(
    state: &AppState,
    b: &Backend,
    p: &Params,
    prompts: Vec<Vec<u32>>,
    ctx: StreamCtx,
    param: &'static str,
) -> Result<Response, ApiError> {
    let requests = engine_requests(state, b, p, prompts, param)?;
    // Held until the answer is sent (or its stream ends or is dropped).
    let slot = state.admit()?;
    // Submitted all or none: an error drops (cancels) the handles already made.
    let mut choices = Vec::with_capacity(requests.len());
    for (index, first_of_prompt, r) in requests {
        let prompt_tokens = r.prompt.len();
        let handle = b.engine.submit(r)?;
        choices.push(Choice {
            index,
            counts_prompt: first_of_prompt,
            prompt_tokens,
            handle,
        });
    }
    if p.stream {
        Ok(stream::sse(
            state.clone(),
            ctx,
            choices,
            p.include_usage,
            slot,
        ))
    } else {
        let r = collect(ctx, choices).await;
        drop(slot);
        r
    }
}

/// One finished choice.
struct Collected {
    index: usize,
    text: String,
    finish: FinishReason,
    out: stream::ChoiceOut,
    usage: kiln_engine::Usage,
    counts_prompt: bool,
}

async fn collect_one(ctx: &StreamCtx, c: Choice) -> Result<Collected, ApiError> {
    let mut text = String::new();
    let mut out = stream::ChoiceOut::default();
    let mut indent = (ctx.n_indent > 0).then(|| crate::fim::IndentLimit::new(ctx.n_indent));
    let mut generated = 0;
    loop {
        match c.handle.recv_async().await {
            Some(Event::Token {
                id,
                text: piece,
                logprob,
                top,
            }) => {
                ctx.record_logprobs(&mut out, text.len(), id, logprob, &top);
                match &ctx.output {
                    Some(spec) => text.push_str(spec.token_text(id, &piece)),
                    None => text.push_str(&piece),
                }
                generated += 1;
                if let Some(limit) = &mut indent
                    && limit.stops(&mut text, &piece)
                {
                    // Cut short as llama-server's "limit" stop; dropping the handle on
                    // return cancels the rest of the generation.
                    return Ok(Collected {
                        index: c.index,
                        text,
                        finish: FinishReason::Length,
                        out,
                        usage: kiln_engine::Usage {
                            prompt_tokens: c.prompt_tokens,
                            completion_tokens: generated,
                            cached_tokens: 0,
                        },
                        counts_prompt: c.counts_prompt,
                    });
                }
            }
            Some(Event::Done { finish, usage, .. }) => {
                if finish == FinishReason::Cancelled {
                    return Err(ApiError::unavailable(
                        "the request was cancelled because the server is shutting down",
                    ));
                }
                return Ok(Collected {
                    index: c.index,
                    text,
                    finish,
                    out,
                    usage,
                    counts_prompt: c.counts_prompt,
                });
            }
            Some(Event::Error(e)) => return Err(e.into()),
            None => {
                return Err(ApiError::internal(
                    "the engine stopped before the request ended",
                ));
            }
        }
    }
}

/// Waits for every choice (an error in one drops, and so cancels, the others).
async fn collect(ctx: StreamCtx, choices: Vec<Choice>) -> Result<Response, ApiError> {
    let mut done =
        futures_util::future::try_join_all(choices.into_iter().map(|c| collect_one(&ctx, c)))
            .await?;
    let mut usage = UsageJson::default();
    for c in &done {
        usage.add(&c.usage, c.counts_prompt);
    }
    done.sort_by_key(|c| c.index);
    let body = match ctx.kind {
        Kind::Completion => serde_json::to_string(&CompletionResponse {
            id: ctx.id.clone(),
            object: "text_completion",
            created: ctx.created,
            model: ctx.model.clone(),
            choices: done
                .into_iter()
                .map(|c| CompletionChoice {
                    index: c.index,
                    text: c.text,
                    logprobs: ctx.logprobs.then_some(c.out.completion),
                    finish_reason: Some(c.finish.as_str()),
                })
                .collect(),
            usage: Some(usage),
        }),
        Kind::Chat => serde_json::to_string(&ChatResponse {
            id: ctx.id.clone(),
            object: "chat.completion",
            created: ctx.created,
            model: ctx.model.clone(),
            choices: done
                .into_iter()
                .map(|c| {
                    let (message, finish_reason) =
                        tools::message(ctx.output.as_ref(), &c.text, c.finish);
                    ChatChoice {
                        index: c.index,
                        message,
                        logprobs: ctx.logprobs.then_some(c.out.chat),
                        finish_reason,
                    }
                })
                .collect(),
            usage,
        }),
    }
    .map_err(|e| ApiError::internal(format!("cannot encode the response: {e}")))?;
    Ok((
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response())
}

/// `GET /v1/models`: the served model and each other name a request may use for it, with
/// the context length (`max_model_len`, as vLLM lists it).
pub async fn models(State(state): State<AppState>) -> Response {
    let mut data = Vec::new();
    if let Some(b) = state.backend() {
        let max_model_len = b.engine.config().n_ctx;
        let card = |id: &str| ModelCard {
            id: id.to_string(),
            object: "model",
            created: state.0.created,
            owned_by: "kiln",
            root: b.model_id.clone(),
            parent: None,
            max_model_len,
        };
        data.push(card(&b.model_id));
        for a in &b.aliases {
            if !data.iter().any(|c: &ModelCard| &c.id == a) {
                let mut c = card(a);
                c.parent = Some(b.model_id.clone());
                data.push(c);
            }
        }
    }
    axum::Json(ModelList {
        object: "list",
        data,
    })
    .into_response()
}

/// `GET /health/live`: the process answers (200 even while loading or shutting down; a
/// liveness probe must not restart a replica that is draining).
pub async fn live() -> Response {
    axum::Json(serde_json::json!({ "status": "alive" })).into_response()
}

pub async fn health(State(state): State<AppState>) -> Response {
    let (status, word) = if state.is_leaving() {
        (StatusCode::SERVICE_UNAVAILABLE, "shutting_down")
    } else if state.backend().is_none() {
        (StatusCode::SERVICE_UNAVAILABLE, "loading")
    } else {
        (StatusCode::OK, "ok")
    };
    (status, axum::Json(serde_json::json!({ "status": word }))).into_response()
}

pub async fn metrics(State(state): State<AppState>) -> Response {
    let snapshot = state
        .backend()
        .map(|b| b.engine.metrics())
        .unwrap_or_default();
    // The engine's last published snapshot: a scrape never waits for a scheduler step.
    let mut text = crate::metrics::render(&snapshot, &state.counters(), state.backend().is_none());
    if state.config().metrics_compat == crate::metrics::MetricsCompat::Vllm {
        let model = state.backend().map_or("", |b| b.model_id.as_str());
        crate::metrics::render_vllm(&mut text, &snapshot, model);
    }
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

pub async fn not_found() -> Response {
    ApiError {
        status: StatusCode::NOT_FOUND,
        message: "no such endpoint (try /v1/completions, /v1/chat/completions, /v1/models, /health, /metrics, /v1/completions/render)".into(),
        kind: "invalid_request_error",
        param: None,
        code: Some("unknown_url"),
    }
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_content_parts_flatten_and_other_parts_are_refused() {
        let m = normalize_message(serde_json::json!({
            "role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]
        }))
        .unwrap();
        assert_eq!(m["content"], "a\nb");
        let e = normalize_message(serde_json::json!({
            "role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]
        }))
        .unwrap_err();
        assert!(e.message.contains("image_url"), "{}", e.message);
        assert!(normalize_message(serde_json::json!({"content":"x"})).is_err());
    }
}
