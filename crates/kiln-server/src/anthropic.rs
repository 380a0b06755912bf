//! Anthropic's Messages API: `POST /v1/messages` (one JSON body, or Anthropic's named SSE
//! events) and `POST /v1/messages/count_tokens`.
//!
//! A body is checked against the field list ([`crate::fields::ANTHROPIC_FIELDS`]), then
//! translated into a chat request (system, messages with `tool_use` / `tool_result`
//! blocks, tools, tool_choice, thinking) that the code of `/v1/chat/completions` prepares:
//! the same chat template, tool rendering and call grammar, sampling checks and context
//! check. The reply is split by the same splitter into `thinking`, `text` and `tool_use`
//! blocks. Every error is in Anthropic's shape
//! (`{"type":"error","error":{"type","message"}}`), with the status Anthropic uses.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream;
use kiln_engine::{Event, FinishReason, RequestHandle};
use kiln_tokenizer::Tokenizer;
use kiln_tokenizer::chat::ChatTemplate;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::fields::{self, Endpoint};
use crate::handlers::{body_bytes, check_model, finish_as, prepare_chat, ready};
use crate::params::{self, Params};
use crate::state::{AppState, Backend, InFlight, ServerConfig};
use crate::tools::deltas::CallDelta;
use crate::tools::split::{Piece, Splitter, split_all};
use crate::tools::{self, OutputSpec, ParsedCall};
use crate::wire::ChatRequest;

/// The body of `/v1/messages` (and, without the generation fields, of `count_tokens`),
/// after [`fields::check`] refused what is refused and rejected unknown fields.
#[derive(Debug, Default, Deserialize)]
struct MessagesRequest {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    max_tokens: Option<i64>,
    #[serde(default)]
    messages: Option<Vec<Value>>,
    #[serde(default)]
    system: Option<Value>,
    #[serde(default)]
    stop_sequences: Option<Vec<String>>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    temperature: Option<f32>,
    #[serde(default)]
    top_p: Option<f32>,
    #[serde(default)]
    top_k: Option<i64>,
    #[serde(default)]
    tools: Option<Value>,
    #[serde(default)]
    tool_choice: Option<Value>,
    #[serde(default)]
    thinking: Option<Value>,
}

fn bad(message: impl Into<String>, param: &'static str) -> ApiError {
    ApiError::bad_request(message, Some(param))
}

/// Anthropic's error `type` for a status.
fn error_kind(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        s if s >= 500 => "api_error",
        _ => "invalid_request_error",
    }
}

/// An error as Anthropic's body: `{"type":"error","error":{"type","message"}}`.
pub(crate) fn error_body(e: &ApiError) -> String {
    json!({
        "type": "error",
        "error": {"type": error_kind(e.status), "message": e.message},
    })
    .to_string()
}

/// An error as Anthropic's response (its status, its body).
pub(crate) fn error_response(e: &ApiError) -> Response {
    (
        e.status,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        error_body(e),
    )
        .into_response()
}

/// Whether a path is one of Anthropic's endpoints (its errors take Anthropic's shape, also
/// those the middleware answers: a missing key, a body too large or too slow).
fn is_anthropic_path(path: &str) -> bool {
    path == "/v1/messages" || path.starts_with("/v1/messages/")
}

/// The outermost middleware: on Anthropic's paths, an error in OpenAI's shape answered by
/// the layers inside (the API key check, the body limits and timeout) is rewritten in
/// Anthropic's shape, same status and message. Other paths and answers pass untouched.
pub(crate) async fn error_shape(req: Request, next: Next) -> Response {
    if !is_anthropic_path(req.uri().path()) {
        return next.run(req).await;
    }
    let resp = next.run(req).await;
    let status = resp.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, 1 << 16).await else {
        let e = ApiError::internal("cannot read the error being answered");
        return error_response(&e);
    };
    let openai = serde_json::from_slice::<Value>(&bytes)
        .ok()
        .filter(|v| v.get("type").is_none())
        .and_then(|v| v["error"]["message"].as_str().map(str::to_string));
    match openai {
        Some(message) => {
            parts.headers.remove(axum::http::header::CONTENT_LENGTH);
            let e = ApiError {
                status,
                message,
                kind: "invalid_request_error",
                param: None,
                code: None,
            };
            Response::from_parts(parts, axum::body::Body::from(error_body(&e)))
        }
        None => Response::from_parts(parts, axum::body::Body::from(bytes)),
    }
}

/// `system`: a string, or `text` blocks (joined with newlines).
fn system_text(v: Option<&Value>) -> Result<Option<String>, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Array(blocks)) => {
            let texts = blocks
                .iter()
                .enumerate()
                .map(|(i, b)| text_block(b, &format!("system.{i}"), "system"))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Some(texts.join("\n")))
        }
        Some(_) => Err(bad(
            "system: Input should be a string or a list of text blocks",
            "system",
        )),
    }
}

