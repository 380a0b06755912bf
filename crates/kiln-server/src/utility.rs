//! llama-server's utility endpoints, with its request and response shapes: `/tokenize`,
//! `/detokenize` and `/apply-template`. They need the model's tokenizer (and template) but
//! no engine, so they are not counted as generation requests.

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::handlers::{parse_json, render_chat};
use crate::state::{AppState, Backend};
use crate::tools::ToolFields;

fn backend(state: &AppState) -> Result<&Backend, ApiError> {
    state
        .backend()
        .ok_or_else(|| ApiError::unavailable("the model is still loading; retry shortly"))
}

fn body(state: &AppState, body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    body.map_err(|r| {
        if r.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::too_large(state.config().max_body_bytes)
        } else {
            ApiError::bad_request(format!("cannot read the request body: {r}"), None)
        }
    })
}

fn answer(r: Result<Value, ApiError>) -> Response {
    match r {
        Ok(v) => Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenizeRequest {
    content: String,
    #[serde(default)]
    add_special: bool,
    #[serde(default = "yes")]
    parse_special: bool,
    #[serde(default)]
    with_pieces: bool,
}

fn yes() -> bool {
    true
}

/// `POST /tokenize`: `{"content", "add_special": false, "parse_special": true,
/// "with_pieces": false}` → `{"tokens": [ids]}`, or with pieces `{"tokens": [{"id",
/// "piece"}]}` (a piece that is not whole UTF-8 is its byte values).
pub async fn tokenize(State(state): State<AppState>, b: Result<Bytes, BytesRejection>) -> Response {
    answer((|| {
        let req: TokenizeRequest = parse_json(&body(&state, b)?)?;
        let be = backend(&state)?;
        let ids = be
            .tokenizer
            .encode(&req.content, req.add_special, req.parse_special)
            .map_err(|e| ApiError::bad_request(format!("cannot tokenize: {e}"), Some("content")))?;
        let tokens: Vec<Value> = if req.with_pieces {
            ids.iter()
                .map(|&id| {
                    let bytes = be.tokenizer.token_bytes(id);
                    let piece = match std::str::from_utf8(bytes) {
                        Ok(s) => json!(s),
                        Err(_) => json!(bytes),
                    };
                    json!({"id": id, "piece": piece})
                })
                .collect()
        } else {
            ids.iter().map(|&id| json!(id)).collect()
        };
        Ok(json!({ "tokens": tokens }))
    })())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DetokenizeRequest {
    tokens: Vec<u32>,
}

/// `POST /detokenize`: `{"tokens": [ids]}` → `{"content": text}` (special tokens
/// rendered as their text, as llama-server does).
pub async fn detokenize(
    State(state): State<AppState>,
    b: Result<Bytes, BytesRejection>,
) -> Response {
    answer((|| {
        let req: DetokenizeRequest = parse_json(&body(&state, b)?)?;
        let be = backend(&state)?;
        let vocab = be.tokenizer.vocab_size();
        if let Some(bad) = req.tokens.iter().find(|&&id| id as usize >= vocab) {
            return Err(ApiError::bad_request(
                format!("token id {bad} is outside the vocabulary of {vocab}"),
                Some("tokens"),
            ));
        }
        let bytes: Vec<u8> = req
            .tokens
            .iter()
            .flat_map(|&id| be.tokenizer.token_bytes(id).iter().copied())
            .collect();
        Ok(json!({ "content": String::from_utf8_lossy(&bytes) }))
    })())
}

#[derive(Deserialize)]
struct ApplyTemplateRequest {
    messages: Vec<Value>,
    #[serde(default)]
    add_generation_prompt: Option<bool>,
    #[serde(default)]
    continue_final_message: Option<bool>,
    #[serde(default)]
    tools: Option<Value>,
    #[serde(default)]
    tool_choice: Option<Value>,
    #[serde(default)]
    parallel_tool_calls: Option<bool>,
    #[serde(default)]
    chat_template_kwargs: Option<Value>,
}

/// `POST /apply-template`: `{"messages": [...]}` (with the chat endpoint's render fields:
/// `add_generation_prompt`, `continue_final_message`, `tools`, `tool_choice`,
/// `parallel_tool_calls`, `chat_template_kwargs`) → `{"prompt": text}`, the text
/// `/v1/chat/completions` would tokenize.
pub async fn apply_template(
    State(state): State<AppState>,
    b: Result<Bytes, BytesRejection>,
) -> Response {
    answer((|| {
        let req: ApplyTemplateRequest = parse_json(&body(&state, b)?)?;
        let be = backend(&state)?;
        let opts =
            crate::handlers::render_options(req.add_generation_prompt, req.continue_final_message)?;
        let fields = ToolFields {
            tools: req.tools.as_ref(),
            tool_choice: req.tool_choice.as_ref(),
            parallel_tool_calls: req.parallel_tool_calls,
            chat_template_kwargs: req.chat_template_kwargs.as_ref(),
        };
        let rendered = render_chat(
            &be.tokenizer,
            be.template.as_deref(),
            req.messages,
            fields,
            &opts,
        )?;
        Ok(json!({ "prompt": rendered.text }))
    })())
}
