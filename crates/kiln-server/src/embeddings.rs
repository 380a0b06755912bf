//! Embeddings: OpenAI's `POST /v1/embeddings` and llama-server's `POST /embedding`. Each
//! input is evaluated in a session of its own (a KV cache sized to the input, beside the
//! engine's), its final hidden states (after the output norm) are pooled as the server's
//! `pooling` says (else as the model file declares; else none, as llama-server), and the
//! pooled vector is normalised (`embd_normalize`, default 2: unit Euclidean length).
//!
//! As llama-server: with no pooling, `/v1/embeddings` is a 400 (one vector per token is
//! not OpenAI's shape) and `/embedding` answers every token's unnormalised state.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::response::{IntoResponse, Response};
use kiln_model::{Model, Pooling, Session, normalize_embedding};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::fields::Endpoint;
use crate::handlers::{body_bytes, check_model, finish, read_request, ready};
use crate::state::{AppState, Backend};
use crate::wire::Prompt;

/// The most inputs one request may hold (OpenAI's limit).
pub const MAX_INPUTS: usize = 2048;

/// The body of both endpoints (the field list in `fields.rs` decides which are known).
#[derive(Deserialize)]
struct EmbeddingRequest {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    input: Option<Prompt>,
    #[serde(default)]
    content: Option<Prompt>,
    #[serde(default)]
    encoding_format: Option<String>,
    #[serde(default)]
    dimensions: Option<i64>,
    #[serde(default)]
    embd_normalize: Option<i32>,
}

/// Which answer shape.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    OpenAi,
    Llama,
}

/// `POST /v1/embeddings`: `{"input": text | [texts] | [ids] | [[ids]], "encoding_format":
/// "float" | "base64", "dimensions", "user"}` → `{"object":"list","data":[{"object":
/// "embedding","index","embedding"}],"model","usage"}`.
pub async fn openai(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    state.count(|c| c.http_requests += 1);
    let r = embed(&state, body, Shape::OpenAi).await;
    finish(&state, r)
}

/// `POST /embedding` (llama-server's): `{"content"}` (or `input`) → `[{"index",
/// "embedding": [[…]]}]`: one pooled vector per input, or one per token without pooling.
pub async fn llama(State(state): State<AppState>, body: Result<Bytes, BytesRejection>) -> Response {
    state.count(|c| c.http_requests += 1);
    let r = embed(&state, body, Shape::Llama).await;
    finish(&state, r)
}

/// The pooling the server uses: its `pooling` setting, else the model's declared one, else
/// none.
fn pooling(state: &AppState, model: &Model) -> Pooling {
    state
        .config()
        .pooling
        .or(model.declared_pooling())
        .unwrap_or(Pooling::None)
}

async fn embed(
    state: &AppState,
    body: Result<Bytes, BytesRejection>,
    shape: Shape,
) -> Result<Response, ApiError> {
    let bytes = body_bytes(body, state.config().max_body_bytes)?;
    let req: EmbeddingRequest = read_request(&bytes, Endpoint::Embeddings, state.config())?;
    let b = ready(state)?;
    check_model(b, req.model.as_deref())?;
    let model = Arc::clone(b.engine.model());
    let pooling = pooling(state, &model);
    if shape == Shape::OpenAi && pooling == Pooling::None {
        return Err(ApiError::bad_request(
            "pooling 'none' (one vector per token) is not OpenAI-compatible, and this model \
             declares no pooling: start kiln serve with --pooling mean, cls or last, or use \
             /embedding for per-token vectors",
            None,
        ));
    }
    let d = model.embedding_len();
    if let Some(n) = req.dimensions
        && n != d as i64
    {
        return Err(ApiError::bad_request(
            format!(
                "dimensions must be this model's embedding length, {d} (reducing it is not \
                 supported; got {n})"
            ),
            Some("dimensions"),
        ));
    }
    let base64 = match req.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(ApiError::bad_request(
                format!("encoding_format must be float or base64 (got {other:?})"),
                Some("encoding_format"),
            ));
        }
    };
    let norm = req.embd_normalize.unwrap_or(2);
    if norm < -1 {
        return Err(ApiError::bad_request(
            format!(
                "embd_normalize must be -1 (none), 0 (int16 range), 1 (taxicab), 2 (Euclidean) \
                 or a larger p-norm (got {norm})"
            ),
            Some("embd_normalize"),
        ));
    }
    let (param, input) = match (req.input, req.content) {
        (Some(i), _) => ("input", i),
        (None, Some(c)) => ("content", c),
        (None, None) => {
            return Err(ApiError::bad_request(
                "input is required (a string, strings, token ids, or lists of token ids)",
                Some("input"),
            ));
        }
    };
    let inputs = tokenize(b, input, param, state)?;
    let _slot = state.admit()?;
    let n_batch = b.engine.config().max_batch_tokens.max(1);
    let (vectors, prompt_tokens) = tokio::task::spawn_blocking(move || {
        let mut out = Vec::with_capacity(inputs.len());
        let mut tokens = 0;
        for ids in &inputs {
            out.push(embed_one(&model, ids, pooling, norm, n_batch)?);
            tokens += ids.len();
        }
        Ok::<_, ApiError>((out, tokens))
    })
    .await
    .map_err(|e| ApiError::internal(format!("the embedding task failed: {e}")))??;
    let body = match shape {
        Shape::OpenAi => {
            let data: Vec<Value> = vectors
                .iter()
                .enumerate()
                .map(|(index, v)| {
                    // Pooled: exactly one vector per input.
                    let v = v.first().map_or(&[][..], Vec::as_slice);
                    let embedding = if base64 {
                        json!(base64_f32(v))
                    } else {
                        json!(v)
                    };
                    json!({"object": "embedding", "index": index, "embedding": embedding})
                })
                .collect();
            json!({
                "object": "list",
                "data": data,
                "model": b.model_id,
                "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
            })
        }
        Shape::Llama => Value::Array(
            vectors
                .iter()
                .enumerate()
                .map(|(index, v)| json!({"index": index, "embedding": v}))
                .collect(),
        ),
    };
    Ok(axum::Json(body).into_response())
}