/// The text of a `text` block (`at` says where it is, for the message).
fn text_block(b: &Value, at: &str, param: &'static str) -> Result<String, ApiError> {
    match (b.get("type").and_then(Value::as_str), b.get("text")) {
        (Some("text"), Some(Value::String(t))) => Ok(t.clone()),
        (Some("text"), _) => Err(bad(format!("{at}.text: Field required"), param)),
        (kind, _) => Err(bad(
            format!(
                "{at}: content blocks of type {} are not supported here (text only)",
                kind.unwrap_or("?")
            ),
            param,
        )),
    }
}

/// A `tool_result`'s content: a string or `text` blocks; `is_error` prefixes "Error: ".
fn tool_result_text(b: &Value, at: &str) -> Result<String, ApiError> {
    let text = match b.get("content") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .enumerate()
            .map(|(k, c)| text_block(c, &format!("{at}.content.{k}"), "messages"))
            .collect::<Result<Vec<_>, _>>()?
            .join("\n"),
        Some(_) => {
            return Err(bad(
                format!("{at}.content: Input should be a string or a list of text blocks"),
                "messages",
            ));
        }
    };
    Ok(if b.get("is_error") == Some(&Value::Bool(true)) {
        format!("Error: {text}")
    } else {
        text
    })
}

/// Anthropic's messages as the chat messages the template renders: `system` first;
/// `tool_use` blocks become an assistant's `tool_calls`, `tool_result` blocks `tool`
/// messages (before the user's text of the same turn); `thinking` blocks of earlier turns
/// are dropped (as Anthropic drops them); any other block is a 400 naming what is supported.
fn chat_messages(system: Option<String>, messages: Vec<Value>) -> Result<Vec<Value>, ApiError> {
    let mut out = Vec::with_capacity(messages.len() + 1);
    if let Some(s) = system {
        out.push(json!({"role": "system", "content": s}));
    }
    for (i, m) in messages.into_iter().enumerate() {
        let role = match m.get("role").and_then(Value::as_str) {
            Some(r @ ("user" | "assistant")) => r,
            _ => {
                return Err(bad(
                    format!("messages.{i}.role: Input should be 'user' or 'assistant'"),
                    "messages",
                ));
            }
        };
        let blocks = match m.get("content") {
            Some(Value::String(s)) => {
                out.push(json!({"role": role, "content": s}));
                continue;
            }
            Some(Value::Array(b)) => b,
            _ => {
                return Err(bad(
                    format!(
                        "messages.{i}.content: Input should be a string or a list of content blocks"
                    ),
                    "messages",
                ));
            }
        };
        let mut texts = Vec::new();
        let mut calls = Vec::new();
        let mut results = Vec::new();
        for (j, b) in blocks.iter().enumerate() {
            let at = format!("messages.{i}.content.{j}");
            match (role, b.get("type").and_then(Value::as_str)) {
                (_, Some("text")) => texts.push(text_block(b, &at, "messages")?),
                ("assistant", Some("tool_use")) => {
                    let id = b.get("id").and_then(Value::as_str);
                    let name = b.get("name").and_then(Value::as_str);
                    let (Some(id), Some(name)) = (id, name) else {
                        return Err(bad(
                            format!("{at}: a tool_use block needs a string id and name"),
                            "messages",
                        ));
                    };
                    let input = b.get("input").cloned().unwrap_or_else(|| json!({}));
                    calls.push(json!({"id": id, "type": "function",
                        "function": {"name": name, "arguments": input.to_string()}}));
                }
                ("user", Some("tool_result")) => {
                    let id = b
                        .get("tool_use_id")
                        .and_then(Value::as_str)
                        .ok_or_else(|| {
                            bad(format!("{at}.tool_use_id: Field required"), "messages")
                        })?;
                    let content = tool_result_text(b, &at)?;
                    results.push(json!({"role": "tool", "tool_call_id": id, "content": content}));
                }
                ("assistant", Some("thinking" | "redacted_thinking")) => {}
                (_, kind) => {
                    return Err(bad(
                        format!(
                            "{at}: content blocks of type {} are not supported in {role} messages (supported: text{})",
                            kind.unwrap_or("?"),
                            if role == "user" {
                                ", tool_result"
                            } else {
                                ", tool_use, thinking"
                            }
                        ),
                        "messages",
                    ));
                }
            }
        }
        out.extend(results.iter().cloned());
        let text = texts.join("\n");
        if !calls.is_empty() {
            let content = if text.is_empty() {
                Value::Null
            } else {
                Value::String(text)
            };
            out.push(json!({"role": "assistant", "content": content, "tool_calls": calls}));
        } else if !text.is_empty() || results.is_empty() {
            out.push(json!({"role": role, "content": text}));
        }
    }
    Ok(out)
}

