//! HTTP request bodies of the server: everything `kiln-server` does between reading a body
//! and submitting to the engine (`kiln_server::fuzzing::parse_request`), on the real
//! TinyStories-260K tokenizer and SmolLM2's / Qwen2.5-Coder's / Gemma 3's chat templates.

use kiln_server::ServerConfig;
use kiln_server::fuzzing::{Endpoint, parse_request};

/// Byte 0: bit 0 the endpoint (set: chat), bits 1–2 the template, bits 3–4 the context
/// (64, 512, 4096 or 32 tokens). The rest is the body. A valid body must become engine
/// requests within every limit; an invalid one a 4xx error with a message.
pub fn server_request(data: &[u8]) {
    let (mode, body) = crate::split_mode(data);
    let endpoint = if mode & 1 != 0 {
        Endpoint::Chat
    } else {
        Endpoint::Completions
    };
    let templates = crate::tokenizer::templates();
    let template = &templates[usize::from((mode >> 1) & 3) % templates.len()];
    let n_ctx = [64, 512, 4096, 32][usize::from((mode >> 3) & 3)];
    let limits = ServerConfig {
        max_n: 4,
        max_prompt_tokens: Some(n_ctx / 2),
        max_body_bytes: 1 << 16,
        ..ServerConfig::default()
    };
    let tok = crate::tokenizer::stories();
    match parse_request(endpoint, body, tok, Some(template), n_ctx, &limits) {
        Ok(parsed) => {
            let n = parsed.requests.len();
            assert!(
                (1..=limits.max_n).contains(&n),
                "{n} engine requests for max_n {}",
                limits.max_n
            );
            for r in &parsed.requests {
                assert!(!r.prompt.is_empty(), "an empty prompt was accepted");
                assert!(
                    r.prompt.len() <= n_ctx / 2,
                    "a prompt of {} tokens passed max_prompt_tokens {}",
                    r.prompt.len(),
                    n_ctx / 2
                );
                assert!(
                    r.max_tokens >= 1 && r.prompt.len() + r.max_tokens <= n_ctx,
                    "prompt {} + max_tokens {} over the context {n_ctx}",
                    r.prompt.len(),
                    r.max_tokens
                );
                assert!(
                    r.prompt.iter().all(|&id| (id as usize) < tok.vocab_size()),
                    "a token id outside the vocabulary was accepted"
                );
                assert!(
                    r.sampling.validate().is_ok(),
                    "invalid sampling settings accepted"
                );
                assert!(r.stop.iter().all(|s| !s.is_empty()), "an empty stop string");
            }
        }
        Err(e) => {
            assert!(
                e.status.is_client_error(),
                "a request body caused a {} ({})",
                e.status,
                e.message
            );
            assert!(!e.message.is_empty(), "an error without a message");
        }
    }
}
