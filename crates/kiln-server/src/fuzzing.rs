//! Request parsing without a model or an engine, for the `server_request` fuzz target
//! (`crates/kiln-fuzz`, `fuzz/`). Not part of the API: hidden from the docs, may change.
//!
//! [`parse_request`] runs exactly what a handler runs between reading the body and
//! submitting to the engine: the body-size limit, JSON parsing, field validation, the chat
//! template, tokenization, `n`, the prompt-token and context checks.

use kiln_engine::Request;
use kiln_tokenizer::Tokenizer;
use kiln_tokenizer::chat::ChatTemplate;

pub use crate::error::ApiError;
pub use crate::fields::Endpoint;
use crate::handlers::{prepare_chat, prepare_completion, read_request};
use crate::state::ServerConfig;
use crate::wire::{ChatRequest, CompletionRequest};

/// What a valid body becomes: the engine requests (every choice of every prompt) and
/// whether the answer streams.
#[derive(Debug)]
pub struct Parsed {
    pub requests: Vec<Request>,
    pub stream: bool,
}

/// Parses and validates `body` as the endpoint would for a model with `tokenizer`,
/// `template` and a context of `n_ctx` tokens.
pub fn parse_request(
    endpoint: Endpoint,
    body: &[u8],
    tokenizer: &Tokenizer,
    template: Option<&ChatTemplate>,
    n_ctx: usize,
    limits: &ServerConfig,
) -> Result<Parsed, ApiError> {
    if body.len() > limits.max_body_bytes {
        return Err(ApiError::too_large(limits.max_body_bytes));
    }
    let (p, prompts, param) = match endpoint {
        Endpoint::Completions => {
            let req: CompletionRequest = read_request(body, endpoint, limits)?;
            let (p, prompts, _) = prepare_completion(req, tokenizer, limits)?;
            (p, prompts, "prompt")
        }
        Endpoint::Chat => {
            let req: ChatRequest = read_request(body, endpoint, limits)?;
            let (p, (prompt, _), _) = prepare_chat(req, tokenizer, template, limits)?;
            (p, vec![prompt], "messages")
        }
        Endpoint::Messages | Endpoint::CountTokens => {
            let (p, prompt) =
                crate::anthropic::parse_for_fuzzing(endpoint, body, tokenizer, template, limits)?;
            (p, vec![prompt], "messages")
        }
        Endpoint::Embeddings | Endpoint::Infill => {
            return Err(ApiError::bad_request(
                "parse_request takes /v1/completions or /v1/chat/completions",
                None,
            ));
        }
    };
    let mut requests = Vec::new();
    for prompt in prompts {
        requests.extend(crate::params::requests(&p, prompt, n_ctx, limits, param)?);
    }
    Ok(Parsed {
        requests,
        stream: p.stream,
    })
}