/// `tools`: Anthropic's custom tools as OpenAI's functions.
fn chat_tools(v: &Value) -> Result<Value, ApiError> {
    let Some(list) = v.as_array() else {
        return Err(bad("tools: Input should be a list", "tools"));
    };
    let mut out = Vec::with_capacity(list.len());
    for (i, t) in list.iter().enumerate() {
        match t.get("type").and_then(Value::as_str) {
            None | Some("custom") => {}
            Some(other) => {
                return Err(bad(
                    format!(
                        "tools.{i}: tools of type {other} (Anthropic's server tools) are not supported; custom tools with name, description and input_schema are"
                    ),
                    "tools",
                ));
            }
        }
        let name = t
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| bad(format!("tools.{i}.name: Field required"), "tools"))?;
        let schema = t
            .get("input_schema")
            .filter(|s| s.is_object())
            .ok_or_else(|| {
                bad(
                    format!("tools.{i}.input_schema: a JSON schema object is required"),
                    "tools",
                )
            })?;
        let mut function = json!({"name": name, "parameters": schema});
        if let Some(d) = t.get("description").filter(|d| !d.is_null()) {
            function["description"] = d.clone();
        }
        out.push(json!({"type": "function", "function": function}));
    }
    Ok(Value::Array(out))
}

/// `tool_choice` as OpenAI's, and whether one reply may hold several calls
/// (`disable_parallel_tool_use`).
fn chat_tool_choice(v: Option<&Value>) -> Result<(Option<Value>, Option<bool>), ApiError> {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok((None, None));
    };
    let invalid = || {
        bad(
            "tool_choice: must be {\"type\":\"auto\"}, {\"type\":\"any\"}, {\"type\":\"tool\",\"name\":…} or {\"type\":\"none\"}",
            "tool_choice",
        )
    };
    let choice = match v.get("type").and_then(Value::as_str) {
        Some("auto") => json!("auto"),
        Some("any") => json!("required"),
        Some("none") => json!("none"),
        Some("tool") => {
            let name = v.get("name").and_then(Value::as_str).ok_or_else(invalid)?;
            json!({"type": "function", "function": {"name": name}})
        }
        _ => return Err(invalid()),
    };
    let parallel = match v.get("disable_parallel_tool_use") {
        None | Some(Value::Null) => None,
        Some(Value::Bool(b)) => Some(!b),
        Some(_) => {
            return Err(bad(
                "tool_choice.disable_parallel_tool_use: Input should be a boolean",
                "tool_choice",
            ));
        }
    };
    Ok((Some(choice), parallel))
}

/// `thinking`: `Some(true)` enabled, `Some(false)` disabled.
fn thinking(v: Option<&Value>) -> Result<Option<bool>, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(t) => match t.get("type").and_then(Value::as_str) {
            Some("enabled") => Ok(Some(true)),
            Some("disabled") => Ok(Some(false)),
            _ => Err(bad(
                "thinking: must be {\"type\":\"enabled\",\"budget_tokens\":…} or {\"type\":\"disabled\"}",
                "thinking",
            )),
        },
    }
}

/// A request prepared for the engine: settings, prompt ids, and how to split the reply.
struct Prepared {
    params: Params,
    prompt: Vec<u32>,
    spec: Arc<OutputSpec>,
}

/// Whether `model` names the backend (absent: yes); else 404.
/// Translates a checked body to a chat request and prepares it as `/v1/chat/completions`
/// does. `generation`: `/v1/messages` (`max_tokens` required) rather than `count_tokens`.
fn prepare(
    req: MessagesRequest,
    tokenizer: &Tokenizer,
    template: Option<&ChatTemplate>,
    limits: &ServerConfig,
    generation: bool,
) -> Result<Prepared, ApiError> {
    if generation && req.max_tokens.is_none() {
        return Err(bad("max_tokens: Field required", "max_tokens"));
    }
    if let Some(t) = req.temperature
        && !(0.0..=1.0).contains(&t)
    {
        return Err(bad(
            format!("temperature: must be between 0 and 1 (got {t})"),
            "temperature",
        ));
    }
    let messages = req
        .messages
        .ok_or_else(|| bad("messages: Field required", "messages"))?;
    if messages.is_empty() {
        return Err(bad(
            "messages: at least one message is required",
            "messages",
        ));
    }
    let messages = chat_messages(system_text(req.system.as_ref())?, messages)?;
    let tools = req.tools.as_ref().map(chat_tools).transpose()?;
    let (tool_choice, parallel) = chat_tool_choice(req.tool_choice.as_ref())?;
    let thinking = thinking(req.thinking.as_ref())?;
    let mut chat = json!({
        "messages": messages,
        "max_tokens": req.max_tokens,
        "temperature": req.temperature,
        "top_p": req.top_p,
        "top_k": req.top_k,
        "stop": req.stop_sequences,
        "stream": req.stream,
        "tools": tools,
        "tool_choice": tool_choice,
        "parallel_tool_calls": parallel,
    });
    if let Some(t) = thinking {
        chat["chat_template_kwargs"] = json!({ "enable_thinking": t });
    }
    let chat: ChatRequest = serde_json::from_value(chat)
        .map_err(|e| ApiError::internal(format!("cannot build the chat request: {e}")))?;
    let (params, (prompt, spec), _) =
        prepare_chat(chat, tokenizer, template, limits).map_err(|mut e| {
            // The chat code names OpenAI's field; the client sent Anthropic's.
            if e.param == Some("stop") {
                e.param = Some("stop_sequences");
                e.message = e.message.replace("stop strings", "stop_sequences");
            }
            e
        })?;
    if thinking == Some(true) && !spec.think {
        return Err(bad(
            "thinking: this model's chat template writes no reasoning blocks; only {\"type\":\"disabled\"} is accepted",
            "thinking",
        ));
    }
    Ok(Prepared {
        params,
        prompt,
        spec,
    })
}

