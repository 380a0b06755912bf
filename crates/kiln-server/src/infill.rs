//! `POST /infill`: llama-server's fill-in-the-middle request (`input_prefix`, `input_suffix`,
//! `input_extra`, `prompt`, `n_predict`, `n_indent`); the prompt layout and the indent stop
//! are in `fim.rs`.

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::response::Response;
use serde::Deserialize;

use crate::error::ApiError;
use crate::fields::Endpoint;
use crate::handlers::{body_bytes, check_model, finish, read_request, ready, respond};
use crate::params;
use crate::state::AppState;
use crate::stream::{Kind, StreamCtx};
use crate::wire::Common;

use crate::fim::{ExtraChunk, FimInput, fim_prompt};

/// `POST /infill`.
#[derive(Debug, Clone, Deserialize)]
struct InfillRequest {
    #[serde(flatten)]
    common: Common,
    #[serde(default)]
    input_prefix: Option<String>,
    #[serde(default)]
    input_suffix: Option<String>,
    #[serde(default)]
    input_extra: Option<Vec<ExtraChunk>>,
    #[serde(default)]
    prompt: Option<String>,
    #[serde(default)]
    n_predict: Option<i64>,
    #[serde(default)]
    n_indent: Option<i64>,
}

/// `POST /infill`: the FIM prompt of `input_prefix`, `input_suffix`, `input_extra` and
/// `prompt`, completed with the generation fields (`max_tokens` or llama-server's
/// `n_predict`; default: until an end-of-generation token or the context's end), answered
/// in `/v1/completions`' shape, streamed with `stream: true`.
pub async fn infill(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    state.count(|c| c.http_requests += 1);
    let r = async {
        let bytes = body_bytes(body, state.config().max_body_bytes)?;
        let req: InfillRequest = read_request(&bytes, Endpoint::Infill, state.config())?;
        let b = ready(&state)?;
        check_model(b, req.common.model.as_deref())?;
        let prefix = req.input_prefix.as_deref().ok_or_else(|| {
            ApiError::bad_request("input_prefix is required", Some("input_prefix"))
        })?;
        let suffix = req.input_suffix.as_deref().ok_or_else(|| {
            ApiError::bad_request("input_suffix is required", Some("input_suffix"))
        })?;
        if req.n_predict.is_some() && req.common.max_tokens.is_some() {
            return Err(ApiError::bad_request(
                "give max_tokens or n_predict, not both",
                Some("n_predict"),
            ));
        }
        let n_indent = match req.n_indent {
            None => 0,
            Some(n) if n < 0 => {
                return Err(ApiError::bad_request(
                    format!("n_indent must be 0 or more (got {n})"),
                    Some("n_indent"),
                ));
            }
            Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
        };
        if n_indent > 0 && req.common.stream == Some(true) {
            return Err(ApiError::bad_request(
                "n_indent is supported without streaming only (text already sent cannot be cut)",
                Some("n_indent"),
            ));
        }
        // llama-server's n_predict −1 is "no limit".
        let max_tokens = match req.n_predict {
            Some(-1) => None,
            Some(n) => Some(n),
            None => req.common.max_tokens,
        };
        let p = params::parse(
            &req.common,
            max_tokens,
            None,
            b.tokenizer.vocab_size(),
            state.config(),
        )?;
        let ids = fim_prompt(
            &b.tokenizer,
            &FimInput {
                prefix,
                suffix,
                extra: req.input_extra.as_deref().unwrap_or(&[]),
                prompt: req.prompt.as_deref().unwrap_or(""),
            },
            "input_prefix",
        )?;
        let mut ctx = StreamCtx::new(&state, Kind::Completion, false);
        ctx.n_indent = n_indent;
        respond(&state, b, &p, vec![ids], ctx, "input_prefix").await
    }
    .await;
    finish(&state, r)
}
