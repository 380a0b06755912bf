//! Errors in OpenAI's shape: `{"error":{"message","type","param","code"}}` with the HTTP
//! status a client expects.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use kiln_engine::EngineError;
use serde::Serialize;

/// An error answered to the client.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// OpenAI's `type`: `invalid_request_error`, `not_found_error`, `rate_limit_error`,
    /// `server_error`, `service_unavailable_error`.
    pub kind: &'static str,
    pub param: Option<&'static str>,
    pub code: Option<&'static str>,
}

#[derive(Serialize)]
struct Body<'a> {
    error: Inner<'a>,
}

#[derive(Serialize)]
struct Inner<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    param: Option<&'a str>,
    code: Option<&'a str>,
}

impl ApiError {
    pub fn bad_request(message: impl Into<String>, param: Option<&'static str>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            param,
            code: None,
        }
    }

    pub fn with_code(mut self, code: &'static str) -> ApiError {
        self.code = Some(code);
        self
    }

    pub fn model_not_found(requested: &str, served: &str) -> ApiError {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: format!(
                "The model `{requested}` does not exist; this server serves `{served}`."
            ),
            kind: "invalid_request_error",
            param: Some("model"),
            code: Some("model_not_found"),
        }
    }

    pub fn context_length(prompt: usize, max_tokens: usize, n_ctx: usize) -> ApiError {
        ApiError::bad_request(
            format!(
                "This model's maximum context length is {n_ctx} tokens. However, you requested \
                 {} tokens ({prompt} in the messages, {max_tokens} in the completion). Please \
                 reduce the length of the messages or completion.",
                prompt + max_tokens
            ),
            Some("messages"),
        )
        .with_code("context_length_exceeded")
    }

    /// More generation requests in flight than `max_concurrent_requests`.
    pub fn concurrency(limit: usize) -> ApiError {
        ApiError {
            status: StatusCode::TOO_MANY_REQUESTS,
            message: format!(
                "the server is busy: {limit} requests are in flight (max_concurrent_requests {limit}); retry later"
            ),
            kind: "rate_limit_error",
            param: None,
            code: Some("concurrency_limit_exceeded"),
        }
    }

    /// A body over `max_body_bytes`.
    pub fn too_large(limit: usize) -> ApiError {
        ApiError {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            message: format!("the request body is larger than {limit} bytes (max_body_bytes)"),
            kind: "invalid_request_error",
            param: None,
            code: Some("request_too_large"),
        }
    }

    /// A prompt over `max_prompt_tokens`.
    pub fn prompt_too_long(prompt: usize, limit: usize, param: &'static str) -> ApiError {
        ApiError::bad_request(
            format!(
                "the prompt has {prompt} tokens; this server accepts at most {limit} (max_prompt_tokens)"
            ),
            Some(param),
        )
        .with_code("prompt_too_long")
    }

    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: message.into(),
            kind: "service_unavailable_error",
            param: None,
            code: None,
        }
    }

    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: message.into(),
            kind: "server_error",
            param: None,
            code: None,
        }
    }

    /// The JSON body.
    pub fn body(&self) -> String {
        let b = Body {
            error: Inner {
                message: &self.message,
                kind: self.kind,
                param: self.param,
                code: self.code,
            },
        };
        serde_json::to_string(&b).unwrap_or_else(|_| String::from("{\"error\":{}}"))
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> ApiError {
        match e {
            EngineError::PromptTooLong {
                prompt_tokens,
                max_tokens,
                n_ctx,
            } => ApiError::context_length(prompt_tokens, max_tokens, n_ctx),
            EngineError::EmptyPrompt => {
                ApiError::bad_request("the prompt is empty", Some("prompt"))
            }
            EngineError::QueueFull { waiting, max_queue } => ApiError {
                status: StatusCode::TOO_MANY_REQUESTS,
                message: format!(
                    "the server is overloaded: {waiting} requests are waiting (max_queue {max_queue}); retry later"
                ),
                kind: "rate_limit_error",
                param: None,
                code: Some("queue_full"),
            },
            EngineError::ShuttingDown => ApiError::unavailable("the server is shutting down"),
            EngineError::InvalidRequest(m) => ApiError::bad_request(m, None),
            e @ (EngineError::Model(_)
            | EngineError::Sampling(_)
            | EngineError::ThreadStart { .. }
            | EngineError::Panic(_)) => ApiError::internal(e.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status,
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            self.body(),
        )
            .into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_errors_map_to_openai_statuses_and_codes() {
        let e: ApiError = EngineError::PromptTooLong {
            prompt_tokens: 10,
            max_tokens: 20,
            n_ctx: 16,
        }
        .into();
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert_eq!(e.code, Some("context_length_exceeded"));
        assert!(
            e.message.contains("maximum context length is 16"),
            "{}",
            e.message
        );
        let q: ApiError = EngineError::QueueFull {
            waiting: 3,
            max_queue: 3,
        }
        .into();
        assert_eq!(q.status, StatusCode::TOO_MANY_REQUESTS);
        let s: ApiError = EngineError::ShuttingDown.into();
        assert_eq!(s.status, StatusCode::SERVICE_UNAVAILABLE);
        let m: ApiError =
            EngineError::from(kiln_model::ModelError::InvalidBatch("boom".into())).into();
        assert_eq!(m.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(m.message.contains("boom"), "{}", m.message);
    }

    #[test]
    fn error_body_has_the_four_openai_fields() {
        let v: serde_json::Value =
            serde_json::from_str(&ApiError::model_not_found("gpt-4", "smollm2-135m").body())
                .unwrap();
        let e = &v["error"];
        assert_eq!(e["type"], "invalid_request_error");
        assert_eq!(e["param"], "model");
        assert_eq!(e["code"], "model_not_found");
        assert!(e["message"].as_str().unwrap().contains("gpt-4"));
    }
}