/// What [`crate::fuzzing::parse_request`] runs for Anthropic's endpoints: the body read,
/// checked and prepared as the handler does (everything but the model name), the settings
/// and the prompt ids.
pub(crate) fn parse_for_fuzzing(
    endpoint: Endpoint,
    body: &[u8],
    tokenizer: &Tokenizer,
    template: Option<&ChatTemplate>,
    limits: &ServerConfig,
) -> Result<(Params, Vec<u32>), ApiError> {
    let req = read(body, endpoint, limits)?;
    let p = prepare(
        req,
        tokenizer,
        template,
        limits,
        endpoint == Endpoint::Messages,
    )?;
    Ok((p.params, p.prompt))
}

/// Parses and checks a body against the field list of `endpoint`.
fn read(
    bytes: &[u8],
    endpoint: Endpoint,
    limits: &ServerConfig,
) -> Result<MessagesRequest, ApiError> {
    let mut v: Value = serde_json::from_slice(bytes).map_err(|e| {
        ApiError::bad_request(format!("the request body is not valid JSON: {e}"), None)
    })?;
    fields::check(endpoint, &mut v, limits.lenient_params)?;
    serde_json::from_value(v)
        .map_err(|e| ApiError::bad_request(format!("the request body does not parse: {e}"), None))
}

/// Counts the answer's class and answers errors in Anthropic's shape.
fn finish(state: &AppState, r: Result<Response, ApiError>) -> Response {
    finish_as(state, r, |e| error_response(&e))
}

/// The body read, checked against `endpoint`'s field list and prepared as a chat request
/// (`generation`: for `/v1/messages`), with the backend that serves it.
fn read_prepared(
    state: &AppState,
    body: Result<Bytes, BytesRejection>,
    endpoint: Endpoint,
    generation: bool,
) -> Result<(&Backend, Prepared), ApiError> {
    let bytes = body_bytes(body, state.config().max_body_bytes)?;
    let req = read(&bytes, endpoint, state.config())?;
    let b = ready(state)?;
    check_model(b, req.model.as_deref())?;
    let p = prepare(
        req,
        &b.tokenizer,
        b.template.as_deref(),
        state.config(),
        generation,
    )?;
    Ok((b, p))
}

/// `POST /v1/messages/count_tokens`: `{"input_tokens": N}`, the prompt `/v1/messages`
/// would give the engine for the same body (nothing generated).
pub async fn count_tokens(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    state.count(|c| c.http_requests += 1);
    let r = count_tokens_inner(&state, body);
    finish(&state, r)
}

fn count_tokens_inner(
    state: &AppState,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let (_, p) = read_prepared(state, body, Endpoint::CountTokens, false)?;
    Ok(axum::Json(json!({ "input_tokens": p.prompt.len() })).into_response())
}

/// `POST /v1/messages`.
pub async fn messages(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    state.count(|c| c.http_requests += 1);
    let r = messages_inner(&state, body).await;
    finish(&state, r)
}

async fn messages_inner(
    state: &AppState,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let (b, p) = read_prepared(state, body, Endpoint::Messages, true)?;
    let input_tokens = p.prompt.len();
    let n_ctx = b.engine.config().n_ctx;
    let request = params::requests(&p.params, p.prompt, n_ctx, state.config(), "messages")?
        .into_iter()
        .next()
        .ok_or_else(|| ApiError::internal("no engine request was made"))?;
    let slot = state.admit()?;
    let handle = b.engine.submit(request)?;
    let reply = Reply {
        id: format!("msg_{}", state.next_id()),
        model: b.model_id.clone(),
        input_tokens,
        stops: p.params.stop.clone(),
        tokenizer: Arc::clone(&b.tokenizer),
        spec: p.spec,
    };
    if p.params.stream {
        Ok(sse(state.clone(), reply, handle, slot))
    } else {
        let body = collect(&reply, handle).await?;
        drop(slot);
        Ok((
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            body.to_string(),
        )
            .into_response())
    }
}

/// What an answer needs besides the tokens.
struct Reply {
    id: String,
    model: String,
    input_tokens: usize,
    stops: Vec<String>,
    tokenizer: Arc<Tokenizer>,
    spec: Arc<OutputSpec>,
}

/// The generated tokens' ids and the text the engine released for them (stop strings
/// held back), to tell which stop sequence ended a reply.
#[derive(Default)]
struct Generated {
    ids: Vec<u32>,
    released: String,
}