/// The token ids of every input (special tokens added and parsed, as llama-server), each
/// non-empty and within the context the server serves.
fn tokenize(
    b: &Backend,
    input: Prompt,
    param: &'static str,
    state: &AppState,
) -> Result<Vec<Vec<u32>>, ApiError> {
    let encode = |text: &str| {
        b.tokenizer.encode(text, true, true).map_err(|e| {
            ApiError::bad_request(format!("cannot tokenize the input: {e}"), Some(param))
        })
    };
    let inputs: Vec<Vec<u32>> = match input {
        Prompt::Text(t) => vec![encode(&t)?],
        Prompt::Texts(ts) => ts.iter().map(|t| encode(t)).collect::<Result<_, _>>()?,
        Prompt::Tokens(ids) => vec![ids],
        Prompt::TokenLists(lists) => lists,
    };
    if inputs.is_empty() {
        return Err(ApiError::bad_request("input is empty", Some(param)));
    }
    if inputs.len() > MAX_INPUTS {
        return Err(ApiError::bad_request(
            format!(
                "input has {} items; at most {MAX_INPUTS} per request",
                inputs.len()
            ),
            Some(param),
        ));
    }
    let vocab = b.tokenizer.vocab_size();
    let n_ctx = b.engine.config().n_ctx;
    let limit = state
        .config()
        .max_prompt_tokens
        .map_or(n_ctx, |m| m.min(n_ctx));
    for ids in &inputs {
        if ids.is_empty() {
            return Err(ApiError::bad_request(
                "an input has no tokens; input content cannot be empty",
                Some(param),
            ));
        }
        if let Some(bad) = ids.iter().find(|&&id| id as usize >= vocab) {
            return Err(ApiError::bad_request(
                format!("token id {bad} is outside the vocabulary of {vocab}"),
                Some(param),
            ));
        }
        if ids.len() > limit {
            return Err(ApiError::bad_request(
                format!(
                    "an input has {} tokens; this server embeds at most {limit} tokens per input \
                     (the context length, or max_prompt_tokens)",
                    ids.len()
                ),
                Some(param),
            )
            .with_code("context_length_exceeded"));
        }
    }
    Ok(inputs)
}

/// One input's vectors: the pooled one (normalised), or every token's (pooling none, as
/// llama-server: not normalised).
fn embed_one(
    model: &Arc<Model>,
    ids: &[u32],
    pooling: Pooling,
    norm: i32,
    n_batch: usize,
) -> Result<Vec<Vec<f32>>, ApiError> {
    let mut session = Session::new(Arc::clone(model), ids.len(), n_batch.min(ids.len()));
    let hidden = session
        .hidden_states(ids)
        .map_err(|e| ApiError::internal(format!("the embedding pass failed: {e}")))?;
    let mut vectors = pooling.pool(hidden, model.embedding_len());
    if pooling != Pooling::None {
        for v in &mut vectors {
            normalize_embedding(v, norm);
        }
    }
    Ok(vectors)
}

/// `v` as little-endian f32 bytes in standard base64 (OpenAI's `encoding_format: base64`).
fn base64_f32(v: &[f32]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_is_the_standard_alphabet_with_padding() {
        // 1.0f32 = 00 00 80 3f.
        assert_eq!(base64_f32(&[1.0]), "AACAPw==");
        assert_eq!(base64_f32(&[1.0, -2.0]), "AACAPwAAAMA=");
        assert_eq!(base64_f32(&[]), "");
    }
}