impl Reply {
    /// `stop_reason` and `stop_sequence` of a reply that ended with `finish`.
    fn stop(
        &self,
        finish: FinishReason,
        has_calls: bool,
        g: &Generated,
    ) -> (&'static str, Option<String>) {
        match finish {
            FinishReason::Length => ("max_tokens", None),
            _ if has_calls => ("tool_use", None),
            _ => {
                let eog = g.ids.last().is_some_and(|&id| self.tokenizer.is_eog(id));
                if eog || self.stops.is_empty() {
                    return ("end_turn", None);
                }
                let mut bytes = Vec::new();
                for &id in &g.ids {
                    bytes.extend_from_slice(self.tokenizer.token_bytes(id));
                }
                match matched_stop(&self.stops, &g.released, &String::from_utf8_lossy(&bytes)) {
                    Some(s) => ("stop_sequence", Some(s)),
                    None => ("end_turn", None),
                }
            }
        }
    }

    fn usage(&self, output_tokens: usize) -> Value {
        json!({"input_tokens": self.input_tokens, "output_tokens": output_tokens})
    }
}

/// Which of `stops` ended a reply whose released text is `released` and whose tokens
/// spell `generated`: the one right where the released text ends, else the first one met.
fn matched_stop(stops: &[String], released: &str, generated: &str) -> Option<String> {
    if let Some(rest) = generated.get(released.len()..)
        && let Some(s) = stops.iter().find(|s| rest.starts_with(s.as_str()))
    {
        return Some(s.clone());
    }
    stops
        .iter()
        .filter_map(|s| generated.find(s.as_str()).map(|at| (at, s)))
        .min_by_key(|&(at, _)| at)
        .map(|(_, s)| s.clone())
}

/// A fresh `tool_use` id, `toolu_` and 24 letters and digits.
fn tool_use_id() -> String {
    let id = tools::call_id();
    format!("toolu_{}", id.strip_prefix("call_").unwrap_or(&id))
}

/// A call's `input` object (its arguments parse: the splitter returns only calls that do).
fn call_input(c: &ParsedCall) -> Value {
    serde_json::from_str(&c.arguments).unwrap_or_else(|_| json!({}))
}

/// The content blocks of a whole reply: `thinking`, `text` (unless empty, or only
/// whitespace before calls), then one `tool_use` per call.
fn content_blocks(reasoning: Option<String>, text: String, calls: &[ParsedCall]) -> Vec<Value> {
    let mut out = Vec::new();
    if let Some(r) = reasoning.filter(|r| !r.is_empty()) {
        out.push(json!({"type": "thinking", "thinking": r, "signature": ""}));
    }
    if !text.is_empty() && (calls.is_empty() || !text.trim().is_empty()) {
        out.push(json!({"type": "text", "text": text}));
    }
    for c in calls {
        out.push(
            json!({"type": "tool_use", "id": tool_use_id(), "name": c.name,
            "input": call_input(c)}),
        );
    }
    out
}

/// Waits for the whole reply and answers one `message`.
async fn collect(reply: &Reply, handle: RequestHandle) -> Result<Value, ApiError> {
    let mut g = Generated::default();
    let mut text = String::new();
    loop {
        match handle.recv_async().await {
            Some(Event::Token {
                id, text: piece, ..
            }) => {
                g.ids.push(id);
                g.released.push_str(&piece);
                text.push_str(reply.spec.token_text(id, &piece));
            }
            Some(Event::Done { finish, usage, .. }) => {
                if finish == FinishReason::Cancelled {
                    return Err(ApiError::unavailable(
                        "the request was cancelled because the server is shutting down",
                    ));
                }
                let (reasoning, content, calls) = split_all(&reply.spec, &text);
                let (stop_reason, stop_sequence) = reply.stop(finish, !calls.is_empty(), &g);
                return Ok(json!({
                    "id": reply.id,
                    "type": "message",
                    "role": "assistant",
                    "model": reply.model,
                    "content": content_blocks(reasoning, content, &calls),
                    "stop_reason": stop_reason,
                    "stop_sequence": stop_sequence,
                    "usage": reply.usage(usage.completion_tokens),
                }));
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

/// The kind of the open content block of a stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Open {
    Text,
    Thinking,
    /// A `tool_use` block: the call's index among the reply's calls.
    Tool(usize),
}

/// Anthropic's stream events for one reply, in order: `message_start` and a `ping`, then
/// each content block as `content_block_start`, `content_block_delta`s and
/// `content_block_stop`, then `message_delta` (stop reason, usage) and `message_stop`.
#[derive(Debug, Default)]
struct Events {
    out: VecDeque<(&'static str, Value)>,
    /// The index of the next block.
    next: usize,
    open: Option<Open>,
}

impl Events {
    fn start(reply: &Reply) -> Events {
        let mut e = Events::default();
        e.push(
            "message_start",
            json!({"type": "message_start", "message": {
                "id": reply.id, "type": "message", "role": "assistant", "content": [],
                "model": reply.model, "stop_reason": null, "stop_sequence": null,
                "usage": reply.usage(0),
            }}),
        );
        e.push("ping", json!({"type": "ping"}));
        e
    }

    fn push(&mut self, name: &'static str, data: Value) {
        self.out.push_back((name, data));
    }

    fn close(&mut self) {
        if self.open.take().is_some() {
            self.push(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": self.next - 1}),
            );
        }
    }

    fn open(&mut self, kind: Open) {
        if self.open == Some(kind) {
            return;
        }
        self.close();
        let block = match kind {
            Open::Text => json!({"type": "text", "text": ""}),
            Open::Thinking => json!({"type": "thinking", "thinking": "", "signature": ""}),
            // Tool blocks are opened by `call` (they carry a name).
            Open::Tool(_) => return,
        };
        self.push(
            "content_block_start",
            json!({"type": "content_block_start", "index": self.next, "content_block": block}),
        );
        self.next += 1;
        self.open = Some(kind);
    }

    /// Released text: a delta of the open block of its kind.
    fn piece(&mut self, p: Piece) {
        let (kind, delta) = match p {
            Piece::Content(t) if !t.is_empty() => {
                (Open::Text, json!({"type": "text_delta", "text": t}))
            }
            Piece::Reasoning(t) if !t.is_empty() => (
                Open::Thinking,
                json!({"type": "thinking_delta", "thinking": t}),
            ),
            _ => return,
        };
        self.open(kind);
        self.push(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": self.next - 1, "delta": delta}),
        );
    }

    /// A piece of a call: a new `tool_use` block (its name), or more of its input JSON
    /// as an `input_json_delta`, forwarded as the model generates it.
    fn call(&mut self, d: CallDelta) {
        match d {
            CallDelta::Start { index, name } => {
                self.close();
                self.push(
                    "content_block_start",
                    json!({"type": "content_block_start", "index": self.next, "content_block":
                        {"type": "tool_use", "id": tool_use_id(), "name": name, "input": {}}}),
                );
                self.next += 1;
                self.open = Some(Open::Tool(index));
            }
            CallDelta::Arguments { index, text } => {
                if self.open != Some(Open::Tool(index)) {
                    // Only the open call's input can grow (calls arrive in order).
                    return;
                }
                self.push(
                    "content_block_delta",
                    json!({"type": "content_block_delta", "index": self.next - 1, "delta":
                        {"type": "input_json_delta", "partial_json": text}}),
                );
            }
        }
    }

    /// The end: the open block closed, then `message_delta` and `message_stop`.
    fn end(&mut self, stop_reason: &str, stop_sequence: Option<String>, output_tokens: usize) {
        self.close();
        self.push(
            "message_delta",
            json!({"type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
                "usage": {"output_tokens": output_tokens}}),
        );
        self.push("message_stop", json!({"type": "message_stop"}));
    }

    /// An error mid-stream: Anthropic's `error` event.
    fn error(&mut self, e: &ApiError) {
        self.push(
            "error",
            json!({"type": "error", "error": {"type": error_kind(e.status), "message": e.message}}),
        );
    }
}

/// A streamed reply in progress.
struct StreamState {
    state: AppState,
    reply: Reply,
    handle: RequestHandle,
    events: Events,
    splitter: Option<Splitter>,
    generated: Generated,
    finished: bool,
    /// The request's slot under `max_concurrent_requests`, freed with the stream.
    _slot: InFlight,
}

impl StreamState {
    fn on_event(&mut self, ev: Option<Event>) {
        match ev {
            Some(Event::Token { id, text, .. }) => {
                self.generated.ids.push(id);
                self.generated.released.push_str(&text);
                let mut pieces = Vec::new();
                let mut deltas = Vec::new();
                if let Some(sp) = &mut self.splitter {
                    sp.push(self.reply.spec.token_text(id, &text), &mut pieces);
                    deltas = sp.take_deltas();
                }
                for p in pieces {
                    self.events.piece(p);
                }
                for d in deltas {
                    self.events.call(d);
                }
            }
            Some(Event::Done { finish, usage, .. }) => {
                self.finished = true;
                if finish == FinishReason::Cancelled {
                    self.events.error(&ApiError::unavailable(
                        "the request was cancelled because the server is shutting down",
                    ));
                    return;
                }
                let mut pieces = Vec::new();
                let (calls, deltas) = self
                    .splitter
                    .take()
                    .map(|sp| sp.finish_streamed(&mut pieces))
                    .unwrap_or_default();
                for p in pieces {
                    self.events.piece(p);
                }
                for d in deltas {
                    self.events.call(d);
                }
                let (reason, seq) = self.reply.stop(finish, !calls.is_empty(), &self.generated);
                self.events.end(reason, seq, usage.completion_tokens);
            }
            Some(Event::Error(e)) => {
                self.finished = true;
                let e = ApiError::from(e);
                self.state.count_error(&e, true);
                self.events.error(&e);
            }
            None => {
                self.finished = true;
                self.events.error(&ApiError::internal(
                    "the engine stopped before the request ended",
                ));
            }
        }
    }
}

impl Drop for StreamState {
    fn drop(&mut self) {
        if !self.finished {
            self.state.count(|c| c.client_disconnects += 1);
        }
    }
}

/// The streaming response: Anthropic's named events (`event: NAME` and `data: {json}`).
fn sse(state: AppState, reply: Reply, handle: RequestHandle, slot: InFlight) -> Response {
    let st = StreamState {
        state,
        events: Events::start(&reply),
        splitter: Some(Splitter::new(Arc::clone(&reply.spec))),
        reply,
        handle,
        generated: Generated::default(),
        finished: false,
        _slot: slot,
    };
    let events = stream::unfold(st, |mut st| async move {
        loop {
            if let Some((name, data)) = st.events.out.pop_front() {
                let ev = SseEvent::default().event(name).data(data.to_string());
                return Some((Ok::<_, Infallible>(ev), st));
            }
            if st.finished {
                return None;
            }
            let ev = st.handle.recv_async().await;
            st.on_event(ev);
        }
    });
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_blocks_tool_use_and_tool_results_become_chat_messages() {
        let system = system_text(Some(&json!([{"type":"text","text":"Be concise."},
            {"type":"text","text":"Be kind."}])))
        .unwrap();
        let msgs = chat_messages(
            system,
            vec![
                json!({"role":"user","content":"Weather in Paris?"}),
                json!({"role":"assistant","content":[
                    {"type":"thinking","thinking":"hmm","signature":"s"},
                    {"type":"text","text":"Let me check."},
                    {"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Paris"}}]}),
                json!({"role":"user","content":[
                    {"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"18C"}]},
                    {"type":"text","text":"And tomorrow?"}]}),
            ],
        )
        .unwrap();
        assert_eq!(
            msgs,
            vec![
                json!({"role":"system","content":"Be concise.\nBe kind."}),
                json!({"role":"user","content":"Weather in Paris?"}),
                json!({"role":"assistant","content":"Let me check.","tool_calls":[{"id":"toolu_1",
                    "type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]}),
                json!({"role":"tool","tool_call_id":"toolu_1","content":"18C"}),
                json!({"role":"user","content":"And tomorrow?"}),
            ]
        );
        // A turn that is only tool results adds no empty user message; an error is marked.
        let msgs = chat_messages(
            None,
            vec![json!({"role":"user","content":[
                {"type":"tool_result","tool_use_id":"t","content":"boom","is_error":true}]})],
        )
        .unwrap();
        assert_eq!(
            msgs,
            vec![json!({"role":"tool","tool_call_id":"t","content":"Error: boom"})]
        );
    }

    #[test]
    fn images_and_unknown_roles_are_refused_naming_what_is_supported() {
        let e = chat_messages(
            None,
            vec![
                json!({"role":"user","content":[{"type":"image","source":{"type":"base64",
                "media_type":"image/png","data":"AAAA"}}]}),
            ],
        )
        .unwrap_err();
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert!(
            e.message.contains("image") && e.message.contains("text, tool_result"),
            "{}",
            e.message
        );
        let e = chat_messages(None, vec![json!({"role":"system","content":"x"})]).unwrap_err();
        assert!(e.message.contains("'user' or 'assistant'"), "{}", e.message);
        let e = chat_messages(
            None,
            vec![json!({"role":"assistant","content":[{"type":"tool_result","tool_use_id":"t"}]})],
        )
        .unwrap_err();
        assert!(e.message.contains("tool_result"), "{}", e.message);
        assert!(system_text(Some(&json!([{"type":"image"}]))).is_err());
    }

    #[test]
    fn tools_and_tool_choice_translate_and_server_tools_are_refused() {
        let t = chat_tools(&json!([{"name":"f","description":"d",
            "input_schema":{"type":"object"}}]))
        .unwrap();
        assert_eq!(
            t,
            json!([{"type":"function","function":{"name":"f","description":"d",
                "parameters":{"type":"object"}}}])
        );
        let e =
            chat_tools(&json!([{"type":"web_search_20250305","name":"web_search"}])).unwrap_err();
        assert!(e.message.contains("web_search_20250305"), "{}", e.message);
        assert!(chat_tools(&json!([{"name":"f"}])).is_err());
        for (given, want, parallel) in [
            (json!({"type":"auto"}), json!("auto"), None),
            (
                json!({"type":"any","disable_parallel_tool_use":true}),
                json!("required"),
                Some(false),
            ),
            (json!({"type":"none"}), json!("none"), None),
            (
                json!({"type":"tool","name":"f"}),
                json!({"type":"function","function":{"name":"f"}}),
                None,
            ),
        ] {
            assert_eq!(
                chat_tool_choice(Some(&given)).unwrap(),
                (Some(want), parallel),
                "{given}"
            );
        }
        assert!(chat_tool_choice(Some(&json!({"type":"required"}))).is_err());
        assert!(chat_tool_choice(Some(&json!({"type":"tool"}))).is_err());
        assert_eq!(
            thinking(Some(&json!({"type":"disabled"}))).unwrap(),
            Some(false)
        );
        assert!(thinking(Some(&json!({"type":"sometimes"}))).is_err());
    }

    #[test]
    fn errors_have_anthropics_shape_and_type_by_status() {
        let e = ApiError::bad_request("max_tokens: Field required", Some("max_tokens"));
        let v: Value = serde_json::from_str(&error_body(&e)).unwrap();
        assert_eq!(
            v,
            json!({"type":"error","error":{"type":"invalid_request_error",
                "message":"max_tokens: Field required"}})
        );
        for (status, kind) in [
            (401, "authentication_error"),
            (404, "not_found_error"),
            (413, "request_too_large"),
            (429, "rate_limit_error"),
            (500, "api_error"),
            (503, "overloaded_error"),
        ] {
            assert_eq!(error_kind(StatusCode::from_u16(status).unwrap()), kind);
        }
        assert!(is_anthropic_path("/v1/messages"));
        assert!(is_anthropic_path("/v1/messages/count_tokens"));
        assert!(!is_anthropic_path("/v1/messagesx"));
    }

    #[test]
    fn the_stop_sequence_met_is_the_one_where_the_released_text_ends() {
        let stops = vec!["b".to_string(), "cd".to_string()];
        assert_eq!(matched_stop(&stops, "xa", "xacd").as_deref(), Some("cd"));
        assert_eq!(matched_stop(&stops, "xa", "xabcd").as_deref(), Some("b"));
        // Released text that does not line up: the first one met.
        assert_eq!(
            matched_stop(&stops, "zzzzzz", "cd b").as_deref(),
            Some("cd")
        );
        assert_eq!(matched_stop(&stops, "x", "xy"), None);
    }

    fn names(e: &Events) -> Vec<&'static str> {
        e.out.iter().map(|(n, _)| *n).collect()
    }

    #[test]
    fn stream_events_come_in_anthropics_order_with_their_shapes() {
        let mut e = Events::default();
        e.piece(Piece::Reasoning("think".into()));
        e.piece(Piece::Content("Hel".into()));
        e.piece(Piece::Content(String::new()));
        e.piece(Piece::Content("lo".into()));
        e.call(CallDelta::Start {
            index: 0,
            name: "f".into(),
        });
        for text in [r#"{"a":"#, "1}"] {
            e.call(CallDelta::Arguments {
                index: 0,
                text: text.into(),
            });
        }
        e.end("tool_use", None, 7);
        assert_eq!(
            names(&e),
            [
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop",
            ]
        );
        let d: Vec<&Value> = e.out.iter().map(|(_, d)| d).collect();
        assert_eq!(
            *d[0],
            json!({"type":"content_block_start","index":0,
                "content_block":{"type":"thinking","thinking":"","signature":""}})
        );
        assert_eq!(
            *d[1],
            json!({"type":"content_block_delta","index":0,
                "delta":{"type":"thinking_delta","thinking":"think"}})
        );
        assert_eq!(*d[2], json!({"type":"content_block_stop","index":0}));
        assert_eq!(
            *d[3],
            json!({"type":"content_block_start","index":1,
                "content_block":{"type":"text","text":""}})
        );
        assert_eq!(
            *d[5],
            json!({"type":"content_block_delta","index":1,
                "delta":{"type":"text_delta","text":"lo"}})
        );
        assert_eq!(d[7]["content_block"]["type"], "tool_use");
        assert_eq!(d[7]["content_block"]["name"], "f");
        assert_eq!(d[7]["content_block"]["input"], json!({}));
        assert!(
            d[7]["content_block"]["id"]
                .as_str()
                .unwrap()
                .starts_with("toolu_")
        );
        assert_eq!(
            *d[8],
            json!({"type":"content_block_delta","index":2,
                "delta":{"type":"input_json_delta","partial_json":"{\"a\":"}})
        );
        assert_eq!(d[9]["delta"]["partial_json"], "1}");
        assert_eq!(*d[10], json!({"type":"content_block_stop","index":2}));
        assert_eq!(
            *d[11],
            json!({"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},
                "usage":{"output_tokens":7}})
        );
        assert_eq!(*d[12], json!({"type":"message_stop"}));
    }

    #[test]
    fn an_empty_reply_streams_no_content_block() {
        let mut e = Events::default();
        e.end("max_tokens", None, 3);
        assert_eq!(names(&e), ["message_delta", "message_stop"]);
    }

    #[test]
    fn whole_replies_become_thinking_text_and_tool_use_blocks() {
        let calls = vec![ParsedCall {
            name: "f".into(),
            arguments: r#"{"a":1}"#.into(),
        }];
        let b = content_blocks(Some("r".into()), "\n".into(), &calls);
        assert_eq!(b.len(), 2, "{b:?}");
        assert_eq!(b[0]["type"], "thinking");
        assert_eq!(b[1]["type"], "tool_use");
        assert_eq!(b[1]["input"], json!({"a":1}));
        let b = content_blocks(None, "Hi".into(), &[]);
        assert_eq!(b, vec![json!({"type":"text","text":"Hi"})]);
        assert!(content_blocks(Some(String::new()), String::new(), &[]).is_empty());
    }
}
